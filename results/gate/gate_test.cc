#include "results/gate/gate.h"

#include <cmath>
#include <functional>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::results {
namespace {

using ::testing::HasSubstr;

// Times for `n` pairs: baseline around 100 ns, candidate 100/speedup ns,
// each with multiplicative lognormal noise of `cv`.
MetricSamples Times(const std::string& name, double speedup, int n, double cv,
                    uint64_t seed, bool primary = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, cv);
  MetricSamples m;
  m.name = name;
  m.unit = "ns";
  m.direction = v1::LOWER_IS_BETTER;
  m.primary = primary;
  for (int i = 0; i < n; ++i) {
    m.baseline.push_back(100 * std::exp(noise(rng)));
    m.candidate.push_back(100 / speedup * std::exp(noise(rng)));
  }
  return m;
}

GateInput Input(v1::Policy policy, std::vector<MetricSamples> metrics) {
  GateInput in;
  in.policy = policy;
  in.metrics = std::move(metrics);
  in.seed = 99;
  return in;
}

bool HasReason(const GateResult& r, v1::ReasonCode code, const std::string& text) {
  for (const auto& reason : r.reasons) {
    if (reason.code() == code && reason.message().find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::string Reasons(const GateResult& r) {
  std::string s;
  for (const auto& reason : r.reasons) {
    s += v1::ReasonCode_Name(reason.code()) + ": " + reason.message() + "\n";
  }
  return s;
}

TEST(PlanTest, DefaultLooksSpendTheBudgetFrontLoaded) {
  SequentialPlan plan = PlanLooks(GateParameters{});
  EXPECT_EQ(plan.pairs, (std::vector<int>{6, 9, 14, 21, 30}));
  double total = 0;
  for (double a : plan.alpha) total += a;
  EXPECT_NEAR(total, 0.025, 1e-15);  // (1 - 0.95) / 2, one-sided.
  EXPECT_NEAR(plan.alpha[0], 0.025 * 5 / 8, 1e-15);
  // 1/64: the smallest exact signed-rank tail at 6 pairs fits the first look.
  EXPECT_GE(plan.alpha[0], 1.0 / 64);
}

// The two parts of a continued evaluation: 90% of alpha for the first,
// whose first look keeps its 5/8 (so 6 pairs can still decide), 10% for
// the second, whose looks come after the first part's last.
TEST(PlanTest, APartSpendsItsShareAndASecondPartLooksAfterTheFirst) {
  const SequentialPlan first = PlanLooks(PartParameters(GateParameters{}, 0.9, false));
  const SequentialPlan second = PlanLooks(PartParameters(GateParameters{}, 0.1, true));
  EXPECT_EQ(first.pairs, (std::vector<int>{6, 9, 14, 21, 30}));
  EXPECT_EQ(second.pairs, (std::vector<int>{36, 54, 60}));
  EXPECT_NEAR(first.alpha[0], 0.025 * 5 / 8, 1e-15);
  EXPECT_NEAR(first.alpha[4], 0.025 * (0.9 - 5.0 / 8) / 4, 1e-15);
  double total = 0;
  for (double a : first.alpha) total += a;
  EXPECT_NEAR(total, 0.9 * 0.025, 1e-15);
  EXPECT_NEAR(second.alpha[0], 0.1 * 0.025 * 5 / 8, 1e-15);
  for (double a : second.alpha) total += a;
  EXPECT_NEAR(total, 0.025, 1e-15);  // Both parts: the manifest's alpha.
  // The whole budget, one part, when no share is given.
  EXPECT_EQ(PlanLooks(PartParameters(GateParameters{}, 0, false)).alpha,
            PlanLooks(GateParameters{}).alpha);
  // A first part must leave its first look its share.
  GateInput in;
  in.params = PartParameters(GateParameters{}, 0.6, false);
  EXPECT_THAT(std::string(Evaluate(in).status().message()), ::testing::HasSubstr("error_share"));
}

TEST(GateTest, LargeGainAcceptedAtFirstLookWithClaimVerified) {
  GateInput in = Input(v1::GAIN, {Times("kda_decode.fused_b32", 3.4, 6, 0.02, 1)});
  v1::Claim claim;
  claim.set_metric("kda_decode.fused_b32");
  claim.set_min_speedup(1.7);
  in.claims.push_back(claim);
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->needs_more_pairs);
  EXPECT_EQ(r->decision, v1::ACCEPT) << Reasons(*r);
  EXPECT_EQ(r->pairs_used, 6);
  ASSERT_EQ(r->metrics.size(), 1);
  EXPECT_NEAR(r->metrics[0].speedup(), 3.4, 0.1);
  EXPECT_GT(r->metrics[0].ci_low(), 1.02);
  EXPECT_LE(r->metrics[0].bootstrap_low(), r->metrics[0].speedup());
  ASSERT_EQ(r->claims.size(), 1);
  EXPECT_TRUE(r->claims[0].verified());
  EXPECT_TRUE(HasReason(*r, v1::VERIFIED, "claim kda_decode.fused_b32 >= 1.70x verified"))
      << Reasons(*r);
}

TEST(GateTest, AskForMorePairsUntilTheFirstLook) {
  auto r = Evaluate(Input(v1::GAIN, {Times("m", 2.0, 4, 0.02, 1)}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->needs_more_pairs);
  EXPECT_EQ(r->next_pairs, 6);
  EXPECT_EQ(r->decision, v1::DECISION_UNSPECIFIED);
}

TEST(GateTest, OverclaimIsAcceptedButClaimNotVerified) {
  GateInput in = Input(v1::GAIN, {Times("m", 1.3, 30, 0.01, 2)});
  v1::Claim claim;
  claim.set_metric("m");
  claim.set_min_speedup(1.7);
  in.claims.push_back(claim);
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::ACCEPT);
  ASSERT_EQ(r->claims.size(), 1);
  EXPECT_FALSE(r->claims[0].verified());
  EXPECT_TRUE(HasReason(*r, v1::CLAIM_NOT_VERIFIED, "not verified: measured 1.29"))
      << Reasons(*r);
}

TEST(GateTest, NoOpIsNotAGainButPassesNoRegression) {
  MetricSamples noop = Times("m", 1.0, 30, 0.005, 3);
  auto gain = Evaluate(Input(v1::GAIN, {noop}));
  ASSERT_TRUE(gain.ok());
  EXPECT_NE(gain->decision, v1::ACCEPT) << Reasons(*gain);
  EXPECT_TRUE(HasReason(*gain, v1::NO_VERIFIED_GAIN, "minimum effect")) << Reasons(*gain);

  auto neutral = Evaluate(Input(v1::NO_REGRESSION, {noop}));
  ASSERT_TRUE(neutral.ok());
  EXPECT_EQ(neutral->decision, v1::ACCEPT) << Reasons(*neutral);
}

MetricSamples Identical(const std::string& name, bool primary = true) {
  MetricSamples m = Times(name, 1, 0, 0, 0, primary);
  m.inputs_identical = true;
  return m;
}

TEST(GateTest, AllInputsIdenticalDecidesWithoutPairs) {
  auto neutral = Evaluate(Input(v1::NO_REGRESSION, {Identical("kernel"), Identical("serve")}));
  ASSERT_TRUE(neutral.ok()) << neutral.status();
  EXPECT_FALSE(neutral->needs_more_pairs);
  EXPECT_EQ(neutral->decision, v1::ACCEPT) << Reasons(*neutral);
  EXPECT_EQ(neutral->pairs_used, 0);
  EXPECT_TRUE(HasReason(*neutral, v1::VERIFIED, "unchanged by construction")) << Reasons(*neutral);
  ASSERT_EQ(neutral->metrics.size(), 2);
  for (const v1::MetricComparison& c : neutral->metrics) {
    EXPECT_TRUE(c.inputs_identical());
    EXPECT_EQ(c.speedup(), 1);
    EXPECT_EQ(c.ci_low(), 1);
    EXPECT_EQ(c.ci_high(), 1);
    EXPECT_EQ(c.n_pairs(), 0);
    EXPECT_FALSE(c.significant());
  }

  // Under GAIN nothing can have gained, even with a zero minimum effect; a
  // claim on it is refuted, not left open.
  GateInput in = Input(v1::GAIN, {Identical("kernel")});
  in.params.min_effect = 0;
  v1::Claim claim;
  claim.set_metric("kernel");
  claim.set_min_speedup(1.7);
  in.claims.push_back(claim);
  auto gain = Evaluate(in);
  ASSERT_TRUE(gain.ok()) << gain.status();
  EXPECT_EQ(gain->decision, v1::REJECT) << Reasons(*gain);
  EXPECT_TRUE(HasReason(*gain, v1::NO_VERIFIED_GAIN, "inputs are byte-identical")) << Reasons(*gain);
  ASSERT_EQ(gain->claims.size(), 1);
  EXPECT_FALSE(gain->claims[0].verified());
  EXPECT_TRUE(HasReason(*gain, v1::CLAIM_NOT_VERIFIED, "claim kernel >= 1.70x not verified: kernel: "
                                                        "not measured"))
      << Reasons(*gain);
}

TEST(GateTest, IdenticalMetricBesideMeasuredOnesSpendsNoBudget) {
  // FP8's shape: the serving metric gains, the kernel's inputs are the same.
  GateInput in = Input(v1::GAIN, {Identical("kernel"), Times("serve", 1.4, 30, 0.01, 21)});
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::ACCEPT) << Reasons(*r);
  EXPECT_EQ(r->pairs_used, 6);
  // With one measured primary metric, Bonferroni does not divide: the bounds
  // are those of the serving metric alone.
  auto alone = Evaluate(Input(v1::GAIN, {Times("serve", 1.4, 30, 0.01, 21)}));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(r->metrics[1].ci_low(), alone->metrics[0].ci_low());
  EXPECT_TRUE(r->metrics[0].inputs_identical());

  auto neutral = Evaluate(Input(v1::NO_REGRESSION, {Identical("kernel"),
                                                    Times("serve", 1.0, 30, 0.005, 3)}));
  ASSERT_TRUE(neutral.ok());
  EXPECT_EQ(neutral->decision, v1::ACCEPT) << Reasons(*neutral);
  EXPECT_TRUE(HasReason(*neutral, v1::VERIFIED, "(1 not measured: their inputs were identical)"))
      << Reasons(*neutral);

  // A measured metric that regresses still rejects.
  auto slower = Evaluate(Input(v1::NO_REGRESSION, {Identical("kernel"),
                                                   Times("serve", 0.8, 30, 0.01, 4)}));
  ASSERT_TRUE(slower.ok());
  EXPECT_EQ(slower->decision, v1::REJECT) << Reasons(*slower);
}

TEST(GateTest, RegressionRejectedNamingMetricAndNumbers) {
  auto r = Evaluate(Input(v1::NO_REGRESSION,
                          {Times("serve.output_tps", 0.8, 30, 0.01, 4)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::REJECT);
  EXPECT_TRUE(HasReason(*r, v1::REGRESSION, "serve.output_tps: speedup 0.7"))
      << Reasons(*r);
}

TEST(GateTest, SecondaryRegressionBlocksPrimaryGain) {
  auto r = Evaluate(Input(v1::GAIN, {Times("kernel", 1.5, 30, 0.01, 5),
                                     Times("serve", 0.85, 30, 0.01, 6, false)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::REJECT) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::REGRESSION, "serve:")) << Reasons(*r);
}

TEST(GateTest, StageFailureRejectsWhateverTheMetrics) {
  GateInput in = Input(v1::GAIN, {Times("m", 3.0, 6, 0.01, 7)});
  v1::Reason failure;
  failure.set_code(v1::PRECISION_FAILED);
  failure.set_stage(v1::PRECISION);
  failure.set_message("kda_decode: rel_rms 2.4e-4 at 65536 tokens is 1800x the baseline's");
  in.stage_failures.push_back(failure);
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::REJECT);
  EXPECT_TRUE(HasReason(*r, v1::PRECISION_FAILED, "1800x"));
}

TEST(GateTest, ImplausibleSpeedupNeedsReview) {
  auto r = Evaluate(Input(v1::GAIN, {Times("m", 40, 6, 0.01, 8)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::INCONCLUSIVE);
  EXPECT_TRUE(r->metrics[0].flagged_for_review());
  EXPECT_TRUE(HasReason(*r, v1::NEEDS_REVIEW, "sanity ceiling")) << Reasons(*r);

  MetricSamples capped = Times("m", 3, 6, 0.01, 8);
  capped.roofline_speedup = 2.5;
  auto roof = Evaluate(Input(v1::GAIN, {capped}));
  ASSERT_TRUE(roof.ok());
  EXPECT_TRUE(HasReason(*roof, v1::NEEDS_REVIEW, "roofline")) << Reasons(*roof);
}

TEST(GateTest, NoisyStraddleEndsInconclusiveAtTheBudget) {
  auto r = Evaluate(Input(v1::GAIN, {Times("m", 1.03, 30, 0.08, 9)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::INCONCLUSIVE) << Reasons(*r);
  EXPECT_EQ(r->pairs_used, 30);
  EXPECT_TRUE(HasReason(*r, v1::UNDECIDED, "30-pair budget")) << Reasons(*r);
}

// A verified gain on one primary metric with another primary metric whose
// slowdown is not ruled out: the reason names the slowdown, not a gain the
// second metric does not need to show.
TEST(GateTest, VerifiedGainHeldBackByAnUnclearedMetricSaysWhy) {
  auto r = Evaluate(Input(v1::GAIN, {Times("kernel", 2.0, 30, 0.01, 21),
                                     Times("serve", 1.0, 30, 0.06, 22)}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->decision, v1::INCONCLUSIVE) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::UNDECIDED, "serve")) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::UNDECIDED, "slowdown beyond the 2.0% budget is not ruled out"))
      << Reasons(*r);
  EXPECT_FALSE(HasReason(*r, v1::UNDECIDED, "gain threshold")) << Reasons(*r);
}

TEST(GateTest, SamePairsGiveIdenticalVerdict) {
  GateInput in = Input(v1::GAIN, {Times("a", 1.2, 14, 0.03, 10),
                                  Times("b", 1.0, 14, 0.03, 11, false)});
  auto first = Evaluate(in);
  auto second = Evaluate(in);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->decision, second->decision);
  EXPECT_EQ(first->pairs_used, second->pairs_used);
  ASSERT_EQ(first->metrics.size(), second->metrics.size());
  for (size_t i = 0; i < first->metrics.size(); ++i) {
    EXPECT_EQ(first->metrics[i].SerializeAsString(),
              second->metrics[i].SerializeAsString());
  }
}

TEST(GateTest, ExtraPairsBeyondTheStoppingLookDoNotChangeTheDecision) {
  // The decision is taken at the first look that stops, so replaying the
  // stored samples reproduces it even if more were measured.
  MetricSamples six = Times("m", 2.0, 6, 0.01, 12);
  MetricSamples nine = Times("m", 2.0, 9, 0.01, 12);
  auto a = Evaluate(Input(v1::GAIN, {six}));
  auto b = Evaluate(Input(v1::GAIN, {nine}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->pairs_used, 6);
  EXPECT_EQ(b->pairs_used, 6);
  EXPECT_EQ(a->metrics[0].speedup(), b->metrics[0].speedup());
}

// A benchmark metric and the trusted runner's timing of the same
// computation (its confirmed_by), the runner's samples with their own noise.
std::vector<MetricSamples> Confirmed(double benchmark_speedup, double runner_speedup, int n,
                                     double cv = 0.02) {
  MetricSamples benchmark = Times("kda_decode.fused_b32", benchmark_speedup, n, cv, 21);
  benchmark.confirmed_by = "kda_decode.runner_fused_b32";
  MetricSamples runner = Times("kda_decode.runner_fused_b32", runner_speedup, n, cv, 22);
  return {benchmark, runner};
}

v1::Claim ClaimOn(const std::string& metric, double speedup) {
  v1::Claim c;
  c.set_metric(metric);
  c.set_min_speedup(speedup);
  return c;
}

TEST(ConfirmedMetricTest, AGainTheRunnerShowsTooIsAccepted) {
  GateInput in = Input(v1::GAIN, Confirmed(1.8, 1.75, 9));
  in.claims.push_back(ClaimOn("kda_decode.fused_b32", 1.5));
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::ACCEPT) << Reasons(*r);
  ASSERT_EQ(r->claims.size(), 1);
  EXPECT_TRUE(r->claims[0].verified());
  EXPECT_TRUE(HasReason(*r, v1::VERIFIED, "confirmed by kda_decode.runner_fused_b32")) << Reasons(*r);
  EXPECT_EQ(r->metrics[0].confirmed_by(), "kda_decode.runner_fused_b32");
}

TEST(ConfirmedMetricTest, ABenchmarkOnlyGainIsRejectedNamingBothMeasurements) {
  // The benchmark binary shows ~2.9x, the runner's timing ~1.0x.
  GateInput in = Input(v1::GAIN, Confirmed(2.879, 1.0, 9, 0.005));
  in.claims.push_back(ClaimOn("kda_decode.fused_b32", 1.5));
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::REJECT) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::BENCHMARK_ONLY_GAIN,
                        "same computation, kda_decode.runner_fused_b32: speedup"))
      << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::BENCHMARK_ONLY_GAIN, "benchmark-only gain")) << Reasons(*r);
  ASSERT_EQ(r->claims.size(), 1);
  EXPECT_FALSE(r->claims[0].verified());
  EXPECT_TRUE(HasReason(*r, v1::CLAIM_NOT_VERIFIED, "not confirmed by")) << Reasons(*r);
}

TEST(ConfirmedMetricTest, AGainTheRunnerRulesOutRejectsUnderEitherPolicy) {
  for (v1::Policy policy : {v1::GAIN, v1::NO_REGRESSION}) {
    auto r = Evaluate(Input(policy, Confirmed(1.3, 1.0, 14, 0.005)));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->decision, v1::REJECT) << Reasons(*r);
    EXPECT_TRUE(HasReason(*r, v1::BENCHMARK_ONLY_GAIN, "rules out the 2.0% minimum effect"))
        << Reasons(*r);
  }
}

TEST(ConfirmedMetricTest, AConfirmerThatRanTheSameProgramRulesOutAnyGain) {
  // The runner was byte-identical in both arms (not measured): the
  // benchmark's gain is not its kernel's, even at min_effect 0.
  for (double min_effect : {0.02, 0.0}) {
    GateInput in = Input(v1::GAIN, Confirmed(2.0, 1.0, 6, 0.01));
    in.params.min_effect = min_effect;
    in.metrics[1].baseline.clear();
    in.metrics[1].candidate.clear();
    in.metrics[1].inputs_identical = true;
    auto r = Evaluate(in);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->decision, v1::REJECT) << min_effect << "\n" << Reasons(*r);
    EXPECT_TRUE(HasReason(*r, v1::BENCHMARK_ONLY_GAIN, "byte-identical")) << Reasons(*r);
  }
}

TEST(ConfirmedMetricTest, ADilutedButRealGainIsAcceptedWithItsClaim) {
  // The runner's round trip dilutes a 2x kernel to 1.4x: still a gain, so
  // the benchmark's 2x and the claim on it stand.
  GateInput in = Input(v1::GAIN, Confirmed(2.0, 1.4, 9, 0.01));
  in.claims.push_back(ClaimOn("kda_decode.fused_b32", 1.9));
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::ACCEPT) << Reasons(*r);
  ASSERT_EQ(r->claims.size(), 1);
  EXPECT_TRUE(r->claims[0].verified()) << Reasons(*r);
}

TEST(ConfirmedMetricTest, ANoisyRunnerNeverLetsABenchmarkOnlyGainThrough) {
  // The numbers: 2.879x by the benchmark, 1.011x by a runner timing
  // too noisy to rule out 2%: not accepted, and the verdict says why.
  GateInput in = Input(v1::GAIN, Confirmed(2.879, 1.011, 30, 0.05));
  in.metrics[1] = Times("kda_decode.runner_fused_b32", 1.011, 30, 0.12, 24);
  in.claims.push_back(ClaimOn("kda_decode.fused_b32", 1.5));
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->decision, v1::ACCEPT) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::BENCHMARK_ONLY_GAIN, "benchmark-only gain") ||
              HasReason(*r, v1::UNDECIDED, "not confirmed by the trusted runner's"))
      << Reasons(*r);
  EXPECT_FALSE(r->claims[0].verified());
}

TEST(ConfirmedMetricTest, AnUnconfirmedGainIsNotAcceptedAndSaysWhy) {
  // The runner's timing is too noisy to show the gain or to rule it out.
  GateInput in = Input(v1::GAIN, Confirmed(1.1, 1.1, 30, 0.01));
  in.metrics[1] = Times("kda_decode.runner_fused_b32", 1.05, 30, 0.5, 23);
  auto r = Evaluate(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::INCONCLUSIVE) << Reasons(*r);
  EXPECT_TRUE(HasReason(*r, v1::UNDECIDED, "not confirmed by the trusted runner's"))
      << Reasons(*r);
}

TEST(ConfirmedMetricTest, TheSameGainOnAnUnlinkedMetricIsAccepted) {
  // What the link changes: without it the benchmark's number alone decides.
  std::vector<MetricSamples> metrics = Confirmed(2.879, 1.011, 9, 0.05);
  metrics[0].confirmed_by.clear();
  metrics[1].primary = false;
  metrics[1].candidate = metrics[1].baseline;  // Keep the runner from regressing.
  auto r = Evaluate(Input(v1::GAIN, metrics));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->decision, v1::ACCEPT) << Reasons(*r);
}

struct BadInput {
  std::string name;
  std::function<void(GateInput&)> mutate;
  std::string message;
};

class GateBadInputTest : public ::testing::TestWithParam<BadInput> {};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

TEST_P(GateBadInputTest, ClearErrorAndNoVerdict) {
  GateInput in = Input(v1::GAIN, {Times("m", 1.5, 6, 0.01, 13)});
  GetParam().mutate(in);
  auto r = Evaluate(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Table, GateBadInputTest,
    ::testing::ValuesIn(std::vector<BadInput>{
        {"EmptySamples", [](GateInput& in) {
           in.metrics[0].baseline.clear();
           in.metrics[0].candidate.clear();
         }, "no samples"},
        {"NaN", [](GateInput& in) { in.metrics[0].candidate[2] = NAN; },
         "finite and > 0"},
        {"Inf", [](GateInput& in) { in.metrics[0].baseline[0] = INFINITY; },
         "finite and > 0"},
        {"MismatchedPairs", [](GateInput& in) { in.metrics[0].candidate.pop_back(); },
         "as many baseline as candidate"},
        {"NegativeMinEffect", [](GateInput& in) { in.params.min_effect = -0.01; },
         "min_effect"},
        {"NoMetrics", [](GateInput& in) { in.metrics.clear(); }, "no metrics"},
        {"NoPrimary", [](GateInput& in) { in.metrics[0].primary = false; },
         "needs a primary metric"},
        {"UnknownClaim", [](GateInput& in) {
           v1::Claim c;
           c.set_metric("nope");
           c.set_min_speedup(2);
           in.claims.push_back(c);
         }, "unknown metric \"nope\""},
        {"SamplesOnAnIdenticalMetric",
         [](GateInput& in) { in.metrics[0].inputs_identical = true; },
         "marked inputs-identical (not measured) but has samples"},
        {"ConfirmedByAnUnknownMetric",
         [](GateInput& in) { in.metrics[0].confirmed_by = "runner"; },
         "confirmed_by names runner, which is not a metric of this evaluation"},
        {"ConfirmedByItself", [](GateInput& in) { in.metrics[0].confirmed_by = "m"; },
         "which is the metric itself"},
        {"UnspecifiedPolicy", [](GateInput& in) { in.policy = v1::POLICY_UNSPECIFIED; },
         "GAIN or NO_REGRESSION"},
    }),
    [](const auto& info) { return info.param.name; });

TEST(ResolveTest, DefaultsAndRangeChecks) {
  auto p = ResolveGateParameters(v1::GatePolicy());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->min_effect, 0.02);
  EXPECT_EQ(p->max_pairs, 30);
  v1::GatePolicy bad;
  bad.set_min_effect(-0.1);
  EXPECT_EQ(ResolveGateParameters(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::GatePolicy few;
  few.set_min_pairs(1);
  EXPECT_THAT(std::string(ResolveGateParameters(few).status().message()),
              HasSubstr("min_pairs"));
}

}  // namespace
}  // namespace densegate::results
