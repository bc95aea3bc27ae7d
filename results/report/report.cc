#include "results/report/report.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/util/time_util.h"
#include "results/changepoint/e_divisive.h"

namespace densegate::results {
namespace {

using json = nlohmann::json;
using google::protobuf::util::TimeUtil;

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

std::string Time(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                          absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t)),
                          absl::UTCTimeZone());
}

// The metric a candidate is judged by: its first primary metric, else its
// first metric; null when the verdict has none.
const v1::MetricComparison* Headline(const v1::Verdict& v) {
  for (const auto& m : v.metrics()) {
    if (m.primary()) return &m;
  }
  return v.metrics().empty() ? nullptr : &v.metrics(0);
}

// The reason that decided a verdict: the first that is not informational.
const v1::Reason* DecidingReason(const v1::Verdict& v) {
  for (const auto& r : v.reasons()) {
    if (r.code() != v1::VERIFIED) return &r;
  }
  return v.reasons().empty() ? nullptr : &v.reasons(0);
}

absl::StatusOr<std::vector<v1::Evaluation>> FinishedEvaluations(Store& store,
                                                                const ReportRequest& request) {
  std::vector<v1::Evaluation> out;
  v1::ListEvaluationsRequest q;
  q.add_states(v1::FINISHED);
  q.set_repo(request.repo);
  if (request.since != absl::InfinitePast()) {
    *q.mutable_since() = TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(request.since));
  }
  q.set_page_size(1000);
  while (true) {
    absl::StatusOr<v1::ListEvaluationsResponse> page = store.ListEvaluations(q);
    if (!page.ok()) return page.status();
    for (const v1::Evaluation& e : page->evaluations()) {
      if (!e.has_verdict()) continue;
      if (!request.branch.empty() && e.candidate().target_branch() != request.branch) continue;
      out.push_back(e);
    }
    if (page->next_page_token().empty()) break;
    q.set_page_token(page->next_page_token());
  }
  std::sort(out.begin(), out.end(), [](const v1::Evaluation& a, const v1::Evaluation& b) {
    return TimeUtil::TimestampToNanoseconds(a.verdict().decided_at()) <
           TimeUtil::TimestampToNanoseconds(b.verdict().decided_at());
  });
  return out;
}

json CandidateRow(const v1::Evaluation& e) {
  const v1::Verdict& v = e.verdict();
  json row = {{"evaluation", e.id()},
              {"submitter", e.candidate().submitter()},
              {"kind", Lower(v1::CandidateKind_Name(e.candidate().kind()))},
              {"commit", e.candidate().candidate_sha().substr(0, 12)},
              {"hypothesis", e.candidate().hypothesis()},
              {"decision", Lower(v1::Decision_Name(v.decision()))},
              {"decided_at", Time(v.decided_at())},
              {"merge", Lower(v1::MergeState_Name(e.merge().state()))}};
  if (const v1::MetricComparison* m = Headline(v)) {
    row["metric"] = {{"name", m->metric()},
                     {"speedup", m->speedup()},
                     {"ci_low", m->ci_low()},
                     {"ci_high", m->ci_high()},
                     {"n_pairs", m->n_pairs()}};
  }
  row["claims"] = json::array();
  for (const auto& c : v.claims()) {
    row["claims"].push_back(
        {{"metric", c.metric()}, {"claimed", c.claimed()}, {"verified", c.verified()}});
  }
  if (const v1::Reason* r = DecidingReason(v)) {
    row["reason"] = {{"code", Lower(v1::ReasonCode_Name(r->code()))}, {"message", r->message()}};
  }
  return row;
}

}  // namespace

absl::StatusOr<json> BuildReport(Store& store, const ReportRequest& request, absl::Time now) {
  absl::StatusOr<std::vector<v1::Evaluation>> evaluations = FinishedEvaluations(store, request);
  if (!evaluations.ok()) return evaluations.status();

  json report;
  report["generated_at"] = absl::FormatTime("%Y-%m-%d %H:%M:%SZ", now, absl::UTCTimeZone());
  report["repo"] = request.repo;
  report["branch"] = request.branch;
  report["since"] = request.since == absl::InfinitePast()
                        ? json(nullptr)
                        : json(absl::FormatTime("%Y-%m-%d %H:%M:%SZ", request.since,
                                                absl::UTCTimeZone()));

  report["candidates"] = json::array();
  std::map<std::string, json> rejected;  // Reason code -> rows.
  // Per metric: the landed steps, in decision order.
  std::map<std::string, json> timeline;
  std::map<std::string, std::vector<std::pair<double, std::string>>> history;
  for (const v1::Evaluation& e : *evaluations) {
    json row = CandidateRow(e);
    report["candidates"].push_back(row);
    const v1::Verdict& v = e.verdict();
    if (v.decision() == v1::REJECT) {
      const std::string code = row.contains("reason") ? row["reason"]["code"].get<std::string>()
                                                      : "unspecified";
      rejected[code].push_back(row);
    }
    for (const auto& m : v.metrics()) {
      history[m.metric()].push_back({m.candidate(), e.id()});
    }
    if (e.merge().state() != v1::MERGED) continue;
    for (const auto& m : v.metrics()) {
      json& steps = timeline[m.metric()];
      const json* last = steps.empty() ? nullptr : &steps.back();
      auto product = [&](const char* key, double x) {
        return (last != nullptr ? (*last)[key].get<double>() : 1.0) * x;
      };
      steps.push_back({{"evaluation", e.id()},
                       {"merged_sha", e.merge().merged_sha().substr(0, 12)},
                       {"decided_at", Time(v.decided_at())},
                       {"unit", m.unit()},
                       {"value", m.candidate()},
                       {"speedup", m.speedup()},
                       {"cumulative", product("cumulative", m.speedup())},
                       {"cumulative_low", product("cumulative_low", m.ci_low())},
                       {"cumulative_high", product("cumulative_high", m.ci_high())}});
    }
  }

  report["headline"] = json::array();
  for (const auto& [metric, steps] : timeline) {
    const json& last = steps.back();
    report["headline"].push_back({{"metric", metric},
                                  {"merges", steps.size()},
                                  {"cumulative", last["cumulative"]},
                                  {"low", last["cumulative_low"]},
                                  {"high", last["cumulative_high"]}});
  }
  std::sort(report["headline"].begin(), report["headline"].end(),
            [](const json& a, const json& b) { return a["cumulative"] > b["cumulative"]; });
  report["timeline"] = timeline;
  report["rejected"] = rejected;

  report["change_points"] = json::array();
  EDivisiveOptions options;
  for (const auto& [metric, series] : history) {
    if (series.size() < static_cast<size_t>(2 * options.min_segment)) continue;
    std::vector<double> values;
    for (const auto& point : series) values.push_back(point.first);
    absl::StatusOr<std::vector<ChangePoint>> points = DetectChangePoints(values, options);
    if (!points.ok()) return points.status();
    for (const ChangePoint& p : *points) {
      report["change_points"].push_back({{"metric", metric},
                                         {"evaluation", series[p.index].second},
                                         {"index", p.index},
                                         {"mean_before", p.mean_before},
                                         {"mean_after", p.mean_after},
                                         {"p_value", p.p_value}});
    }
  }

  absl::StatusOr<std::vector<v1::Node>> nodes = store.ListNodes({});
  if (!nodes.ok()) return nodes.status();
  report["nodes"] = json::array();
  for (const v1::Node& n : *nodes) {
    report["nodes"].push_back({{"name", n.name()},
                               {"state", Lower(v1::NodeState_Name(n.state()))},
                               {"calibration_noise", n.calibration_noise()},
                               {"fingerprint", n.dimensions().fingerprint()}});
  }
  return report;
}

std::string RenderMarkdown(const json& r) {
  std::string md;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  const std::string scope = absl::StrCat(
      r["repo"].get<std::string>().empty() ? "all repositories" : r["repo"].get<std::string>(),
      r["branch"].get<std::string>().empty() ? "" : ", branch " + r["branch"].get<std::string>(),
      r["since"].is_null() ? "" : ", since " + r["since"].get<std::string>());
  line("# densegate report");
  line("");
  line(absl::StrCat(scope, "; generated ", r["generated_at"].get<std::string>(), "."));
  line("");
  line("## Headline");
  line("");
  if (r["headline"].empty()) {
    line("No candidate landed in this period.");
  } else {
    line("| metric | cumulative speedup | bracket | merges |");
    line("| --- | --- | --- | --- |");
    for (const json& h : r["headline"]) {
      line(absl::StrFormat("| %s | **%.2fx** | [%.2f, %.2f] | %d |", h["metric"].get<std::string>(),
                           h["cumulative"].get<double>(), h["low"].get<double>(),
                           h["high"].get<double>(), h["merges"].get<int>()));
    }
    line("");
    line("Cumulative: the product of the landed candidates' speedups; the bracket "
         "multiplies their interval ends.");
  }
  line("");
  line("## Timeline of landed commits");
  for (const auto& [metric, steps] : r["timeline"].items()) {
    line("");
    line(absl::StrCat("### ", metric));
    line("");
    line("| landed | commit | evaluation | step | cumulative | value |");
    line("| --- | --- | --- | --- | --- | --- |");
    for (const json& s : steps) {
      line(absl::StrFormat("| %s | %s | %s | %.3fx | %.3fx | %g %s |",
                           s["decided_at"].get<std::string>(), s["merged_sha"].get<std::string>(),
                           s["evaluation"].get<std::string>(), s["speedup"].get<double>(),
                           s["cumulative"].get<double>(), s["value"].get<double>(),
                           s["unit"].get<std::string>()));
    }
  }
  line("");
  line("## Candidates");
  line("");
  if (r["candidates"].empty()) {
    line("No evaluation finished in this period.");
  } else {
    line("| decided | submitter | kind | commit | decision | metric | speedup [interval] | claims | "
         "merge | reason |");
    line("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (const json& c : r["candidates"]) {
      std::string metric = "-", speedup = "-";
      if (c.contains("metric")) {
        metric = c["metric"]["name"];
        speedup = absl::StrFormat("%.3fx [%.3f, %.3f]", c["metric"]["speedup"].get<double>(),
                                  c["metric"]["ci_low"].get<double>(),
                                  c["metric"]["ci_high"].get<double>());
      }
      std::vector<std::string> claims;
      for (const json& cl : c["claims"]) {
        claims.push_back(absl::StrFormat("%s>=%.2fx %s", cl["metric"].get<std::string>(),
                                         cl["claimed"].get<double>(),
                                         cl["verified"].get<bool>() ? "verified" : "not verified"));
      }
      std::string reason = c.contains("reason") ? c["reason"]["message"].get<std::string>() : "";
      absl::StrReplaceAll({{"|", "\\|"}, {"\n", " "}}, &reason);
      line(absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
                           c["decided_at"].get<std::string>(), c["submitter"].get<std::string>(),
                           c["kind"].get<std::string>(), c["commit"].get<std::string>(),
                           c["decision"].get<std::string>(), metric, speedup,
                           claims.empty() ? "-" : absl::StrJoin(claims, "; "),
                           c["merge"].get<std::string>(), reason));
    }
  }
  line("");
  line("## Rejected, by reason");
  if (r["rejected"].empty()) {
    line("");
    line("Nothing was rejected.");
  }
  for (const auto& [code, rows] : r["rejected"].items()) {
    line("");
    line(absl::StrFormat("### %s (%d)", code, rows.size()));
    line("");
    for (const json& c : rows) {
      line(absl::StrFormat("- %s by %s: %s", c["commit"].get<std::string>(),
                           c["submitter"].get<std::string>(),
                           c.contains("reason") ? c["reason"]["message"].get<std::string>() : ""));
    }
  }
  line("");
  line("## Change points");
  line("");
  if (r["change_points"].empty()) {
    line("None found (e-divisive needs at least 6 verdicts of a metric).");
  } else {
    line("| metric | at evaluation | mean before | mean after | p |");
    line("| --- | --- | --- | --- | --- |");
    for (const json& p : r["change_points"]) {
      line(absl::StrFormat("| %s | %s | %g | %g | %.3f |", p["metric"].get<std::string>(),
                           p["evaluation"].get<std::string>(), p["mean_before"].get<double>(),
                           p["mean_after"].get<double>(), p["p_value"].get<double>()));
    }
  }
  line("");
  line("## Nodes");
  line("");
  if (r["nodes"].empty()) {
    line("No node registered.");
  } else {
    line("| node | state | calibration noise (CV) |");
    line("| --- | --- | --- |");
    for (const json& n : r["nodes"]) {
      line(absl::StrFormat("| %s | %s | %.4f |", n["name"].get<std::string>(),
                           n["state"].get<std::string>(), n["calibration_noise"].get<double>()));
    }
  }
  return md;
}

}  // namespace densegate::results
