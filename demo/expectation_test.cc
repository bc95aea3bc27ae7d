#include "demo/expectation.h"

#include "gtest/gtest.h"

namespace densegate::demo {
namespace {

ScenarioCandidate GainCandidate() {
  ScenarioCandidate c;
  c.name = "fused";
  c.expect_decision = v1::ACCEPT;
  c.expect_merged = true;
  c.expect_gain = true;
  return c;
}

v1::Evaluation Finished(v1::Decision decision, v1::Policy policy = v1::GAIN) {
  v1::Evaluation e;
  e.set_state(v1::FINISHED);
  e.mutable_verdict()->set_decision(decision);
  e.mutable_verdict()->set_policy(policy);
  return e;
}

// An inconclusive verdict the gate gave for want of pairs.
v1::Evaluation OutOfPairs() {
  v1::Evaluation e = Finished(v1::INCONCLUSIVE);
  v1::Reason* r = e.mutable_verdict()->add_reasons();
  r->set_code(v1::UNDECIDED);
  r->set_metric("runtime.output_tok_s");
  return e;
}

TEST(ExpectationTest, AcceptedMergedGainMatches) {
  v1::Evaluation e = Finished(v1::ACCEPT);
  e.mutable_merge()->set_state(v1::MERGED);
  EXPECT_EQ(Mismatch(GainCandidate(), e), "");
}

TEST(ExpectationTest, UnverifiedClaimIsAMissEvenWhenAccepted) {
  v1::Evaluation e = Finished(v1::ACCEPT);
  e.mutable_merge()->set_state(v1::MERGED);
  v1::ClaimResult* claim = e.mutable_verdict()->add_claims();
  claim->set_metric("kda_decode.default_b1");
  claim->set_claimed(1.7);
  claim->set_verified(false);
  EXPECT_EQ(Mismatch(GainCandidate(), e), "expected the claim kda_decode.default_b1 >= 1.70x verified");
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), e, nullptr), "");
}

TEST(ExpectationTest, NeutralChangeAcceptedUnderNoRegressionIsNotAGain) {
  ScenarioCandidate c = GainCandidate();
  c.expect_merged = false;
  EXPECT_EQ(Mismatch(c, Finished(v1::ACCEPT, v1::NO_REGRESSION)), "expected a verified gain");
  c.expect_gain = false;
  EXPECT_EQ(Mismatch(c, Finished(v1::ACCEPT, v1::NO_REGRESSION)), "");
}

TEST(ExpectationTest, InconclusiveInsteadOfAcceptIsOnlyUndecided) {
  const v1::Evaluation e = OutOfPairs();
  EXPECT_EQ(Mismatch(GainCandidate(), e), "expected accept");
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), e, nullptr), "inconclusive");
}

TEST(ExpectationTest, InconclusiveForReviewOrWithAClaimInDoubtIsAMiss) {
  // Held for review: a speedup above the plausible ceiling.
  v1::Evaluation review = OutOfPairs();
  v1::Reason* r = review.mutable_verdict()->add_reasons();
  r->set_code(v1::NEEDS_REVIEW);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), review, nullptr), "");
  // The claim's interval lies below the claim.
  v1::Evaluation doubt = OutOfPairs();
  v1::ClaimResult* claim = doubt.mutable_verdict()->add_claims();
  claim->set_claimed(1.7);
  claim->set_ci_low(1.2);
  claim->set_ci_high(1.5);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), doubt, nullptr), "");
  // A claim still open (its interval reaches the claim) does not stop it.
  claim->set_ci_high(1.9);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), doubt, nullptr), "inconclusive");
}

TEST(ExpectationTest, WrongDecisionsAreNeverExcused) {
  // A gain rejected.
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), Finished(v1::REJECT), nullptr), "");
  // A candidate that must be rejected but was accepted or left undecided.
  ScenarioCandidate bad;
  bad.expect_decision = v1::REJECT;
  bad.expect_reason = v1::GAMING;
  EXPECT_EQ(Mismatch(bad, Finished(v1::ACCEPT)), "expected reject");
  EXPECT_EQ(InconclusiveOnly(bad, Finished(v1::ACCEPT), nullptr), "");
  EXPECT_EQ(InconclusiveOnly(bad, OutOfPairs(), nullptr), "");
  // An evaluation that never finished.
  v1::Evaluation dead;
  dead.set_state(v1::DEAD);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), dead, nullptr), "");
}

TEST(ExpectationTest, MergeRefusedAfterAnInconclusiveRemeasureIsOnlyUndecided) {
  v1::Evaluation e = Finished(v1::ACCEPT);
  e.mutable_merge()->set_state(v1::MERGE_FAILED);
  e.mutable_merge()->set_message("re-measure inconclusive");
  EXPECT_EQ(Mismatch(GainCandidate(), e), "expected a merge: merge_failed re-measure inconclusive");
  const v1::Evaluation remeasure = OutOfPairs();
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), e, &remeasure),
            "accepted; the re-measure against the moved tip was inconclusive, so not merged");
  // A merge that failed for another reason (a conflict, a rejecting
  // re-measure, none at all) is a miss.
  const v1::Evaluation rejected = Finished(v1::REJECT);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), e, &rejected), "");
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), e, nullptr), "");
  // So is anything else wrong beside the merge: accepted under
  // NO_REGRESSION where a verified gain was expected.
  v1::Evaluation neutral = Finished(v1::ACCEPT, v1::NO_REGRESSION);
  neutral.mutable_merge()->set_state(v1::MERGE_FAILED);
  EXPECT_EQ(InconclusiveOnly(GainCandidate(), neutral, &remeasure), "");
}

}  // namespace
}  // namespace densegate::demo
