#include "results/verdict/verdict.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace densegate::results {
namespace {

using test::TestTmpDir;

using ::testing::HasSubstr;

MetricSamples Spec(const std::string& name, bool primary) {
  MetricSamples m;
  m.name = name;
  m.unit = "ns";
  m.direction = v1::LOWER_IS_BETTER;
  m.primary = primary;
  return m;
}

v1::Sample MakeSample(const std::string& metric, v1::Arm arm, int pair, double value) {
  v1::Sample s;
  s.set_metric(metric);
  s.set_arm(arm);
  s.set_pair_index(pair);
  s.set_value(value);
  s.set_unit("ns");
  return s;
}

TEST(PairSamplesTest, PairsByIndexInAnyOrder) {
  std::vector<v1::Sample> samples = {
      MakeSample("m", v1::CANDIDATE, 1, 40), MakeSample("m", v1::BASELINE, 0, 100),
      MakeSample("m", v1::BASELINE, 1, 90), MakeSample("m", v1::CANDIDATE, 0, 50),
      MakeSample("m", v1::BASELINE, 2, 95)};  // Pair 2 is incomplete: ignored.
  auto paired = PairSamples(samples, {Spec("m", true)});
  ASSERT_TRUE(paired.ok()) << paired.status();
  EXPECT_EQ((*paired)[0].baseline, (std::vector<double>{100, 90}));
  EXPECT_EQ((*paired)[0].candidate, (std::vector<double>{50, 40}));
  EXPECT_TRUE((*paired)[0].primary);
}

// Only an inconclusive verdict held back by noise alone is continued, and
// only a first part that kept budget for it.
TEST(ContinuationTest, DueOnlyForAFirstPartThatNoiseLeftInconclusive) {
  v1::Evaluation e;
  e.set_state(v1::FINISHED);
  e.mutable_candidate()->set_error_share(0.9);
  v1::Verdict& v = *e.mutable_verdict();
  v.set_decision(v1::INCONCLUSIVE);
  v.add_reasons()->set_code(v1::UNDECIDED);
  v.add_reasons()->set_code(v1::CLAIM_NOT_VERIFIED);
  EXPECT_TRUE(InconclusiveForNoise(v));
  EXPECT_TRUE(ContinuationDue(e));

  v1::Evaluation review = e;
  review.mutable_verdict()->add_reasons()->set_code(v1::NEEDS_REVIEW);  // Too good to be true.
  EXPECT_FALSE(ContinuationDue(review));
  v1::Evaluation second = e;
  second.mutable_candidate()->set_continues("ev-first");
  EXPECT_FALSE(ContinuationDue(second));
  v1::Evaluation remeasure = e;
  remeasure.mutable_candidate()->set_remeasure_of("ev-merged");
  EXPECT_FALSE(ContinuationDue(remeasure));
  v1::Evaluation whole_budget = e;
  whole_budget.mutable_candidate()->clear_error_share();
  EXPECT_FALSE(ContinuationDue(whole_budget));
  v1::Evaluation decided = e;
  decided.mutable_verdict()->set_decision(v1::REJECT);
  EXPECT_FALSE(ContinuationDue(decided));
  v1::Evaluation running = e;
  running.set_state(v1::RUNNING);
  EXPECT_FALSE(ContinuationDue(running));
}

TEST(PairSamplesTest, RejectsUnknownMetricAndDuplicates) {
  auto unknown = PairSamples({MakeSample("x", v1::BASELINE, 0, 1)}, {Spec("m", true)});
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("\"x\""));
  auto dup = PairSamples({MakeSample("m", v1::BASELINE, 0, 1), MakeSample("m", v1::BASELINE, 0, 2)},
                         {Spec("m", true)});
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("two BASELINE samples"));
  auto none = PairSamples({MakeSample("m", v1::BASELINE, 0, 1)}, {Spec("m", true)});
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no complete"));
}

// Runs one evaluation through a real store the way a node does: claim,
// append samples, decide, finish with the verdict.
class RecomputeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenStore("sqlite:" + TestTmpDir() + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    v1::NodeDimensions dims;
    dims.set_accelerator_kind("cpu");
    dims.set_fingerprint("fp-1");
    auto node = store_->RegisterNode("node-a", dims);
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = *node;
    SubmitParams submit;
    v1::Candidate& c = submit.candidate;
    c.set_id("cand-1");
    c.set_repo("/repo");
    c.set_baseline_sha(std::string(40, 'a'));
    c.set_candidate_sha(std::string(40, 'b'));
    c.set_kind(v1::EXPERIMENT);
    c.set_submitter("agent");
    v1::Claim* claim = c.add_claims();
    claim->set_metric("kda_decode.fused_b32");
    claim->set_min_speedup(1.7);
    auto submitted = store_->Submit(submit);
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    evaluation_id_ = submitted->evaluation.id();
    ClaimRequest claim_request;
    claim_request.node_id = node_.id();
    claim_request.dimensions = dims;
    auto leases = store_->ClaimJobs(claim_request);
    ASSERT_TRUE(leases.ok() && leases->size() == 1);
    lease_ = {(*leases)[0].id(), node_.id()};
  }

  // Appends `n` pairs of two metrics and returns the gate input they form.
  GateInput Measure(int n, std::vector<int64_t>* ids) {
    std::mt19937_64 rng(5);
    std::normal_distribution<double> noise(0, 0.01);
    std::vector<v1::Sample> samples;
    for (int i = 0; i < n; ++i) {
      samples.push_back(MakeSample("kda_decode.fused_b32", v1::BASELINE, i, 3400 * std::exp(noise(rng))));
      samples.push_back(MakeSample("kda_decode.fused_b32", v1::CANDIDATE, i, 1000 * std::exp(noise(rng))));
      samples.push_back(MakeSample("serve.tpot", v1::BASELINE, i, 20 * std::exp(noise(rng))));
      samples.push_back(MakeSample("serve.tpot", v1::CANDIDATE, i, 20 * std::exp(noise(rng))));
    }
    auto appended = store_->AppendSamples(lease_, samples);
    EXPECT_TRUE(appended.ok()) << appended.status();
    *ids = *appended;
    auto stored = store_->ListSamples(evaluation_id_);
    GateInput in;
    in.policy = v1::GAIN;
    in.seed = 1234;
    in.claims.push_back(store_->GetEvaluation(evaluation_id_)->candidate().claims(0));
    MetricSamples e2e = Spec("serve.tpot", false);
    e2e.stage = v1::END_TO_END;
    in.metrics = *PairSamples(*stored, {Spec("kda_decode.fused_b32", true), e2e});
    return in;
  }

  v1::Verdict Decide(const GateInput& in, const std::vector<int64_t>& ids) {
    auto result = Evaluate(in);
    EXPECT_TRUE(result.ok() && !result->needs_more_pairs);
    VerdictContext ctx;
    ctx.evaluation_id = evaluation_id_;
    ctx.candidate_id = "cand-1";
    ctx.node_id = node_.id();
    ctx.node_fingerprint = "fp-1";
    ctx.manifest_hash = "m-hash";
    ctx.software_version = "test";
    ctx.sample_ids = ids;
    return MakeVerdict(in, *result, ctx);
  }

  std::unique_ptr<Store> store_;
  v1::Node node_;
  std::string evaluation_id_;
  LeaseRef lease_;
};

TEST_F(RecomputeTest, StoredVerdictRecomputesIdentically) {
  std::vector<int64_t> ids;
  GateInput in = Measure(9, &ids);
  v1::Verdict verdict = Decide(in, ids);
  ASSERT_EQ(verdict.decision(), v1::ACCEPT);
  ASSERT_TRUE(store_->FinishLease(lease_, verdict).ok());

  auto r = RecomputeVerdict(*store_, evaluation_id_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->identical()) << r->differences.front();
  EXPECT_EQ(r->recomputed.decision(), v1::ACCEPT);
  EXPECT_EQ(r->recomputed.metrics_size(), 2);
  EXPECT_TRUE(r->recomputed.claims(0).verified());
  EXPECT_EQ(r->recomputed.metrics(0).SerializeAsString(), verdict.metrics(0).SerializeAsString());
}

// A second part's verdict recomputes from its own provenance: its pair
// counts (36 to 60) and the share of alpha it spent (its bounds' level).
TEST_F(RecomputeTest, ASecondPartRecomputesWithTheShareItSpent) {
  std::vector<int64_t> ids;
  GateInput in = Measure(36, &ids);
  in.params = PartParameters(GateParameters{}, 0.1, true);
  v1::Verdict verdict = Decide(in, ids);
  ASSERT_EQ(verdict.decision(), v1::ACCEPT);
  EXPECT_EQ(verdict.provenance().error_share(), 0.1);
  EXPECT_TRUE(verdict.provenance().second_part());
  ASSERT_TRUE(store_->FinishLease(lease_, verdict).ok());
  auto r = RecomputeVerdict(*store_, evaluation_id_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->identical()) << r->differences.front();
  // Spent at the whole budget, the same pairs give other bounds.
  GateInput whole = in;
  whole.params = PartParameters(GateParameters{}, 1, true);
  EXPECT_NE(Decide(whole, ids).metrics(0).ci_low(), verdict.metrics(0).ci_low());
}

TEST_F(RecomputeTest, AMetricNotMeasuredBecauseItsInputsWereIdenticalRecomputes) {
  std::vector<int64_t> ids;
  GateInput in = Measure(9, &ids);
  MetricSamples unchanged = Spec("runtime.output_tok_s", true);
  unchanged.direction = v1::HIGHER_IS_BETTER;
  unchanged.inputs_identical = true;
  in.metrics.push_back(unchanged);
  v1::Verdict verdict = Decide(in, ids);
  ASSERT_EQ(verdict.decision(), v1::ACCEPT);
  ASSERT_TRUE(store_->FinishLease(lease_, verdict).ok());

  auto r = RecomputeVerdict(*store_, evaluation_id_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->identical()) << r->differences.front();
  ASSERT_EQ(r->recomputed.metrics_size(), 3);
  EXPECT_TRUE(r->recomputed.metrics(2).inputs_identical());
  EXPECT_EQ(r->recomputed.metrics(2).n_pairs(), 0);
}

TEST_F(RecomputeTest, ForgedNumbersAreReported) {
  std::vector<int64_t> ids;
  GateInput in = Measure(6, &ids);
  v1::Verdict verdict = Decide(in, ids);
  verdict.mutable_metrics(0)->set_ci_low(verdict.metrics(0).ci_low() * 1.1);
  ASSERT_TRUE(store_->FinishLease(lease_, verdict).ok());
  auto r = RecomputeVerdict(*store_, evaluation_id_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->identical());
  EXPECT_THAT(r->differences.front(), HasSubstr("ci_low"));
}

// With the baseline's manifest, its metrics decide: the same verdict where
// they agree with what the node reported; an error where the node left out
// one the manifest gates (a confirmer), or reported one it does not.
TEST_F(RecomputeTest, WithTheManifestItsMetricsDecide) {
  std::vector<int64_t> ids;
  v1::Verdict verdict = Decide(Measure(9, &ids), ids);
  ASSERT_EQ(verdict.decision(), v1::ACCEPT);
  v1::Manifest manifest;
  *manifest.mutable_gate() = verdict.provenance().policy_parameters();
  v1::BenchmarkSpec* micro = manifest.add_benchmarks();
  micro->set_kind(v1::GOOGLE_BENCHMARK);
  v1::MetricSpec* fused = micro->add_metrics();
  fused->set_name("kda_decode.fused_b32");
  fused->set_unit("ns");
  fused->set_direction(v1::LOWER_IS_BETTER);
  fused->set_primary(true);
  v1::BenchmarkSpec* serve = manifest.add_benchmarks();
  serve->set_kind(v1::JSON_COMMAND);
  v1::MetricSpec* tpot = serve->add_metrics();
  tpot->set_name("serve.tpot");
  tpot->set_unit("ns");
  tpot->set_direction(v1::LOWER_IS_BETTER);
  const v1::Evaluation evaluation = *store_->GetEvaluation(evaluation_id_);
  const std::vector<v1::Sample> samples = *store_->ListSamples(evaluation_id_);

  absl::StatusOr<v1::Verdict> same = Redecide(verdict, evaluation, samples, &manifest);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_THAT(DecisionDifferences(verdict, *same), ::testing::IsEmpty());

  v1::KernelCheck* runner = manifest.add_kernel_checks();
  runner->set_metric("kda_decode.runner_fused_b32");
  fused->set_confirmed_by("kda_decode.runner_fused_b32");
  absl::StatusOr<v1::Verdict> unconfirmed = Redecide(verdict, evaluation, samples, &manifest);
  EXPECT_EQ(unconfirmed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unconfirmed.status().message()),
              HasSubstr("leaves out kda_decode.runner_fused_b32"));

  manifest.clear_kernel_checks();
  fused->clear_confirmed_by();
  manifest.mutable_benchmarks()->RemoveLast();
  absl::StatusOr<v1::Verdict> undeclared = Redecide(verdict, evaluation, samples, &manifest);
  EXPECT_EQ(undeclared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(undeclared.status().message()), HasSubstr("serve.tpot"));
}

TEST_F(RecomputeTest, UnknownEvaluationIsNotFound) {
  EXPECT_EQ(RecomputeVerdict(*store_, "no-such-id").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace densegate::results
