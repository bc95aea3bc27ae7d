#include "runtime/engine.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/kv_cache.h"
#include "runtime/test_util.h"
#include "runtime/tracer.h"

namespace densegate::runtime {
namespace {

using kernels::KvFormat;

class Collector : public RequestObserver {
 public:
  void OnFinished(RequestResult r) override {
    absl::MutexLock lock(&mu_);
    ++calls_[r.id];
    results_[r.id] = std::move(r);
  }
  std::map<int64_t, RequestResult> results() {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, n] : calls_) EXPECT_EQ(n, 1) << "request " << id;
    return results_;
  }

 private:
  absl::Mutex mu_;
  std::map<int64_t, RequestResult> results_;
  std::map<int64_t, int> calls_;
};

struct Case {
  Request request;
  std::vector<int32_t> expected;
};

// Prompts crossing the prefill alignment, outputs from 1 token up.
std::vector<Case> MakeCases(const HybridModel& model, KvFormat format,
                            int count = 10) {
  std::vector<Case> cases;
  const int vocab = model.config().vocab_size;
  for (int i = 0; i < count; ++i) {
    Case c;
    c.request.id = i;
    c.request.prompt =
        testing::RandomPrompt(1 + (i * 37) % 150, 500 + i, vocab);
    c.request.max_new_tokens = 1 + (i * 7) % 20;
    absl::StatusOr<testing::Generation> gen = testing::GenerateAlone(
        model, c.request.prompt, c.request.max_new_tokens, format);
    EXPECT_TRUE(gen.ok()) << gen.status();
    c.expected = gen->tokens;
    cases.push_back(std::move(c));
  }
  return cases;
}

EngineOptions Epd(int workers, int batch) {
  EngineOptions o;
  o.mode = EngineMode::kEpd;
  o.encode_workers = o.prefill_workers = o.transfer_workers = o.decode_workers =
      workers;
  o.max_batch_size = batch;
  o.token_budget = 128;  // Prompts over 128 tokens take two chunks.
  return o;
}

EngineOptions Colocated(int workers, int batch) {
  EngineOptions o;
  o.mode = EngineMode::kColocated;
  o.colocated_workers = workers;
  o.max_batch_size = batch;
  o.token_budget = batch + 64;  // Chunks of 64 (then whatever is left).
  return o;
}

std::map<int64_t, RequestResult> RunEngine(const HybridModel& model,
                                           const EngineOptions& options,
                                           const std::vector<Request>& requests,
                                           MemoryReport* memory = nullptr,
                                           StageStats* stats = nullptr) {
  Collector collector;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(&model, options, &collector);
  EXPECT_TRUE(engine.ok()) << engine.status();
  for (const Request& r : requests) (*engine)->Submit(r);
  (*engine)->WaitIdle();
  if (memory != nullptr) *memory = (*engine)->Memory();
  if (stats != nullptr) {
    stats->transfers = (*engine)->stats().transfers.load();
    stats->transfer_bytes = (*engine)->stats().transfer_bytes.load();
    stats->decode_steps = (*engine)->stats().decode_steps.load();
    stats->decode_rows = (*engine)->stats().decode_rows.load();
  }
  return collector.results();
}

std::vector<Request> Requests(const std::vector<Case>& cases) {
  std::vector<Request> r;
  for (const Case& c : cases) r.push_back(c.request);
  return r;
}

void ExpectTokens(const std::vector<Case>& cases,
                  const std::map<int64_t, RequestResult>& results,
                  const std::string& what) {
  ASSERT_EQ(results.size(), cases.size()) << what;
  for (const Case& c : cases) {
    const RequestResult& r = results.at(c.request.id);
    ASSERT_TRUE(r.status.ok()) << what << ": " << r.status;
    EXPECT_EQ(r.tokens, c.expected) << what << ", request " << c.request.id;
    EXPECT_EQ(r.token_times_ns.size(), r.tokens.size());
  }
}

// Greedy tokens are identical in every mode, batch size and thread count:
// each equals the sequence generated alone (so EPD equals colocated).
class EngineModeTest : public ::testing::TestWithParam<EngineMode> {
 protected:
  EngineOptions Options(int workers, int batch) const {
    return GetParam() == EngineMode::kEpd ? Epd(workers, batch)
                                          : Colocated(workers, batch);
  }
};

TEST_P(EngineModeTest, TokensDoNotDependOnBatchOrThreads) {
  auto model = testing::TinyModel();
  const std::vector<Case> cases = MakeCases(*model, KvFormat::kFp32);
  const std::vector<Request> requests = Requests(cases);
  for (int batch : {1, 4, 8}) {
    ExpectTokens(cases, RunEngine(*model, Options(1, batch), requests),
                 "batch " + std::to_string(batch));
  }
  ExpectTokens(cases, RunEngine(*model, Options(2, 4), requests), "2 workers");
}

INSTANTIATE_TEST_SUITE_P(Modes, EngineModeTest,
                         ::testing::Values(EngineMode::kEpd,
                                           EngineMode::kColocated),
                         [](const ::testing::TestParamInfo<EngineMode>& info) {
                           return std::string(EngineModeName(info.param));
                         });

TEST(EngineTest, QuantizedCacheIsModeIndependentToo) {
  auto model = testing::TinyModel();
  const std::vector<Case> cases = MakeCases(*model, KvFormat::kInt8, 6);
  EngineOptions epd = Epd(1, 4), colocated = Colocated(1, 4);
  epd.kv_format = colocated.kv_format = KvFormat::kInt8;
  ExpectTokens(cases, RunEngine(*model, epd, Requests(cases)), "epd int8");
  ExpectTokens(cases, RunEngine(*model, colocated, Requests(cases)),
               "colocated int8");
}

TEST(EngineTest, BadRequestsFailAloneWithClearErrors) {
  auto model = testing::TinyModel();
  const ModelConfig& config = model->config();
  std::vector<Case> good = MakeCases(*model, KvFormat::kFp32, 4);
  std::vector<Request> requests = Requests(good);
  struct Bad {
    Request request;
    std::string must_mention;
  };
  std::vector<Bad> bad(5);
  bad[0].request.prompt = {};
  bad[0].must_mention = "'prompt' is empty";
  bad[1].request.prompt = {1, 2};
  bad[1].request.max_new_tokens = 0;
  bad[1].must_mention = "'max_new_tokens'";
  bad[2].request.prompt = std::vector<int32_t>(config.max_context, 3);
  bad[2].request.max_new_tokens = 1;
  bad[2].must_mention = "max_context";
  bad[3].request.prompt = {1, config.vocab_size + 5, 2};
  bad[3].must_mention = "'prompt[1]'";
  // Valid for the model but larger than the whole KV cache (256 tokens).
  bad[4].request.prompt = std::vector<int32_t>(300, 4);
  bad[4].request.max_new_tokens = 2;
  bad[4].must_mention = "blocks";
  for (size_t i = 0; i < bad.size(); ++i) {
    bad[i].request.id = 100 + i;
    // Interleaved with the good ones.
    requests.insert(requests.begin() + 2 * i, bad[i].request);
  }
  for (EngineOptions options : {Epd(1, 4), Colocated(1, 4)}) {
    options.kv_cache_tokens = 256;
    const auto results = RunEngine(*model, options, requests);
    const std::string mode(EngineModeName(options.mode));
    for (const Bad& b : bad) {
      const RequestResult& r = results.at(b.request.id);
      ASSERT_FALSE(r.status.ok())
          << mode << " accepted request " << b.request.id;
      EXPECT_NE(std::string(r.status.message()).find(b.must_mention),
                std::string::npos)
          << mode << ": " << r.status;
    }
    std::map<int64_t, RequestResult> good_results;
    for (const Case& c : good)
      good_results[c.request.id] = results.at(c.request.id);
    ExpectTokens(good, good_results, mode);
  }
}

TEST(EngineTest, RequestsWaitForCacheSpaceAndCachesEndEmpty) {
  auto model = testing::TinyModel();
  const int vocab = model->config().vocab_size;
  std::vector<Case> cases;
  for (int i = 0; i < 8; ++i) {
    Case c;
    c.request.id = i;
    c.request.prompt = testing::RandomPrompt(50, 900 + i, vocab);
    c.request.max_new_tokens = 31;  // 80 cached tokens: 5 blocks.
    c.expected = testing::GenerateAlone(*model, c.request.prompt, 31)->tokens;
    cases.push_back(std::move(c));
  }
  for (EngineOptions options : {Epd(1, 8), Colocated(2, 8)}) {
    options.kv_cache_tokens = 160;  // Two requests at a time.
    MemoryReport memory;
    StageStats stats;
    ExpectTokens(cases,
                 RunEngine(*model, options, Requests(cases), &memory, &stats),
                 std::string(EngineModeName(options.mode)));
    EXPECT_EQ(memory.in_use_bytes, 0);
    EXPECT_GT(memory.attention_kv_peak_bytes, 0);
    // 10 blocks per cache; EPD has two (prefill and decode).
    const int caches = options.mode == EngineMode::kEpd ? 2 : 1;
    EXPECT_LE(memory.attention_kv_peak_bytes,
              caches * 10 * memory.kv_block_bytes);
    EXPECT_GT(memory.kda_state_peak_bytes, 0);
    EXPECT_GT(stats.decode_steps.load(), 0);
    if (options.mode == EngineMode::kEpd) {
      EXPECT_EQ(stats.transfers.load(), 8);
      EXPECT_GT(stats.transfer_bytes.load(), 0);
    } else {
      EXPECT_EQ(stats.transfers.load(), 0);
    }
  }
}

// A memory budget holds as many blocks as fit in the cache's format: the
// same KiB serve four times the requests at once in fp8 as in fp32.
TEST(EngineTest, AMemoryBudgetHoldsMoreRequestsInADenserFormat) {
  auto model = testing::TinyModel();
  const ModelConfig& config = model->config();
  std::vector<Request> requests(8);
  for (int i = 0; i < 8; ++i) {
    requests[i].id = i;
    requests[i].prompt = testing::RandomPrompt(50, 700 + i, config.vocab_size);
    requests[i].max_new_tokens = 31;  // 80 cached tokens: 5 blocks.
  }
  KvCacheOptions kv;
  kv.num_layers = config.num_attention_layers();
  kv.num_kv_heads = config.attn_kv_heads;
  kv.head_dim = config.attn_head_dim;
  kv.block_size = config.kv_block_size;
  kv.format = kernels::KvFormat::kFp32;
  const size_t fp32_block = PagedKvCache::BlockBytes(kv);
  ASSERT_GT(fp32_block, 0u);
  // Ten fp32 blocks (two requests); forty fp8 blocks (all eight).
  const int kib = static_cast<int>((10 * fp32_block + 1023) / 1024);
  std::map<kernels::KvFormat, int64_t> peak_blocks;
  for (kernels::KvFormat format :
       {kernels::KvFormat::kFp32, kernels::KvFormat::kFp8E4M3}) {
    EngineOptions options = Colocated(1, 8);
    options.kv_format = format;
    options.kv_cache_kib = kib;
    MemoryReport memory;
    const auto results = RunEngine(*model, options, requests, &memory);
    for (const auto& [id, r] : results) EXPECT_TRUE(r.status.ok()) << id << ": " << r.status;
    EXPECT_LE(memory.attention_kv_peak_bytes, int64_t{kib} << 10);
    peak_blocks[format] = memory.attention_kv_peak_bytes / memory.kv_block_bytes;
  }
  EXPECT_LE(peak_blocks[kernels::KvFormat::kFp32], 11);
  EXPECT_GE(peak_blocks[kernels::KvFormat::kFp8E4M3], 20);

  EngineOptions both = Colocated(1, 8);
  both.kv_cache_tokens = 256;
  both.kv_cache_kib = 64;
  absl::Status s = ValidateEngineOptions(both);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("kv_cache_kib"), std::string::npos) << s;
}

// How requests overlap depends on thread timing; what a run must account
// for does not: one decode row per generated token after the first, and
// never more rows in a step than the batch limit. (decode_batch_test checks
// that members share steps.)
TEST(EngineTest, DecodeRowsAccountForEveryTokenWithinTheBatchLimit) {
  auto model = testing::TinyModel();
  std::vector<Request> requests(8);
  int64_t decoded = 0;
  for (int i = 0; i < 8; ++i) {
    requests[i].id = i;
    requests[i].prompt =
        testing::RandomPrompt(8, i, model->config().vocab_size);
    requests[i].max_new_tokens = 20 + 5 * i;
    decoded += requests[i].max_new_tokens - 1;
  }
  for (EngineOptions options : {Epd(1, 3), Colocated(2, 3)}) {
    StageStats stats;
    RunEngine(*model, options, requests, nullptr, &stats);
    EXPECT_EQ(stats.decode_rows.load(), decoded);
    EXPECT_LE(stats.decode_rows.load(), 3 * stats.decode_steps.load());
  }
}

TEST(EngineTest, TraceHasEveryStageAndLayerKind) {
  auto model = testing::TinyModel();
  const std::vector<Case> cases = MakeCases(*model, KvFormat::kFp32, 3);
  Tracer tracer(SteadyClock::Get());
  EngineOptions options = Epd(1, 4);
  options.tracer = &tracer;
  ExpectTokens(cases, RunEngine(*model, options, Requests(cases)), "traced");
  const nlohmann::json trace = nlohmann::json::parse(tracer.ToJson());
  std::set<std::string> names, threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      names.insert(e["name"].get<std::string>());
      EXPECT_GE(e["dur"].get<double>(), 0);
    } else if (e["ph"] == "M") {
      threads.insert(e["args"]["name"].get<std::string>());
    }
  }
  for (const char* n : {"encode", "prefill", "transfer", "decode_step", "kda",
                        "attention", "mlp", "lm_head"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  for (const char* t : {"encode-0", "prefill-0", "transfer-0", "decode-0"}) {
    EXPECT_TRUE(threads.count(t)) << t;
  }
}

TEST(EngineTest, DestroyingARunningEngineFinishesEveryRequestOnce) {
  auto model = testing::TinyModel();
  for (EngineOptions options : {Epd(1, 2), Colocated(1, 2)}) {
    Collector collector;
    {
      absl::StatusOr<std::unique_ptr<Engine>> engine =
          Engine::Create(model.get(), options, &collector);
      ASSERT_TRUE(engine.ok());
      for (int i = 0; i < 12; ++i) {
        Request r;
        r.id = i;
        r.prompt = testing::RandomPrompt(30, i, model->config().vocab_size);
        r.max_new_tokens = 200;
        (*engine)->Submit(r);
      }
    }
    const auto results = collector.results();
    ASSERT_EQ(results.size(), 12u);
    for (const auto& [id, r] : results) {
      EXPECT_TRUE(r.status.ok() || absl::IsCancelled(r.status)) << r.status;
    }
  }
}

TEST(EngineTest, BadOptionsNameTheOption) {
  auto model = testing::TinyModel();
  Collector collector;
  EngineOptions o = Colocated(1, 8);
  o.token_budget = 40;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model.get(), o, &collector);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(std::string(engine.status().message()).find("token_budget"),
            std::string::npos);
  o = Epd(1, 8);
  o.decode_workers = 0;
  engine = Engine::Create(model.get(), o, &collector);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(std::string(engine.status().message()).find("decode_workers"),
            std::string::npos);
}

}  // namespace
}  // namespace densegate::runtime
