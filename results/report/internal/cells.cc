#include "results/report/internal/cells.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace densegate::results::internal {

const v1::MetricComparison* Headline(const v1::Verdict& v) {
  for (const auto& m : v.metrics()) {
    if (m.primary() && !m.inputs_identical()) return &m;
  }
  for (const auto& m : v.metrics()) {
    if (m.primary()) return &m;
  }
  return v.metrics().empty() ? nullptr : &v.metrics(0);
}

// The cells of the tables both renderers print.
std::vector<std::string> CandidateCells(const CandidateRow& c) {
  std::vector<std::string> claims;
  for (const ClaimRow& cl : c.claims) {
    claims.push_back(absl::StrFormat("%s>=%.2fx %s", cl.metric, cl.claimed,
                                     cl.verified ? "verified" : "not verified"));
  }
  return {c.decided_at,
          c.submitter,
          c.kind,
          c.commit,
          c.decision,
          c.metric ? c.metric->name : "-",
          c.metric ? c.metric->text : "-",
          claims.empty() ? "-" : absl::StrJoin(claims, "; "),
          c.merge,
          c.reason ? c.reason->message : "",
          c.has_feedback ? FeedbackCommand(c) : "-"};
}
std::string FeedbackCommand(const CandidateRow& c) { return "densegate feedback " + c.evaluation; }
const std::vector<std::string> kCandidateHeaders = {
    "decided", "submitter", "kind", "commit", "decision", "metric",
    "speedup [interval]", "claims", "merge", "reason", "feedback"};

// "at its landing", or how far the split is from the nearest landing.
namespace {

std::string LandingCell(const ChangePointRow& p) {
  if (p.at_landing) return "at its landing";
  if (!p.nearest_landing) return "inside the only commit's samples";
  const int64_t offset = p.nearest_landing->offset;
  return absl::StrFormat("%d sample%s %s the landing of %s", std::abs(offset),
                         std::abs(offset) == 1 ? "" : "s", offset < 0 ? "before" : "after",
                         p.nearest_landing->commit);
}

}  // namespace

std::vector<std::string> ChangePointCells(const ChangePointRow& p) {
  return {p.metric,
          p.commit,
          LandingCell(p),
          absl::StrFormat("%d of %d", p.index, p.samples),
          absl::StrFormat("%g", p.mean_before),
          absl::StrFormat("%g", p.mean_after),
          absl::StrFormat("%.3f", p.p_value)};
}
const std::vector<std::string> kChangePointHeaders = {
    "metric", "commit", "where", "sample", "mean before", "mean after", "p"};
const char kNoChangePoints[] =
    "None found in the samples of the branch's successive tips (e-divisive, p <= 0.05, at least "
    "3 samples on each side).";

std::vector<std::string> NodeCells(const NodeRow& n) {
  return {n.name, n.state, absl::StrFormat("%.4f", n.calibration_noise), n.gate_work};
}
const std::vector<std::string> kNodeHeaders = {"node", "state", "calibration noise (CV)",
                                               "gate work"};

std::vector<std::string> BisectCells(const BisectStep& s) {
  return {absl::StrCat(s.index), s.commit, s.evaluation, s.measured ? s.measured->text : "-",
          s.result};
}
const std::vector<std::string> kBisectHeaders = {"#", "commit", "evaluation",
                                                 "speedup vs good [interval]", "result"};

std::vector<std::string> CampaignCells(const CampaignExperimentRow& x) {
  std::vector<std::string> claims;
  for (const ClaimRow& c : x.claims) {
    claims.push_back(absl::StrFormat("%s >= %.2fx", c.metric, c.claimed));
  }
  return {x.evaluation,
          x.hypothesis,
          claims.empty() ? "-" : absl::StrJoin(claims, ", "),
          x.measured ? x.measured->text : "-",
          x.confirmation.empty()
              ? "-"
              : absl::StrCat(x.confirmed ? x.confirmed->text : "-", " (",
                             x.confirmation_decision, ")"),
          x.merge};
}
const std::vector<std::string> kCampaignHeaders = {
    "evaluation", "hypothesis", "claimed", "measured when accepted", "confirmed afresh",
    "merge"};

}  // namespace densegate::results::internal
