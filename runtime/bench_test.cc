#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/bench_dataset.h"
#include "runtime/bench_flags.h"
#include "runtime/bench_metrics.h"
#include "runtime/bench_runner.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

TEST(BenchMetricsTest, PercentileInterpolatesLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 99]) == [2.5, 3.97].
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
}

RequestResult Result(int64_t arrival_ms, std::vector<int64_t> times_ms,
                     int prompt) {
  RequestResult r;
  r.arrival_ns = arrival_ms * 1'000'000;
  for (int64_t t : times_ms) {
    r.token_times_ns.push_back(t * 1'000'000);
    r.tokens.push_back(1);
  }
  r.prompt_tokens = prompt;
  return r;
}

TEST(BenchMetricsTest, DefinitionsFollowBenchServing) {
  std::vector<RequestResult> results = {
      Result(0, {100, 110, 130}, 10),  // TTFT 100, TPOT 15, ITL 10, 20
      Result(50, {250}, 20),           // TTFT 200, one token: no TPOT/ITL
      Result(0, {}, 5),                // Failed.
  };
  results[2].status = absl::OutOfRangeError("too long");
  const ServingMetrics m = ComputeServingMetrics(results, 0, 2'000'000'000);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_DOUBLE_EQ(m.duration_s, 2.0);
  EXPECT_EQ(m.total_input_tokens, 30);
  EXPECT_EQ(m.total_output_tokens, 4);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 17.0);
  EXPECT_DOUBLE_EQ(m.ttft.mean_ms, 150);
  EXPECT_DOUBLE_EQ(m.ttft.median_ms, 150);
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, 15);
  EXPECT_DOUBLE_EQ(m.itl.mean_ms, 15);
  EXPECT_DOUBLE_EQ(m.itl.p99_ms, 19.9);
  ASSERT_EQ(m.errors.size(), 1u);
  const nlohmann::json j = ServingMetricsToJson(m);
  for (const char* key :
       {"request_throughput", "input_throughput", "output_throughput",
        "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
        "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
        "mean_itl_ms", "median_itl_ms", "p99_itl_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(BenchDatasetTest, LengthsArrivalsAndDeterminism) {
  DatasetOptions o;
  o.num_prompts = 200;
  o.input_len = 100;
  o.output_len = 40;
  o.range_ratio = 0.5;
  o.request_rate = 10;
  o.seed = 3;
  o.vocab_size = 50;
  const std::vector<BenchRequest> a = *MakeRandomDataset(o);
  ASSERT_EQ(a.size(), 200u);
  double last = 0;
  for (const BenchRequest& r : a) {
    EXPECT_GE(r.request.prompt.size(), 50u);
    EXPECT_LE(r.request.prompt.size(), 100u);
    EXPECT_GE(r.request.max_new_tokens, 20);
    EXPECT_LE(r.request.max_new_tokens, 40);
    for (int32_t t : r.request.prompt) ASSERT_TRUE(t >= 0 && t < 50);
    EXPECT_GE(r.arrival_s, last);
    last = r.arrival_s;
  }
  // 200 arrivals at 10/s take about 20 s.
  EXPECT_NEAR(last, 20, 5);
  const std::vector<BenchRequest> b = *MakeRandomDataset(o);
  EXPECT_EQ(a.back().request.prompt, b.back().request.prompt);
  o.request_rate = std::numeric_limits<double>::infinity();
  EXPECT_EQ(MakeRandomDataset(o)->back().arrival_s, 0);
  o.range_ratio = 0;
  EXPECT_FALSE(MakeRandomDataset(o).ok());
}

TEST(BenchFlagsTest, ParsesAndRejectsByName) {
  absl::StatusOr<BenchFlags> f = ParseBenchFlags(
      {"--mode=colocated", "--kv_format", "fp8_e4m3", "--max_batch_size=4",
       "--kda_variant=fused", "--kda_precision=tf32", "--request_rate=inf",
       "--trace=/tmp/t.json", "--compare=batch", "--rounds=5"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->engine.mode, EngineMode::kColocated);
  EXPECT_EQ(f->engine.kv_format, kernels::KvFormat::kFp8E4M3);
  EXPECT_EQ(f->engine.max_batch_size, 4);
  EXPECT_EQ(f->model.kda_variant, kernels::kda::KdaDecodeVariant::kFused);
  EXPECT_EQ(f->model.kda_precision, kernels::kda::Precision::kTf32);
  EXPECT_TRUE(std::isinf(f->dataset.request_rate));
  EXPECT_EQ(f->trace, "/tmp/t.json");
  EXPECT_EQ(f->compare, CompareMode::kBatch);
  EXPECT_EQ(f->rounds, 5);

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--kv_format=fp4"}, "fp4"},
      {{"--max_batch_size=0"}, "--max_batch_size"},
      {{"--max_batch_size=x"}, "--max_batch_size"},
      {{"--range_ratio=1.5"}, "--range_ratio"},
      {{"--rounds=0"}, "--rounds"},
      {{"--bogus=1"}, "--bogus"},
      {{"--mode"}, "--mode"},
      {{"positional"}, "positional"},
  };
  for (const auto& [args, mention] : bad) {
    absl::StatusOr<BenchFlags> r = ParseBenchFlags(args);
    ASSERT_FALSE(r.ok()) << args[0];
    EXPECT_NE(std::string(r.status().message()).find(mention),
              std::string::npos)
        << r.status();
  }
  EXPECT_NE(BenchUsage().find("--kv_format"), std::string::npos);
}

TEST(BenchRunnerTest, ReportsMetricsMemoryAndStages) {
  auto model = testing::TinyModel();
  DatasetOptions d;
  d.num_prompts = 6;
  d.input_len = 40;
  d.output_len = 8;
  d.vocab_size = model->config().vocab_size;
  d.request_rate = std::numeric_limits<double>::infinity();
  EngineOptions e;
  e.max_batch_size = 4;
  absl::StatusOr<BenchRun> run =
      RunServeBench(*model, e, *MakeRandomDataset(d));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->metrics.completed, 6);
  EXPECT_GT(run->metrics.output_throughput, 0);
  const nlohmann::json& j = run->json;
  EXPECT_GT(j["memory"]["peak_kv_bytes"].get<int64_t>(),
            j["memory"]["peak_attention_kv_bytes"].get<int64_t>());
  EXPECT_GT(j["stages"]["transfer_ms"].get<double>(), 0);
  EXPECT_GT(j["stages"]["decode_ms"].get<double>(), 0);
  EXPECT_GT(j["stages"]["kda_ms"].get<double>(), 0);
  EXPECT_GT(j["stages"]["attention_ms"].get<double>(), 0);
  EXPECT_GT(j["stages"]["mlp_ms"].get<double>(), 0);
  EXPECT_EQ(j["config"]["engine"]["mode"], "epd");
}

}  // namespace
}  // namespace densegate::runtime
