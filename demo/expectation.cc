#include "demo/expectation.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace densegate::demo {
namespace {

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

bool ClaimsVerified(const v1::Verdict& v) {
  return std::all_of(v.claims().begin(), v.claims().end(),
                     [](const v1::ClaimResult& c) { return c.verified(); });
}

}  // namespace

std::string Mismatch(const ScenarioCandidate& c, const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) {
    // What ended it: the last stage that did not pass says why.
    std::string why;
    for (const v1::Stage& st : e.stages()) {
      if (st.status() == v1::STAGE_ERROR || st.status() == v1::STAGE_FAILED) why = st.summary();
    }
    return "no verdict: " + Lower(v1::EvaluationState_Name(e.state())) +
           (why.empty() ? "" : " (" + why + ")");
  }
  const v1::Verdict& v = e.verdict();
  if (v.decision() != c.expect_decision) {
    return "expected " + Lower(v1::Decision_Name(c.expect_decision));
  }
  if (c.expect_reason != v1::REASON_CODE_UNSPECIFIED &&
      std::none_of(v.reasons().begin(), v.reasons().end(),
                   [&](const v1::Reason& r) { return r.code() == c.expect_reason; })) {
    return "expected the reason " + Lower(v1::ReasonCode_Name(c.expect_reason));
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
    return "expected a merge: " + Lower(v1::MergeState_Name(e.merge().state())) + " " +
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
  const v1::Verdict& v = e.verdict();
  if (v.decision() == v1::INCONCLUSIVE) return "inconclusive";
  const bool remeasure_inconclusive = remeasure != nullptr &&
                                      remeasure->state() == v1::FINISHED &&
                                      remeasure->verdict().decision() == v1::INCONCLUSIVE;
  if (v.decision() == v1::ACCEPT && ClaimsVerified(v) &&
      e.merge().state() == v1::MERGE_FAILED && remeasure_inconclusive) {
    return "accepted; the re-measure against the moved tip was inconclusive, so not merged";
  }
  return "";
}

}  // namespace densegate::demo
