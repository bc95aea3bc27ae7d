#include "harness/parse/benchmark_output.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

using ::testing::HasSubstr;

constexpr char kBenchmarkJson[] = R"({
  "context": {"num_cpus": 2},
  "benchmarks": [
    {"name": "BM_KdaDecode_fused/32", "run_type": "iteration", "iterations": 200,
     "real_time": 3.4, "cpu_time": 3.3, "time_unit": "ms", "bytes_per_second": 3.9e10},
    {"name": "BM_KdaDecode_fused/32", "run_type": "iteration", "iterations": 200,
     "real_time": 3.6, "cpu_time": 3.5, "time_unit": "ms", "bytes_per_second": 3.7e10},
    {"name": "BM_KdaDecode_fused/32", "run_type": "iteration", "iterations": 200,
     "real_time": 3.5, "cpu_time": 3.4, "time_unit": "ms", "bytes_per_second": 3.8e10},
    {"name": "BM_KdaDecode_fused/32_mean", "run_type": "aggregate", "iterations": 3,
     "real_time": 3.5, "cpu_time": 3.4, "time_unit": "ms"},
    {"name": "BM_Copy", "run_type": "iteration", "iterations": 1000,
     "real_time": 120, "cpu_time": 119, "time_unit": "us"}
  ]
})";

v1::MetricSpec Metric(const std::string& source, const std::string& field) {
  v1::MetricSpec m;
  m.set_name("m");
  m.set_source(source);
  m.set_field(field);
  return m;
}

TEST(GoogleBenchmarkTest, MedianOverRepetitionsInNanoseconds) {
  auto runs = ParseGoogleBenchmarkJson(kBenchmarkJson);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 4);  // The aggregate is skipped.
  auto t = GoogleBenchmarkMetric(*runs, Metric("BM_KdaDecode_fused/32", ""));
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(*t, 3.5e6);
  auto bw = GoogleBenchmarkMetric(*runs, Metric("BM_KdaDecode_fused/32", "bytes_per_second"));
  EXPECT_DOUBLE_EQ(*bw, 3.8e10);
  auto copy = GoogleBenchmarkMetric(*runs, Metric("BM_Copy", "cpu_time"));
  EXPECT_DOUBLE_EQ(*copy, 119e3);
}

TEST(GoogleBenchmarkTest, BestRepetitionFollowsTheDirection) {
  auto runs = ParseGoogleBenchmarkJson(kBenchmarkJson);
  ASSERT_TRUE(runs.ok()) << runs.status();
  v1::MetricSpec time = Metric("BM_KdaDecode_fused/32", "real_time");
  time.set_direction(v1::LOWER_IS_BETTER);
  time.set_aggregate(v1::REPETITION_BEST);
  EXPECT_DOUBLE_EQ(*GoogleBenchmarkMetric(*runs, time), 3.4e6);  // the fastest
  v1::MetricSpec rate = Metric("BM_KdaDecode_fused/32", "bytes_per_second");
  rate.set_direction(v1::HIGHER_IS_BETTER);
  rate.set_aggregate(v1::REPETITION_BEST);
  EXPECT_DOUBLE_EQ(*GoogleBenchmarkMetric(*runs, rate), 3.9e10);  // the highest
  // One repetition: best and median agree.
  v1::MetricSpec copy = Metric("BM_Copy", "real_time");
  copy.set_direction(v1::LOWER_IS_BETTER);
  copy.set_aggregate(v1::REPETITION_BEST);
  EXPECT_DOUBLE_EQ(*GoogleBenchmarkMetric(*runs, copy), 120e3);
}

TEST(GoogleBenchmarkTest, ClaimedTimedSeconds) {
  auto runs = ParseGoogleBenchmarkJson(kBenchmarkJson);
  ASSERT_TRUE(runs.ok());
  // 200 x (3.4 + 3.6 + 3.5) ms + 1000 x 120 us.
  EXPECT_NEAR(ClaimedTimedSeconds(*runs), 2.1 + 0.12, 1e-9);
}

TEST(GoogleBenchmarkTest, MissingBenchmarkListsWhatWasFound) {
  auto runs = ParseGoogleBenchmarkJson(kBenchmarkJson);
  auto t = GoogleBenchmarkMetric(*runs, Metric("BM_Tiled/32", ""));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("found: BM_KdaDecode_fused/32"));
  auto f = GoogleBenchmarkMetric(*runs, Metric("BM_Copy", "items_per_second"));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("no field \"items_per_second\""));
}

TEST(GoogleBenchmarkTest, BadDocumentsAreClearErrors) {
  EXPECT_THAT(std::string(ParseGoogleBenchmarkJson("BM_x 3 ns").status().message()),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(std::string(ParseGoogleBenchmarkJson("{}").status().message()),
              HasSubstr("--benchmark_format=json"));
  auto err = ParseGoogleBenchmarkJson(R"({"benchmarks": [{"name": "B", "iterations": 0,
      "real_time": 0, "error_occurred": true, "error_message": "out of memory"}]})");
  EXPECT_THAT(std::string(err.status().message()), HasSubstr("out of memory"));
}

TEST(JsonNumberAtTest, DottedPaths) {
  constexpr char kServe[] = R"({"output_throughput": 812.5, "tpot_ms": {"median": 9.1}})";
  EXPECT_DOUBLE_EQ(*JsonNumberAt(kServe, "output_throughput"), 812.5);
  EXPECT_DOUBLE_EQ(*JsonNumberAt(kServe, "tpot_ms.median"), 9.1);
  EXPECT_EQ(JsonNumberAt(kServe, "tpot_ms.p99").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(JsonNumberAt(kServe, "tpot_ms").status().message()),
              HasSubstr("not a number"));
}

TEST(JUnitTest, CasesWithFailuresAndErrors) {
  constexpr char kXml[] = R"(<?xml version="1.0"?>
<testsuites>
  <testsuite name="kernels/kda:kda_decode_test">
    <testcase name="MatchesReference" classname="KdaDecodeTest" time="0.12"/>
    <testcase name="BatchInvariance" classname="KdaDecodeTest" time="0.05">
      <failure message="rel_rms 3e-3 above 1e-5">details</failure>
    </testcase>
    <testcase name="Crash" time="0"><error>segfault</error></testcase>
  </testsuite>
</testsuites>)";
  auto cases = ParseJUnitXml(kXml);
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 3);
  EXPECT_TRUE((*cases)[0].passed());
  EXPECT_EQ((*cases)[0].suite(), "KdaDecodeTest");
  EXPECT_FALSE((*cases)[1].passed());
  EXPECT_EQ((*cases)[1].message(), "rel_rms 3e-3 above 1e-5");
  EXPECT_FALSE((*cases)[2].passed());
  EXPECT_EQ((*cases)[2].suite(), "kernels/kda:kda_decode_test");
  EXPECT_EQ((*cases)[2].message(), "segfault");
}

TEST(JUnitTest, MalformedXml) {
  auto r = ParseJUnitXml("<testsuite><testcase name='x'>");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("JUnit XML"));
}

}  // namespace
}  // namespace densegate::harness
