// ReportToJson: the report model as report.json (see model.h).
#include "results/report/model.h"

namespace densegate::results {
namespace {

using json = nlohmann::json;

// Each item's ToJson, in order (defined after the overloads it calls).
template <typename T>
json Array(const std::vector<T>& items);

json ToJson(const CandidateRow& c) {
  json row = {{"evaluation", c.evaluation}, {"submitter", c.submitter},
              {"kind", c.kind},             {"commit", c.commit},
              {"hypothesis", c.hypothesis}, {"decision", c.decision},
              {"decided_at", c.decided_at}, {"merge", c.merge},
              {"claims", json::array()}};
  if (c.metric) {
    row["metric"] = {{"name", c.metric->name},         {"speedup", c.metric->speedup},
                     {"ci_low", c.metric->ci_low},     {"ci_high", c.metric->ci_high},
                     {"n_pairs", c.metric->n_pairs},   {"inputs_identical", c.metric->inputs_identical},
                     {"text", c.metric->text}};
  }
  for (const ClaimRow& claim : c.claims) {
    row["claims"].push_back(
        {{"metric", claim.metric}, {"claimed", claim.claimed}, {"verified", claim.verified}});
  }
  if (c.reason) row["reason"] = {{"code", c.reason->code}, {"message", c.reason->message}};
  if (c.has_feedback) row["feedback"] = {{"headline", c.feedback_headline}};
  return row;
}

json ToJson(const HeadlineRow& h) {
  return {{"metric", h.metric},
          {"merges", h.merges},
          {"cumulative", h.cumulative},
          {"low", h.low},
          {"high", h.high}};
}

json ToJson(const NodeRow& n) {
  return {{"name", n.name},
          {"state", n.state},
          {"calibration_noise", n.calibration_noise},
          {"gate_work", n.gate_work},
          {"fingerprint", n.fingerprint}};
}

json ToJson(const TimelineStep& s) {
  return {{"evaluation", s.evaluation},
          {"merged_sha", s.merged_sha},
          {"decided_at", s.decided_at},
          {"unit", s.unit},
          {"value", s.value ? json(*s.value) : json(nullptr)},
          {"inputs_identical", s.inputs_identical},
          {"speedup", s.speedup},
          {"cumulative", s.cumulative},
          {"cumulative_low", s.cumulative_low},
          {"cumulative_high", s.cumulative_high}};
}

json ToJson(const PrecisionChart& p) {
  auto points = [](const std::vector<std::pair<int64_t, double>>& curve) {
    json out = json::array();
    for (const auto& [length, rel_rms] : curve) out.push_back({length, rel_rms});
    return out;
  };
  return {{"evaluation", p.evaluation}, {"commit", p.commit}, {"decision", p.decision},
          {"suite", p.suite},           {"op", p.op},         {"bound", p.bound},
          {"baseline", points(p.baseline)}, {"candidate", points(p.candidate)}};
}

json ToJson(const BisectStep& s) {
  json step = {{"index", s.index},
               {"commit", s.commit},
               {"evaluation", s.evaluation},
               {"result", s.result}};
  if (s.measured) {
    step["speedup"] = s.measured->speedup;
    step["ci_low"] = s.measured->ci_low;
    step["ci_high"] = s.measured->ci_high;
    step["text"] = s.measured->text;
  }
  return step;
}

json ToJson(const Bisection& b) {
  return {{"metric", b.metric},
          {"range", b.range},
          {"commits", b.commits},
          {"steps", Array(b.steps)},
          {"culprit", b.culprit ? ToJson(*b.culprit) : json(nullptr)}};
}

json ToJson(const MetricSummary& m) {
  return {{"name", m.name},       {"speedup", m.speedup}, {"ci_low", m.ci_low},
          {"ci_high", m.ci_high}, {"n_pairs", m.n_pairs}, {"text", m.text}};
}

json ToJson(const CampaignExperimentRow& x) {
  json row = {{"evaluation", x.evaluation}, {"hypothesis", x.hypothesis},
              {"claims", json::array()},    {"confirmation", x.confirmation},
              {"confirmation_decision", x.confirmation_decision}, {"merge", x.merge}};
  for (const ClaimRow& claim : x.claims) {
    row["claims"].push_back(
        {{"metric", claim.metric}, {"claimed", claim.claimed}, {"verified", claim.verified}});
  }
  if (x.measured) row["measured"] = ToJson(*x.measured);
  if (x.confirmed) row["confirmed"] = ToJson(*x.confirmed);
  return row;
}

json ToJson(const CampaignRow& c) {
  return {{"campaign", c.campaign}, {"landed", c.landed}, {"experiments", Array(c.experiments)}};
}

json ToJson(const ChangePointRow& p) {
  json point = {{"metric", p.metric},
                {"commit", p.commit},
                {"evaluation", p.evaluation},
                {"at_landing", p.at_landing},
                {"index", p.index},
                {"samples", p.samples},
                {"mean_before", p.mean_before},
                {"mean_after", p.mean_after},
                {"p_value", p.p_value}};
  if (p.nearest_landing) {
    point["nearest_landing"] = p.nearest_landing->commit;
    point["landing_offset"] = p.nearest_landing->offset;
  }
  return point;
}

template <typename T>
json Array(const std::vector<T>& items) {
  json out = json::array();
  for (const T& item : items) out.push_back(ToJson(item));
  return out;
}

template <typename T>
json Object(const std::map<std::string, std::vector<T>>& groups) {
  json out = json::object();
  for (const auto& [key, items] : groups) out[key] = Array(items);
  return out;
}

}  // namespace

json ReportToJson(const Report& r) {
  return {{"generated_at", r.generated_at},
          {"repo", r.repo},
          {"branch", r.branch},
          {"since", r.since ? json(*r.since) : json(nullptr)},
          {"headline", Array(r.headline)},
          {"timeline", Object(r.timeline)},
          {"candidates", Array(r.candidates)},
          {"awaiting_approval", Array(r.awaiting_approval)},
          {"rejected", Object(r.rejected)},
          {"precision", Array(r.precision)},
          {"bisections", Array(r.bisections)},
          {"campaigns", Array(r.campaigns)},
          {"change_points", Array(r.change_points)},
          {"nodes", Array(r.nodes)}};
}

}  // namespace densegate::results
