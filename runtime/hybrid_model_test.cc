#include "runtime/hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/gemm.h"
#include "runtime/random.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

using testing::GenerateAlone;
using testing::RandomPrompt;
using testing::TinyModel;

double RelRms(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * double(out[i] - ref[i]);
    den += ref[i] * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// The batch invariance of everything below rests on kernels::Gemm
// computing row i from row i of A alone, whatever M (the decode path,
// M <= 96, reads B in place; larger M packs it).
TEST(HybridModelTest, GemmRowsDoNotDependOnTheBatch) {
  const int K = 300, N = 257;
  Rng rng(7);
  std::vector<float> a(130 * K), b(K * N);
  for (float& x : a) x = static_cast<float>(rng.Uniform(-1, 1));
  for (float& x : b) x = static_cast<float>(rng.Uniform(-1, 1));
  std::vector<float> all(130 * N), one(N);
  for (int m : {8, 130}) {
    ASSERT_TRUE(
        kernels::Gemm(m, N, K, a.data(), K, b.data(), N, all.data(), N).ok());
    for (int i = 0; i < m; i += 7) {
      ASSERT_TRUE(kernels::Gemm(1, N, K, a.data() + i * K, K, b.data(), N,
                                one.data(), N)
                      .ok());
      ASSERT_EQ(0,
                std::memcmp(one.data(), all.data() + i * N, N * sizeof(float)))
          << "row " << i << " of M=" << m;
    }
  }
}

TEST(HybridModelTest, GeneratesVariedTokensWithO1Logits) {
  auto model = TinyModel();
  const int vocab = model->config().vocab_size;
  for (uint64_t seed : {1, 2, 3}) {
    absl::StatusOr<testing::Generation> gen =
        GenerateAlone(*model, RandomPrompt(40, seed, vocab), 64);
    ASSERT_TRUE(gen.ok()) << gen.status();
    const std::set<int32_t> distinct(gen->tokens.begin(), gen->tokens.end());
    EXPECT_GE(distinct.size(), 32u) << "seed " << seed;
    int run = 1, longest = 1;
    for (size_t i = 1; i < gen->tokens.size(); ++i) {
      run = gen->tokens[i] == gen->tokens[i - 1] ? run + 1 : 1;
      longest = std::max(longest, run);
    }
    EXPECT_LT(longest, 4) << "seed " << seed;
    for (const std::vector<float>& logits : gen->logits) {
      double ss = 0;
      for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        ss += x * double(x);
      }
      const double rms = std::sqrt(ss / logits.size());
      EXPECT_GT(rms, 0.1);
      EXPECT_LT(rms, 10.0);
    }
  }
}

// N sequences prefilled into one cache, at chosen state slots.
class Fixture {
 public:
  Fixture(const HybridModel& model,
          const std::vector<std::vector<int32_t>>& prompts,
          const std::vector<int>& slots)
      : model_(model),
        c_(model.config()),
        states_("states", 8, c_.num_kda_layers(), c_.kda_heads,
                c_.kda_head_k_dim, c_.kda_head_v_dim, nullptr) {
    KvCacheOptions o;
    o.num_layers = c_.num_attention_layers();
    o.num_kv_heads = c_.attn_kv_heads;
    o.head_dim = c_.attn_head_dim;
    o.num_blocks = 64;
    kv_ = std::move(*PagedKvCache::Create(o, nullptr));
    for (size_t i = 0; i < prompts.size(); ++i) {
      Seq s;
      s.blocks = *kv_->Allocate(128);
      s.slot = slots[i];
      s.pos = static_cast<int>(prompts[i].size());
      states_.Clear(s.slot);
      std::vector<float> emb(prompts[i].size() * c_.hidden_size);
      std::vector<float> logits(c_.vocab_size);
      EXPECT_TRUE(model.Embed(prompts[i], emb.data()).ok());
      EXPECT_TRUE(model
                      .Prefill({kv_.get(), s.blocks, &states_, s.slot}, 0,
                               s.pos, emb.data(), logits.data(), &ctx_)
                      .ok());
      s.token = *GreedySample(logits);
      seqs_.push_back(std::move(s));
    }
  }

  // One decode step for the listed sequences, in that order; returns each
  // one's logits and advances it greedily.
  std::vector<std::vector<float>> Step(const std::vector<int>& which) {
    std::vector<DecodeRow> rows;
    for (int i : which) {
      rows.push_back(
          {seqs_[i].token, seqs_[i].pos, seqs_[i].blocks, seqs_[i].slot});
    }
    std::vector<float> logits(rows.size() * c_.vocab_size);
    EXPECT_TRUE(
        model_.DecodeStep(rows, kv_.get(), &states_, logits.data(), &ctx_)
            .ok());
    std::vector<std::vector<float>> out;
    for (size_t r = 0; r < which.size(); ++r) {
      out.emplace_back(logits.begin() + r * c_.vocab_size,
                       logits.begin() + (r + 1) * c_.vocab_size);
      Seq& s = seqs_[which[r]];
      s.token = *GreedySample(out.back());
      ++s.pos;
    }
    return out;
  }

 private:
  struct Seq {
    std::vector<int32_t> blocks;
    int slot, pos;
    int32_t token;
  };
  const HybridModel& model_;
  const ModelConfig& c_;
  std::unique_ptr<PagedKvCache> kv_;
  KdaStateStore states_;
  ForwardContext ctx_;
  std::vector<Seq> seqs_;
};

TEST(HybridModelTest, DecodeIsBatchInvariant) {
  auto model = TinyModel();
  const int vocab = model->config().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i)
    prompts.push_back(RandomPrompt(20 + 9 * i, 10 + i, vocab));
  // Each sequence alone; all four in slot order (one KdaDecode call); in a
  // scrambled order over scattered slots (one call per row); and joining
  // and leaving between steps.
  Fixture alone(*model, prompts, {0, 1, 2, 3});
  Fixture together(*model, prompts, {0, 1, 2, 3});
  Fixture scattered(*model, prompts, {6, 1, 4, 2});
  Fixture churn(*model, prompts, {0, 1, 2, 3});
  for (int step = 0; step < 6; ++step) {
    std::vector<std::vector<float>> ref(4);
    for (int i = 0; i < 4; ++i) ref[i] = alone.Step({i})[0];
    const auto b = together.Step({0, 1, 2, 3});
    const auto c = scattered.Step({3, 0, 2, 1});
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(b[i], ref[i]) << "step " << step << " seq " << i;
    }
    EXPECT_EQ(c[0], ref[3]);
    EXPECT_EQ(c[1], ref[0]);
    EXPECT_EQ(c[2], ref[2]);
    EXPECT_EQ(c[3], ref[1]);
    // Sequence 0 always runs; the others drop in and out.
    std::vector<int> members = {0};
    for (int i = 1; i < 4; ++i) {
      if ((step + i) % 2 == 0) members.push_back(i);
    }
    const auto d = churn.Step(members);
    EXPECT_EQ(d[0], ref[0]) << "step " << step;
  }
}

TEST(HybridModelTest, ChunkedPrefillMatchesTokenByTokenDecode) {
  auto model = TinyModel();
  const ModelConfig& c = model->config();
  const std::vector<int32_t> prompt = RandomPrompt(150, 99, c.vocab_size);
  const int kNew = 20;
  // Prefill in chunks of 128 (then 22), then decode.
  absl::StatusOr<testing::Generation> chunked =
      GenerateAlone(*model, prompt, kNew, kernels::KvFormat::kFp32, 128);
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  // Every prompt token through DecodeStep: the prompt is a forced prefix.
  KvCacheOptions o;
  o.num_layers = c.num_attention_layers();
  o.num_kv_heads = c.attn_kv_heads;
  o.head_dim = c.attn_head_dim;
  o.num_blocks = 32;
  auto kv = std::move(*PagedKvCache::Create(o, nullptr));
  KdaStateStore states("s", 1, c.num_kda_layers(), c.kda_heads,
                       c.kda_head_k_dim, c.kda_head_v_dim, nullptr);
  const std::vector<int32_t> blocks = *kv->Allocate(512);
  states.Clear(0);
  ForwardContext ctx;
  std::vector<float> logits(c.vocab_size);
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> all_logits;
  int32_t next = prompt[0];
  for (int pos = 0; pos < static_cast<int>(prompt.size()) + kNew - 1; ++pos) {
    const DecodeRow row{next, pos, blocks, 0};
    ASSERT_TRUE(
        model->DecodeStep({&row, 1}, kv.get(), &states, logits.data(), &ctx)
            .ok());
    if (pos + 1 < static_cast<int>(prompt.size())) {
      next = prompt[pos + 1];
    } else {
      next = *GreedySample(logits);
      tokens.push_back(next);
      all_logits.push_back(logits);
    }
  }
  // Same greedy tokens; logits equal to fp32 rounding (the chunked KDA form
  // and the recurrence associate differently): rel_rms <= 1e-5 (measured
  // 1.2e-6).
  EXPECT_EQ(tokens, chunked->tokens);
  double worst = 0;
  for (int i = 0; i < kNew; ++i) {
    worst = std::max(worst, RelRms(all_logits[i], chunked->logits[i]));
  }
  EXPECT_LE(worst, 1e-5);
  std::printf("prefill_vs_decode max rel_rms over %d steps: %.3e\n", kNew,
              worst);
  ::testing::Test::RecordProperty("prefill_vs_decode_max_rel_rms",
                                  std::to_string(worst));
}

TEST(HybridModelTest, AlignedPrefillSplitsAreBitIdentical) {
  auto model = TinyModel();
  const std::vector<int32_t> prompt =
      RandomPrompt(3 * kPrefillAlignment + 10, 5, model->config().vocab_size);
  absl::StatusOr<testing::Generation> whole =
      GenerateAlone(*model, prompt, 8, kernels::KvFormat::kFp32, 256);
  ASSERT_TRUE(whole.ok());
  for (int chunk : {kPrefillAlignment, 2 * kPrefillAlignment}) {
    absl::StatusOr<testing::Generation> split =
        GenerateAlone(*model, prompt, 8, kernels::KvFormat::kFp32, chunk);
    ASSERT_TRUE(split.ok());
    EXPECT_EQ(split->tokens, whole->tokens) << chunk;
    EXPECT_EQ(split->logits, whole->logits) << chunk;
  }
}

TEST(HybridModelTest, BadInputsAreRefusedBeforeAnythingChanges) {
  auto model = TinyModel();
  const ModelConfig& c = model->config();
  std::vector<float> emb(2 * c.hidden_size);
  absl::Status s = model->Embed({5, c.vocab_size}, emb.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("index 1"), std::string::npos) << s;

  KvCacheOptions o;
  o.num_layers = c.num_attention_layers();
  o.num_kv_heads = c.attn_kv_heads;
  o.head_dim = c.attn_head_dim;
  auto kv = std::move(*PagedKvCache::Create(o, nullptr));
  KdaStateStore states("s", 2, c.num_kda_layers(), c.kda_heads,
                       c.kda_head_k_dim, c.kda_head_v_dim, nullptr);
  const std::vector<int32_t> blocks = *kv->Allocate(16);
  states.Clear(0);
  const std::vector<float> before(states.State(0, 0),
                                  states.State(0, 0) + states.layer_floats());
  std::vector<float> logits(2 * c.vocab_size);
  ForwardContext ctx;
  // Row 1 is beyond its single block: the step fails naming it, and row 0
  // has not run either.
  const DecodeRow rows[] = {{1, 3, blocks, 0}, {1, 16, blocks, 1}};
  s = model->DecodeStep(rows, kv.get(), &states, logits.data(), &ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(std::string(s.message()).find("row 1"), std::string::npos) << s;
  EXPECT_EQ(std::vector<float>(states.State(0, 0),
                               states.State(0, 0) + states.layer_floats()),
            before);
  EXPECT_EQ(model->CheckDecodeRow({-1, 0, blocks, 0}, kv.get(), &states).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      model->CheckDecodeRow({1, c.max_context, blocks, 0}, kv.get(), &states)
          .code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_EQ(model->CheckDecodeRow({1, 0, blocks, 5}, kv.get(), &states).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HybridModelTest, GreedySamplePicksTheFirstLargestNumber) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(*GreedySample(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(*GreedySample(std::vector<float>{nan, -1, nan, -0.5f}), 3);
  EXPECT_EQ(GreedySample(std::vector<float>{nan, nan}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace densegate::runtime
