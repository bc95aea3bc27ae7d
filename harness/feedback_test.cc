#include "harness/feedback.h"

#include <fstream>

#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::TestTmpDir;

v1::Verdict SampleVerdict() {
  v1::Verdict v;
  v.set_decision(v1::ACCEPT);
  v.set_policy(v1::GAIN);
  v1::Stage* s = v.add_stages();
  s->set_kind(v1::MICROBENCHMARK);
  s->set_status(v1::STAGE_PASSED);
  s->set_seconds(4.5);
  v1::MetricComparison* fast = v.add_metrics();
  fast->set_metric("kda_decode.fused_b32");
  fast->set_unit("ns");
  fast->set_direction(v1::LOWER_IS_BETTER);
  fast->set_baseline(11.6e6);
  fast->set_candidate(3.4e6);
  fast->set_speedup(3.41);
  fast->set_ci_low(3.3);
  fast->set_ci_high(3.5);
  fast->set_n_pairs(6);
  fast->set_stage(v1::MICROBENCHMARK);
  v1::MetricComparison* flat = v.add_metrics();
  flat->set_metric("serve.output_tps");
  flat->set_direction(v1::HIGHER_IS_BETTER);
  flat->set_speedup(1.01);
  flat->set_ci_low(0.97);
  flat->set_ci_high(1.04);
  v1::MetricComparison* slow = v.add_metrics();
  slow->set_metric("quant.int8");
  slow->set_speedup(0.9);
  slow->set_ci_low(0.88);
  slow->set_ci_high(0.93);
  v1::ClaimResult* c = v.add_claims();
  c->set_metric("kda_decode.fused_b32");
  c->set_claimed(1.7);
  c->set_verified(true);
  v1::Reason* r = v.add_reasons();
  r->set_code(v1::VERIFIED);
  r->set_message("kda_decode.fused_b32: speedup 3.410x");
  return v;
}

TEST(FeedbackTest, VerdictJsonHasTheDocumentedFields) {
  nlohmann::json j = VerdictJson(SampleVerdict());
  EXPECT_EQ(j["decision"], "accept");
  EXPECT_EQ(j["policy"], "gain");
  EXPECT_EQ(j["reasons"][0], "kda_decode.fused_b32: speedup 3.410x");
  EXPECT_EQ(j["stages"][0]["name"], "microbenchmark");
  EXPECT_EQ(j["stages"][0]["status"], "passed");
  EXPECT_EQ(j["stages"][0]["seconds"], 4.5);
  const auto& m = j["metrics"][0];
  for (const char* key : {"name", "unit", "direction", "baseline", "candidate", "speedup",
                          "ci_low", "ci_high", "n_pairs"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  EXPECT_EQ(m["direction"], "lower_is_better");
  EXPECT_EQ(j["claims"][0]["verified"], true);
}

TEST(FeedbackTest, MovedMetricsAreRankedByEffectAndAttributed) {
  nlohmann::json f = FeedbackJson(SampleVerdict());
  ASSERT_EQ(f["moved"].size(), 2);
  EXPECT_EQ(f["moved"][0]["metric"], "kda_decode.fused_b32");  // |log 3.41| > |log 0.9|
  EXPECT_EQ(f["moved"][0]["component"], "kda_decode");
  EXPECT_EQ(f["moved"][0]["change"], "faster");
  EXPECT_EQ(f["moved"][1]["change"], "slower");
  ASSERT_EQ(f["within_noise"].size(), 1);
  EXPECT_EQ(f["within_noise"][0]["metric"], "serve.output_tps");
  EXPECT_NE(f["headline"].get<std::string>().find("kda_decode"), std::string::npos);
}

TEST(FeedbackTest, EndToEndChangeIsAttributedToTheTimeCounterThatMovedMost) {
  v1::Verdict v;
  v1::MetricComparison* tps = v.add_metrics();
  tps->set_metric("runtime.output_tok_s");
  tps->set_speedup(0.62);
  tps->set_ci_low(0.58);
  tps->set_ci_high(0.66);
  CounterMedians c;
  c.benchmark = "serve";
  c.metrics = {"runtime.output_tok_s"};
  // decode_ms grew most in absolute terms, transfer_ms most relative to
  // itself; gemm_ms tripled but is below 1% of the largest time counter;
  // decode_steps is not a time.
  c.counters = {{"decode_ms", {9.0e3, 12.0e3}},
                {"transfer_ms", {0.2e3, 2.6e3}},
                {"kda_ms", {3.0e3, 3.1e3}},
                {"gemm_ms", {0.01e3, 0.03e3}},
                {"decode_steps", {100, 900}}};
  nlohmann::json f = FeedbackJson(v, {c});
  ASSERT_EQ(f["moved"].size(), 1);
  EXPECT_EQ(f["moved"][0]["component"], "runtime/transfer");
  const auto& by = f["moved"][0]["attributed_to"];
  ASSERT_EQ(by.size(), 3);
  EXPECT_EQ(by[0]["counter"], "transfer_ms");
  EXPECT_DOUBLE_EQ(by[0]["ratio"].get<double>(), 13.0);
  EXPECT_EQ(by[1]["counter"], "decode_ms");
  EXPECT_EQ(by[2]["counter"], "kda_ms");
  EXPECT_NE(f["headline"].get<std::string>().find("runtime/transfer"), std::string::npos);
  ASSERT_EQ(f["moved"][0]["volumes_moved"].size(), 1);
  EXPECT_EQ(f["moved"][0]["volumes_moved"][0]["counter"], "decode_steps");
}

TEST(FeedbackTest, BundleRecordsInfrastructureErrorsInsteadOfAVerdict) {
  std::string dir = TestTmpDir();
  WriteFeedbackBundle(dir, nullptr, {}, {}, {}, absl::UnavailableError("disk full"));
  nlohmann::json v = nlohmann::json::parse(std::ifstream(dir + "/verdict.json"));
  EXPECT_EQ(v["decision"], "error");
  EXPECT_EQ(v["infrastructure_error"], "disk full");
  nlohmann::json f = nlohmann::json::parse(std::ifstream(dir + "/feedback.json"));
  EXPECT_EQ(f["schema_version"], 1);
  EXPECT_EQ(f["decision"], "error");
  EXPECT_EQ(f["headline"], "not evaluated: disk full");
}

TEST(FeedbackTest, SummaryCarriesItsSchemaVersionAndEachStageWithItsFirstErrors) {
  const std::string dir = TestTmpDir() + "/stages";
  test::WriteFile(dir + "/logs/build-candidate.err",
                  "INFO: Analyzed 3 targets\n"
                  "kernels/kda/kda_decode.cc:41:7: error: 'tile' was not declared in this scope\n"
                  "Target //kernels/kda:kda_decode failed to build\n");
  test::WriteFile(dir + "/logs/build-baseline.err", "INFO: Build completed successfully\n");
  test::WriteFile(dir + "/logs/correctness-candidate-unit.out",
                  "[  FAILED  ] KvCache.Transfer\nINFO: 1 test FAILED\nINFO: 1 test FAILED\n");
  v1::Verdict verdict = SampleVerdict();
  verdict.set_evaluation_id("ev-1");
  v1::Stage build;
  build.set_kind(v1::BUILD);
  build.set_status(v1::STAGE_FAILED);
  build.set_seconds(12.5);
  build.set_summary("candidate does not build");
  build.set_log_uri(dir + "/logs/build-candidate.err");
  v1::Stage preflight;
  preflight.set_kind(v1::PREFLIGHT);
  preflight.set_status(v1::STAGE_PASSED);
  WriteFeedbackBundle(dir, &verdict, {preflight, build}, {}, {}, absl::OkStatus());

  nlohmann::json f = nlohmann::json::parse(std::ifstream(dir + "/feedback.json"));
  EXPECT_EQ(f["schema_version"], 1);
  EXPECT_EQ(f["evaluation_id"], "ev-1");
  ASSERT_EQ(f["stages"].size(), 2);
  EXPECT_EQ(f["stages"][0]["name"], "preflight");
  EXPECT_FALSE(f["stages"][0].contains("first_errors"));
  const auto& b = f["stages"][1];
  EXPECT_EQ(b["status"], "failed");
  EXPECT_EQ(b["seconds"], 12.5);
  EXPECT_EQ(b["log"], "logs/build-candidate.err");  // Relative to the bundle.
  ASSERT_EQ(b["first_errors"].size(), 1);
  EXPECT_EQ(b["first_errors"][0]["file"], "logs/build-candidate.err");
  EXPECT_EQ(b["first_errors"][0]["line"], 2);
  EXPECT_NE(b["first_errors"][0]["text"].get<std::string>().find("'tile' was not declared"),
            std::string::npos);

  // A candidate's bytes that are not UTF-8 do not cost the summary.
  test::WriteFile(dir + "/logs/build-candidate.err", "\xff\xfe error: bad bytes\n");
  WriteFeedbackBundle(dir, &verdict, {build}, {}, {}, absl::OkStatus());
  nlohmann::json again = nlohmann::json::parse(std::ifstream(dir + "/feedback.json"));
  EXPECT_NE(again["stages"][0]["first_errors"][0]["text"].get<std::string>().find(
                "\xEF\xBF\xBD"),  // U+FFFD
            std::string::npos);

  // The correctness stage's logs are its own.
  std::vector<LogErrorLine> lines = FirstErrorLines(dir + "/logs", v1::CORRECTNESS, 5);
  ASSERT_EQ(lines.size(), 2);  // The repeated line once.
  EXPECT_EQ(lines[0].file, "correctness-candidate-unit.out");
  EXPECT_EQ(lines[0].text, "[  FAILED  ] KvCache.Transfer");
  EXPECT_EQ(lines[1].line, 2);
}

}  // namespace
}  // namespace densegate::harness
