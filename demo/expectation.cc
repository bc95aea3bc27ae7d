#include "demo/expectation.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace densegate::demo {
namespace {

// An inconclusive verdict that only ran out of pairs: every reason is
// UNDECIDED (the gate's "not decided at the pair budget") and no claim's
// interval lies below what was claimed. Not one held back for review (a
// speedup above the plausible ceiling) or with a claim in doubt.
bool UndecidedOnly(const v1::Verdict& v) {
  const bool reasons_undecided =
      std::all_of(v.reasons().begin(), v.reasons().end(), [](const v1::Reason& r) {
        return r.code() == v1::UNDECIDED || r.code() == v1::VERIFIED;
      });
  const bool claims_open =
      std::none_of(v.claims().begin(), v.claims().end(),
                   [](const v1::ClaimResult& c) { return c.ci_high() < c.claimed(); });
  return v.decision() == v1::INCONCLUSIVE && reasons_undecided && claims_open;
}

}  // namespace

std::string Mismatch(const ScenarioCandidate& c, const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) {
    // What ended it: the last stage that did not pass says why.
    std::string why;
    for (const v1::Stage& st : e.stages()) {
      if (st.status() == v1::STAGE_ERROR || st.status() == v1::STAGE_FAILED) why = st.summary();
    }
    return "no verdict: " + absl::AsciiStrToLower(v1::EvaluationState_Name(e.state())) +
           (why.empty() ? "" : " (" + why + ")");
  }
  const v1::Verdict& v = e.verdict();
  if (v.decision() != c.expect_decision) {
    return "expected " + absl::AsciiStrToLower(v1::Decision_Name(c.expect_decision));
  }
  if (c.expect_reason != v1::REASON_CODE_UNSPECIFIED &&
      std::none_of(v.reasons().begin(), v.reasons().end(),
                   [&](const v1::Reason& r) { return r.code() == c.expect_reason; })) {
    return "expected the reason " + absl::AsciiStrToLower(v1::ReasonCode_Name(c.expect_reason));
  }
  // An accepted candidate's claims must hold, not just its decision.
  if (c.expect_decision == v1::ACCEPT) {
    for (const v1::ClaimResult& claim : v.claims()) {
      if (!claim.verified()) {
        return absl::StrFormat("expected the claim %s >= %.2fx verified", claim.metric(),
                               claim.claimed());
      }
    }
  }
  if (c.expect_merged && e.merge().state() != v1::MERGED) {
    return "expected a merge: " +
           absl::AsciiStrToLower(v1::MergeState_Name(e.merge().state())) + " " +
           e.merge().message();
  }
  // A gain counts only when accepted under GAIN; a neutral change accepted
  // under NO_REGRESSION is not one.
  const bool gain = v.decision() == v1::ACCEPT && v.policy() == v1::GAIN;
  if (gain != c.expect_gain) return c.expect_gain ? "expected a verified gain" : "counted as a gain";
  return "";
}

std::string InconclusiveOnly(const ScenarioCandidate& c, const v1::Evaluation& e,
                             const v1::Evaluation* remeasure) {
  if (c.expect_decision != v1::ACCEPT || e.state() != v1::FINISHED) return "";
  if (UndecidedOnly(e.verdict())) return "inconclusive";
  if (e.merge().state() != v1::MERGE_FAILED || remeasure == nullptr ||
      remeasure->state() != v1::FINISHED || !UndecidedOnly(remeasure->verdict())) {
    return "";
  }
  // Everything but the merge must be as expected.
  v1::Evaluation merged = e;
  merged.mutable_merge()->set_state(v1::MERGED);
  if (!Mismatch(c, merged).empty()) return "";
  return "accepted; the re-measure against the moved tip was inconclusive, so not merged";
}

}  // namespace densegate::demo
