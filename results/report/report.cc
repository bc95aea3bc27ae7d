#include "results/report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// Precision charts kept in a report (the most recent evaluations').
constexpr size_t kMaxPrecisionCharts = 12;

std::string Time(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                          absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t)),
                          absl::UTCTimeZone());
}

// The metric a candidate is judged by: its first primary metric, else its
// first metric; null when the verdict has none.
// The first measured primary metric, else the first primary one.
const v1::MetricComparison* Headline(const v1::Verdict& v) {
  for (const auto& m : v.metrics()) {
    if (m.primary() && !m.inputs_identical()) return &m;
  }
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

// The finished evaluations of the request's repository and period, every
// branch's (and none's), in decision order.
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
      if (e.has_verdict()) out.push_back(e);
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
              {"kind", absl::AsciiStrToLower(v1::CandidateKind_Name(e.candidate().kind()))},
              {"commit", e.candidate().candidate_sha().substr(0, 12)},
              {"hypothesis", e.candidate().hypothesis()},
              {"decision", absl::AsciiStrToLower(v1::Decision_Name(v.decision()))},
              {"decided_at", Time(v.decided_at())},
              {"merge", absl::AsciiStrToLower(v1::MergeState_Name(e.merge().state()))}};
  if (const v1::MetricComparison* m = Headline(v)) {
    row["metric"] = {{"name", m->metric()},
                     {"speedup", m->speedup()},
                     {"ci_low", m->ci_low()},
                     {"ci_high", m->ci_high()},
                     {"n_pairs", m->n_pairs()},
                     {"inputs_identical", m->inputs_identical()},
                     {"text", SpeedupText(*m)}};
  }
  row["claims"] = json::array();
  for (const auto& c : v.claims()) {
    row["claims"].push_back(
        {{"metric", c.metric()}, {"claimed", c.claimed()}, {"verified", c.verified()}});
  }
  if (const v1::Reason* r = DecidingReason(v)) {
    row["reason"] = {{"code", absl::AsciiStrToLower(v1::ReasonCode_Name(r->code()))},
                     {"message", r->message()}};
  }
  return row;
}

// The cells of the tables both renderers print, from the report's JSON.
std::vector<std::string> CandidateCells(const json& c) {
  std::string metric = "-", speedup = "-";
  if (c.contains("metric")) {
    metric = c["metric"]["name"];
    speedup = c["metric"]["text"];
  }
  std::vector<std::string> claims;
  for (const json& cl : c["claims"]) {
    claims.push_back(absl::StrFormat("%s>=%.2fx %s", cl["metric"].get<std::string>(),
                                     cl["claimed"].get<double>(),
                                     cl["verified"].get<bool>() ? "verified" : "not verified"));
  }
  return {c["decided_at"], c["submitter"], c["kind"], c["commit"], c["decision"], metric,
          speedup, claims.empty() ? "-" : absl::StrJoin(claims, "; "), c["merge"],
          c.contains("reason") ? c["reason"]["message"].get<std::string>() : ""};
}
const std::vector<std::string> kCandidateHeaders = {
    "decided", "submitter", "kind", "commit", "decision", "metric",
    "speedup [interval]", "claims", "merge", "reason"};

// "at its landing", or how far the split is from the nearest landing.
std::string LandingCell(const json& p) {
  if (p["at_landing"].get<bool>()) return "at its landing";
  if (!p.contains("nearest_landing")) return "inside the only commit's samples";
  const long offset = p["landing_offset"].get<long>();
  return absl::StrFormat("%d sample%s %s the landing of %s", std::abs(offset),
                         std::abs(offset) == 1 ? "" : "s", offset < 0 ? "before" : "after",
                         p["nearest_landing"].get<std::string>());
}

std::vector<std::string> ChangePointCells(const json& p) {
  return {p["metric"],
          p["commit"],
          LandingCell(p),
          absl::StrFormat("%d of %d", p["index"].get<int>(), p["samples"].get<int>()),
          absl::StrFormat("%g", p["mean_before"].get<double>()),
          absl::StrFormat("%g", p["mean_after"].get<double>()),
          absl::StrFormat("%.3f", p["p_value"].get<double>())};
}
const std::vector<std::string> kChangePointHeaders = {
    "metric", "commit", "where", "sample", "mean before", "mean after", "p"};
constexpr char kNoChangePoints[] =
    "None found in the samples of the branch's successive tips (e-divisive, p <= 0.05, at least "
    "3 samples on each side).";

std::vector<std::string> NodeCells(const json& n) {
  return {n["name"], n["state"], absl::StrFormat("%.4f", n["calibration_noise"].get<double>()),
          n["gate_work"]};
}
const std::vector<std::string> kNodeHeaders = {"node", "state", "calibration noise (CV)",
                                               "gate work"};

std::vector<std::string> BisectCells(const json& s) {
  return {absl::StrCat(s["index"].get<int>()), s["commit"], s["evaluation"],
          s.contains("text") ? s["text"].get<std::string>() : "-", s["result"]};
}
const std::vector<std::string> kBisectHeaders = {"#", "commit", "evaluation",
                                                 "speedup vs good [interval]", "result"};

// `rows` built by `cells` from the JSON array `items`.
template <typename F>
std::vector<std::vector<std::string>> Rows(const json& items, F cells) {
  std::vector<std::vector<std::string>> rows;
  for (const json& item : items) rows.push_back(cells(item));
  return rows;
}

std::string MarkdownTable(const std::vector<std::string>& headers,
                          const std::vector<std::vector<std::string>>& rows) {
  auto row = [](const std::vector<std::string>& cells) {
    std::vector<std::string> escaped;
    for (const std::string& c : cells) {
      escaped.push_back(absl::StrReplaceAll(c, {{"|", "\\|"}, {"\n", " "}}));
    }
    return absl::StrCat("| ", absl::StrJoin(escaped, " | "), " |\n");
  };
  std::string out = row(headers);
  out += row(std::vector<std::string>(headers.size(), "---"));
  for (const auto& r : rows) out += row(r);
  return out;
}

}  // namespace

std::string BisectCampaign(const std::string& metric, const std::string& good,
                           const std::string& bad) {
  return absl::StrCat("bisect:", metric, "@", good.substr(0, 12), "..", bad.substr(0, 12));
}

std::string BisectHypothesis(int index, int count) {
  return absl::StrFormat("bisect commit %d of %d", index, count);
}

std::string SpeedupText(const v1::MetricComparison& m) {
  if (m.inputs_identical()) return "unchanged, not measured (inputs identical in both arms)";
  return absl::StrFormat("%.3fx [%.3f, %.3f], %d pairs", m.speedup(), m.ci_low(), m.ci_high(),
                         m.n_pairs());
}

const v1::MetricComparison* FindMetric(const v1::Verdict& verdict, absl::string_view metric) {
  for (const auto& m : verdict.metrics()) {
    if (m.metric() == metric) return &m;
  }
  return nullptr;
}

BisectResult ClassifyBisectStep(const v1::Verdict& verdict, absl::string_view metric) {
  if (FindMetric(verdict, metric) == nullptr) return BisectResult::kUndecided;
  for (const v1::Reason& r : verdict.reasons()) {
    if (r.code() == v1::REGRESSION && r.metric() == metric) return BisectResult::kRegressed;
  }
  return verdict.decision() == v1::ACCEPT ? BisectResult::kClean : BisectResult::kUndecided;
}

const char* BisectResultName(BisectResult result) {
  switch (result) {
    case BisectResult::kClean:
      return "clean";
    case BisectResult::kRegressed:
      return "regressed";
    case BisectResult::kUndecided:
      break;
  }
  return "undecided";
}

namespace {

// Each bisection: its steps in range order and the culprit, the first
// regressed commit whose predecessor is the good end or measured clean.
json Bisections(const std::vector<v1::Evaluation>& evaluations) {
  std::map<std::string, std::vector<std::pair<int, const v1::Evaluation*>>> runs;
  std::map<std::string, int> counts;
  for (const v1::Evaluation& e : evaluations) {
    const std::string& campaign = e.candidate().campaign();
    int index = 0, count = 0;
    if (campaign.rfind("bisect:", 0) != 0 ||
        std::sscanf(e.candidate().hypothesis().c_str(), "bisect commit %d of %d", &index,
                    &count) != 2) {
      continue;
    }
    runs[campaign].push_back({index, &e});
    counts[campaign] = count;
  }
  json out = json::array();
  for (auto& [campaign, steps] : runs) {
    std::sort(steps.begin(), steps.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string spec = campaign.substr(std::string("bisect:").size());
    const std::string metric = spec.substr(0, spec.rfind('@'));
    json b = {{"metric", metric},
              {"range", spec.substr(spec.rfind('@') + 1)},
              {"commits", counts[campaign]},
              {"steps", json::array()},
              {"culprit", nullptr}};
    int clean_up_to = 0;  // Highest index known clean (0: the good end).
    for (const auto& [index, e] : steps) {
      const v1::MetricComparison* m = FindMetric(e->verdict(), metric);
      const BisectResult result = ClassifyBisectStep(e->verdict(), metric);
      json step = {{"index", index},
                   {"commit", e->candidate().candidate_sha().substr(0, 12)},
                   {"evaluation", e->id()},
                   {"result", BisectResultName(result)}};
      if (m != nullptr) {
        step["speedup"] = m->speedup();
        step["ci_low"] = m->ci_low();
        step["ci_high"] = m->ci_high();
        step["text"] = SpeedupText(*m);
      }
      b["steps"].push_back(step);
      if (result == BisectResult::kClean) clean_up_to = std::max(clean_up_to, index);
      if (result == BisectResult::kRegressed && b["culprit"].is_null() &&
          index == clean_up_to + 1) {
        b["culprit"] = step;
      }
    }
    out.push_back(b);
  }
  return out;
}

// One measurement of a commit that was its branch's tip.
struct TipSample {
  double value = 0;
  std::string commit;
  std::string evaluation;
};

// Each branch's history of each metric ("repo branch metric" -> samples),
// sample by sample, as the input of change-point detection. Its commits in
// landing order: the baseline of the branch's first evaluation in the
// period, then each commit that landed. A commit's samples are the
// baseline arms of every evaluation measured against it and the candidate
// arm of the evaluation that landed it (the re-measure, for a merge
// commit), evaluations in decision order, pairs in order. Why samples and
// not verdicts: a branch sees few merges, and every evaluation measures its
// tip again, so the samples locate a change to one commit where a handful
// of verdicts could not.
absl::StatusOr<std::map<std::string, std::vector<TipSample>>> TipHistories(
    Store& store, const std::vector<v1::Evaluation>& evaluations, const std::string& branch) {
  // Landed commits per branch, in order, and each commit's branch.
  std::map<std::string, std::vector<std::string>> landed;
  std::map<std::string, std::string> branch_of;
  for (const v1::Evaluation& e : evaluations) {
    const v1::Candidate& c = e.candidate();
    if (c.target_branch().empty() || (!branch.empty() && c.target_branch() != branch)) continue;
    const std::string key = absl::StrCat(c.repo(), " ", c.target_branch());
    std::vector<std::string>& commits = landed[key];
    auto add = [&](const std::string& sha) {
      if (sha.empty() || branch_of.count(sha) > 0) return;
      commits.push_back(sha);
      branch_of[sha] = key;
    };
    if (commits.empty()) add(c.baseline_sha());
    if (e.merge().state() == v1::MERGED) add(e.merge().merged_sha());
  }
  // Samples per (branch, metric, commit), in evaluation and pair order.
  std::map<std::string, std::map<std::string, std::vector<TipSample>>> by_commit;
  for (const v1::Evaluation& e : evaluations) {
    const auto base = branch_of.find(e.candidate().baseline_sha());
    const auto cand = branch_of.find(e.candidate().candidate_sha());
    if (base == branch_of.end() && cand == branch_of.end()) continue;
    absl::StatusOr<std::vector<v1::Sample>> samples = store.ListSamples(e.id());
    if (!samples.ok()) return samples.status();
    std::stable_sort(samples->begin(), samples->end(),
                     [](const v1::Sample& a, const v1::Sample& b) {
                       return a.pair_index() < b.pair_index();
                     });
    for (const v1::Sample& s : *samples) {
      const bool baseline = s.arm() == v1::BASELINE;
      const auto& at = baseline ? base : cand;
      if (at == branch_of.end()) continue;
      by_commit[absl::StrCat(at->second, " ", s.metric())][at->first].push_back(
          {s.value(), at->first, e.id()});
    }
  }
  std::map<std::string, std::vector<TipSample>> out;
  for (const auto& [key, commits] : by_commit) {
    const std::string branch_key = key.substr(0, key.rfind(' '));
    std::vector<TipSample>& series = out[key];
    for (const std::string& sha : landed[branch_key]) {
      auto it = commits.find(sha);
      if (it != commits.end()) series.insert(series.end(), it->second.begin(), it->second.end());
    }
  }
  return out;
}

// E-divisive change points of each branch's tip history (TipHistories),
// each with the commit of the first sample after it and whether that is
// where the commit's samples begin: a change inside one commit's samples
// is the machine moving, not the code.
// `evaluations`: all of the repository's, not only the branch's, since the
// re-measure that lands a merge commit targets no branch itself.
absl::StatusOr<json> ChangePoints(Store& store, const std::vector<v1::Evaluation>& evaluations,
                                  const std::string& branch) {
  absl::StatusOr<std::map<std::string, std::vector<TipSample>>> histories =
      TipHistories(store, evaluations, branch);
  if (!histories.ok()) return histories.status();
  json out = json::array();
  EDivisiveOptions options;
  for (auto& [key, series] : *histories) {
    // DetectChangePoints takes at most 5000 points: the latest.
    if (series.size() > 5000) series.erase(series.begin(), series.end() - 5000);
    if (series.size() < static_cast<size_t>(2 * options.min_segment)) continue;
    std::vector<double> values;
    for (const TipSample& p : series) values.push_back(p.value);
    absl::StatusOr<std::vector<ChangePoint>> points = DetectChangePoints(values, options);
    if (!points.ok()) return points.status();
    const std::string metric = key.substr(key.rfind(' ') + 1);
    // Where each commit's samples begin: its landing.
    std::vector<size_t> landings;
    for (size_t i = 1; i < series.size(); ++i) {
      if (series[i - 1].commit != series[i].commit) landings.push_back(i);
    }
    for (const ChangePoint& p : *points) {
      const TipSample& at = series[p.index];
      json point = {{"metric", metric},
                    {"commit", at.commit.substr(0, 12)},
                    {"evaluation", at.evaluation},
                    {"at_landing", series[p.index - 1].commit != at.commit},
                    {"index", p.index},
                     {"samples", series.size()},
                     {"mean_before", p.mean_before},
                    {"mean_after", p.mean_after},
                    {"p_value", p.p_value}};
      // The split can land a sample or two off the real change when a sample
      // beside it is an outlier; the nearest landing and the distance to it
      // let the reader judge (a split many samples inside one commit's
      // samples is the machine moving, not the code).
      const auto nearest = std::min_element(
          landings.begin(), landings.end(), [&](size_t a, size_t b) {
            return std::abs(static_cast<long>(a) - static_cast<long>(p.index)) <
                   std::abs(static_cast<long>(b) - static_cast<long>(p.index));
          });
      if (nearest != landings.end()) {
        point["nearest_landing"] = series[*nearest].commit.substr(0, 12);
        point["landing_offset"] = static_cast<long>(p.index) - static_cast<long>(*nearest);
      }
      out.push_back(std::move(point));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<json> BuildReport(Store& store, const ReportRequest& request, absl::Time now) {
  absl::StatusOr<std::vector<v1::Evaluation>> all = FinishedEvaluations(store, request);
  if (!all.ok()) return all.status();
  // The branch's candidates (all of them without a branch).
  std::vector<v1::Evaluation> evaluations;
  for (const v1::Evaluation& e : *all) {
    if (request.branch.empty() || e.candidate().target_branch() == request.branch) {
      evaluations.push_back(e);
    }
  }

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
  for (const v1::Evaluation& e : evaluations) {
    json row = CandidateRow(e);
    report["candidates"].push_back(row);
    const v1::Verdict& v = e.verdict();
    if (v.decision() == v1::REJECT) {
      const std::string code = row.contains("reason") ? row["reason"]["code"].get<std::string>()
                                                      : "unspecified";
      rejected[code].push_back(row);
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
                       // Not measured: the tip's value did not move.
                       {"value", !m.inputs_identical() ? json(m.candidate())
                                 : last != nullptr     ? (*last)["value"]
                                                       : json(nullptr)},
                       {"inputs_identical", m.inputs_identical()},
                       {"speedup", m.speedup()},
                       {"cumulative", product("cumulative", m.speedup())},
                       {"cumulative_low", product("cumulative_low", m.ci_low())},
                       {"cumulative_high", product("cumulative_high", m.ci_high())}});
    }
  }

  // Precision curves of the most recent evaluations that ran the stage.
  report["precision"] = json::array();
  for (auto e = evaluations.rbegin(); e != evaluations.rend(); ++e) {
    for (const v1::Stage& stage : e->verdict().stages()) {
      if (stage.kind() != v1::PRECISION) continue;
      for (const v1::PrecisionCurve& c : stage.curves()) {
        if (report["precision"].size() >= kMaxPrecisionCharts) break;
        auto points = [](const auto& list) {
          json out = json::array();
          for (const v1::PrecisionPoint& p : list) out.push_back({p.length(), p.rel_rms()});
          return out;
        };
        report["precision"].push_back(
            {{"evaluation", e->id()},
             {"commit", e->candidate().candidate_sha().substr(0, 12)},
             {"decision", absl::AsciiStrToLower(v1::Decision_Name(e->verdict().decision()))},
             {"suite", c.suite()},
             {"op", c.op()},
             {"bound", c.max_rel_rms()},
             {"baseline", points(c.baseline())},
             {"candidate", points(c.candidate())}});
      }
    }
  }

  report["bisections"] = Bisections(evaluations);

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

  absl::StatusOr<json> change_points = ChangePoints(store, *all, request.branch);
  if (!change_points.ok()) return change_points.status();
  report["change_points"] = *std::move(change_points);

  // The repository's noise limit as its latest verdict applied it (the
  // baseline manifest's max_calibration_noise): a node above it is
  // quarantined for this repository's gate work, whatever its state.
  double repo_noise_limit = 0;
  for (const v1::Evaluation& e : *all) {
    const double limit = e.verdict().provenance().policy_parameters().max_calibration_noise();
    if (limit > 0) repo_noise_limit = limit;
  }
  absl::StatusOr<std::vector<v1::Node>> nodes = store.ListNodes({});
  if (!nodes.ok()) return nodes.status();
  report["nodes"] = json::array();
  for (const v1::Node& n : *nodes) {
    std::string gate_work = "yes";
    if (n.state() == v1::QUARANTINED) {
      gate_work = "none: quarantined, its calibration noise over the scheduler's limit; it "
                  "calibrates again each minute";
    } else if (n.state() == v1::DISTRUSTED) {
      gate_work = "none: distrusted (a verdict of it was contradicted)";
    } else if (n.state() != v1::ACTIVE) {
      gate_work = "none while " + absl::AsciiStrToLower(v1::NodeState_Name(n.state()));
    } else if (!request.repo.empty() && repo_noise_limit > 0 &&
               n.calibration_noise() > repo_noise_limit) {
      gate_work = absl::StrFormat(
          "none from this repository: quarantined for it, calibration noise %.2f%% over its "
          "max_calibration_noise %.2f%%; it calibrates again while that work waits",
          100 * n.calibration_noise(), 100 * repo_noise_limit);
    }
    report["nodes"].push_back({{"name", n.name()},
                               {"state", absl::AsciiStrToLower(v1::NodeState_Name(n.state()))},
                               {"calibration_noise", n.calibration_noise()},
                               {"gate_work", gate_work},
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
      line(absl::StrFormat(
          "| %s | %s | %s | %.3fx%s | %.3fx | %s |", s["decided_at"].get<std::string>(),
          s["merged_sha"].get<std::string>(), s["evaluation"].get<std::string>(),
          s["speedup"].get<double>(), s["inputs_identical"].get<bool>() ? " (inputs identical)" : "",
          s["cumulative"].get<double>(),
          s["value"].is_null() ? "-"
                               : absl::StrFormat("%g %s", s["value"].get<double>(),
                                                 s["unit"].get<std::string>())));
    }
  }
  line("");
  line("## Candidates");
  line("");
  if (r["candidates"].empty()) {
    line("No evaluation finished in this period.");
  } else {
    md += MarkdownTable(kCandidateHeaders, Rows(r["candidates"], CandidateCells));
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
  line("## Precision: error against fp64 by context length");
  if (r["precision"].empty()) {
    line("");
    line("No evaluation in this period ran a precision suite.");
  }
  for (const json& p : r["precision"]) {
    line("");
    line(absl::StrFormat("### %s, %s (%s, %s); bound %g", p["suite"].get<std::string>(),
                         p["commit"].get<std::string>(), p["evaluation"].get<std::string>(),
                         p["decision"].get<std::string>(), p["bound"].get<double>()));
    line("");
    line("| tokens | baseline rel_rms | candidate rel_rms |");
    line("| --- | --- | --- |");
    for (size_t i = 0; i < p["candidate"].size(); ++i) {
      line(absl::StrFormat("| %d | %s | %.3g |", p["candidate"][i][0].get<int64_t>(),
                           i < p["baseline"].size()
                               ? absl::StrFormat("%.3g", p["baseline"][i][1].get<double>())
                               : "-",
                           p["candidate"][i][1].get<double>()));
    }
  }
  line("");
  line("## Bisections");
  if (r["bisections"].empty()) {
    line("");
    line("No bisection in this period.");
  }
  for (const json& b : r["bisections"]) {
    line("");
    line(absl::StrFormat("### %s over %s (%d commits): culprit %s", b["metric"].get<std::string>(),
                         b["range"].get<std::string>(), b["commits"].get<int>(),
                         b["culprit"].is_null() ? "not found yet"
                                                : b["culprit"]["commit"].get<std::string>()));
    line("");
    md += MarkdownTable(kBisectHeaders, Rows(b["steps"], BisectCells));
  }
  line("");
  line("## Change points");
  line("");
  if (r["change_points"].empty()) {
    line(kNoChangePoints);
  } else {
    md += MarkdownTable(kChangePointHeaders, Rows(r["change_points"], ChangePointCells));
  }
  line("");
  line("## Nodes");
  line("");
  if (r["nodes"].empty()) {
    line("No node registered.");
  } else {
    md += MarkdownTable(kNodeHeaders, Rows(r["nodes"], NodeCells));
  }
  return md;
}

namespace {

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// One metric's cumulative speedup over its landed commits: a line with a
// band for the bracket, the y axis in "x" (speedup vs the first version)
// with gridlines, x labels every few commits so they never overlap.
std::string Chart(const std::string& metric, const nlohmann::json& steps) {
  constexpr double kW = 640, kH = 260, kLeft = 56, kRight = 16, kTop = 28, kBottom = 44;
  const size_t n = steps.size() + 1;  // The first version, then each landing.
  std::vector<double> mid = {1.0}, low = {1.0}, high = {1.0};
  std::vector<std::string> labels = {"first"};
  for (const nlohmann::json& s : steps) {
    mid.push_back(s["cumulative"].get<double>());
    low.push_back(s["cumulative_low"].get<double>());
    high.push_back(s["cumulative_high"].get<double>());
    labels.push_back(s["merged_sha"].get<std::string>().substr(0, 7));
  }
  double y_max = std::max(1.0, *std::max_element(high.begin(), high.end()));
  double y_min = std::min(1.0, *std::min_element(low.begin(), low.end()));
  const double pad = (y_max - y_min) * 0.08 + 0.05;
  y_max += pad;
  y_min = std::max(0.0, y_min - pad);
  auto x = [&](size_t i) {
    return kLeft + (n == 1 ? 0.5 : static_cast<double>(i) / (n - 1)) * (kW - kLeft - kRight);
  };
  auto y = [&](double v) { return kTop + (y_max - v) / (y_max - y_min) * (kH - kTop - kBottom); };
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %g %g\" width=\"%g\" height=\"%g\" role=\"img\" "
      "aria-label=\"cumulative speedup of %s\">\n",
      kW, kH, kW, kH, Escape(metric));
  // Gridlines and y labels at 5 even steps.
  for (int t = 0; t <= 4; ++t) {
    const double v = y_min + (y_max - y_min) * t / 4;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"grid\"/>"
                          "<text x=\"%g\" y=\"%.1f\" class=\"ylabel\">%.2fx</text>\n",
                          kLeft, y(v), kW - kRight, y(v), kLeft - 6, y(v) + 4, v);
  }
  // Baseline at 1x.
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"unity\"/>\n",
                        kLeft, y(1.0), kW - kRight, y(1.0));
  // Band: high along, low back.
  std::string band;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&band, "%.1f,%.1f ", x(i), y(high[i]));
  for (size_t i = n; i-- > 0;) absl::StrAppendFormat(&band, "%.1f,%.1f ", x(i), y(low[i]));
  absl::StrAppendFormat(&svg, "<polygon class=\"band\" points=\"%s\"/>\n", band);
  std::string line;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&line, "%.1f,%.1f ", x(i), y(mid[i]));
  absl::StrAppendFormat(&svg, "<polyline class=\"series\" points=\"%s\"/>\n", line);
  // X labels: at most 8, evenly spread.
  const size_t every = std::max<size_t>(1, (n + 7) / 8);
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" class=\"point\"/>\n",
                          x(i), y(mid[i]));
    if (i % every == 0 || i == n - 1) {
      absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" class=\"xlabel\">%s</text>\n", x(i),
                            kH - kBottom + 16, Escape(labels[i]));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%g\" y=\"%g\" class=\"axis\">landed commits (oldest first)</text>\n"
                        "<text x=\"12\" y=\"%g\" class=\"axis\" transform=\"rotate(-90 12 %g)\">"
                        "speedup vs first version (x)</text>\n",
                        (kLeft + kW - kRight) / 2, kH - 6, kH / 2, kH / 2);
  // Legend.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%g\" y=\"6\" width=\"14\" height=\"8\" class=\"band\"/>"
                        "<text x=\"%g\" y=\"14\" class=\"legend\">bracket (interval ends "
                        "multiplied)</text>"
                        "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series\"/>"
                        "<text x=\"%g\" y=\"14\" class=\"legend\">cumulative speedup</text>\n",
                        kLeft, kLeft + 18, kLeft + 230, kLeft + 248, kLeft + 252);
  svg += "</svg>\n";
  return svg;
}

// Error vs context length, log-log: baseline and candidate curves, the
// suite's bound as a dashed line, a legend.
std::string PrecisionChart(const nlohmann::json& p) {
  constexpr double kW = 640, kH = 260, kLeft = 64, kRight = 16, kTop = 28, kBottom = 44;
  double x_lo = 1e300, x_hi = 0, y_lo = p["bound"].get<double>(), y_hi = y_lo;
  for (const char* arm : {"baseline", "candidate"}) {
    for (const nlohmann::json& pt : p[arm]) {
      x_lo = std::min(x_lo, pt[0].get<double>());
      x_hi = std::max(x_hi, pt[0].get<double>());
      if (pt[1].get<double>() > 0) {
        y_lo = std::min(y_lo, pt[1].get<double>());
        y_hi = std::max(y_hi, pt[1].get<double>());
      }
    }
  }
  if (!(x_hi > x_lo)) x_hi = x_lo * 2;
  if (!(y_lo > 0)) y_lo = 1e-9;
  // Whole decades on the y axis.
  const int d_lo = static_cast<int>(std::floor(std::log10(y_lo)));
  const int d_hi = std::max(d_lo + 1, static_cast<int>(std::ceil(std::log10(y_hi))));
  auto x = [&](double v) {
    return kLeft + (std::log2(v) - std::log2(x_lo)) / (std::log2(x_hi) - std::log2(x_lo)) *
                       (kW - kLeft - kRight);
  };
  auto y = [&](double v) {
    return kTop + (d_hi - std::log10(std::max(v, 1e-300))) / (d_hi - d_lo) * (kH - kTop - kBottom);
  };
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %g %g\" width=\"%g\" height=\"%g\" role=\"img\" "
      "aria-label=\"precision of %s\">\n",
      kW, kH, kW, kH, Escape(p["suite"].get<std::string>()));
  for (int d = d_lo; d <= d_hi; ++d) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"grid\"/>"
                          "<text x=\"%g\" y=\"%.1f\" class=\"ylabel\">1e%d</text>\n",
                          kLeft, y(std::pow(10.0, d)), kW - kRight, y(std::pow(10.0, d)), kLeft - 6,
                          y(std::pow(10.0, d)) + 4, d);
  }
  const double bound = p["bound"].get<double>();
  if (bound > 0) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"unity\"/>\n",
                          kLeft, y(bound), kW - kRight, y(bound));
  }
  for (const char* arm : {"baseline", "candidate"}) {
    std::string points;
    for (const nlohmann::json& pt : p[arm]) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x(pt[0].get<double>()), y(pt[1].get<double>()));
    }
    absl::StrAppendFormat(&svg, "<polyline class=\"%s\" points=\"%s\"/>\n",
                          std::string(arm) == "baseline" ? "series-b" : "series", points);
  }
  for (const nlohmann::json& pt : p["candidate"]) {
    const double len = pt[0].get<double>();
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" class=\"xlabel\">%s</text>\n", x(len),
                          kH - kBottom + 16,
                          len >= 1024 ? absl::StrCat(static_cast<int64_t>(len) / 1024, "k")
                                      : absl::StrCat(static_cast<int64_t>(len)));
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%g\" y=\"%g\" class=\"axis\">context length (tokens, log scale)</text>\n"
      "<text x=\"12\" y=\"%g\" class=\"axis\" transform=\"rotate(-90 12 %g)\">rel_rms vs fp64 "
      "(log)</text>\n"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series-b\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">baseline</text>"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">candidate</text>"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"unity\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">bound %g</text>\n</svg>\n",
      (kLeft + kW - kRight) / 2, kH - 6, kH / 2, kH / 2, kLeft, kLeft + 18, kLeft + 22,
      kLeft + 100, kLeft + 118, kLeft + 122, kLeft + 210, kLeft + 228, kLeft + 232, bound);
  return svg;
}

// Rows as an HTML table with the given columns.
std::string Table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<std::string>>& rows) {
  std::string html = "<table><thead><tr>";
  for (const std::string& h : headers) absl::StrAppend(&html, "<th>", Escape(h), "</th>");
  html += "</tr></thead><tbody>\n";
  for (const auto& row : rows) {
    html += "<tr>";
    for (const std::string& cell : row) absl::StrAppend(&html, "<td>", Escape(cell), "</td>");
    html += "</tr>\n";
  }
  return html + "</tbody></table>\n";
}

constexpr char kStyle[] = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #1d2733; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #d5dbe3; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #d5dbe3; border-radius: 6px; padding: 10px 14px; min-width: 180px; }
.card .value { font-size: 26px; font-weight: 600; } .card .sub { color: #5b6775; font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e6eaef; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; }
.chart .grid { stroke: #e6eaef; } .chart .unity { stroke: #9aa5b1; stroke-dasharray: 4 3; }
.chart .band { fill: #4c8bf5; fill-opacity: 0.18; stroke: none; }
.chart .series { fill: none; stroke: #1f5fd0; stroke-width: 2; } .chart .point { fill: #1f5fd0; }
.chart .series-b { fill: none; stroke: #8a94a0; stroke-width: 2; stroke-dasharray: 6 3; }
.chart text { font-size: 11px; fill: #3b4754; } .chart .ylabel { text-anchor: end; }
.chart .xlabel { text-anchor: middle; } .chart .axis { text-anchor: middle; font-size: 12px; }
.muted { color: #5b6775; }
)css";

}  // namespace

std::string RenderHtml(const nlohmann::json& r) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>densegate report</title><style>";
  html += kStyle;
  html += "</style></head><body>\n<h1>densegate report</h1>\n";
  absl::StrAppend(&html, "<p class=\"muted\">",
                  Escape(r["repo"].get<std::string>().empty() ? "all repositories"
                                                             : r["repo"].get<std::string>()),
                  r["branch"].get<std::string>().empty()
                      ? ""
                      : ", branch " + Escape(r["branch"].get<std::string>()),
                  r["since"].is_null() ? "" : ", since " + Escape(r["since"].get<std::string>()),
                  "; generated ", Escape(r["generated_at"].get<std::string>()), ".</p>\n");

  html += "<h2>Headline</h2>\n";
  if (r["headline"].empty()) {
    html += "<p>No candidate landed in this period.</p>\n";
  } else {
    html += "<div class=\"cards\">\n";
    for (const nlohmann::json& h : r["headline"]) {
      absl::StrAppendFormat(
          &html,
          "<div class=\"card\"><div class=\"sub\">%s</div><div class=\"value\">%.2fx</div>"
          "<div class=\"sub\">bracket [%.2f, %.2f] over %d landed</div></div>\n",
          Escape(h["metric"].get<std::string>()), h["cumulative"].get<double>(),
          h["low"].get<double>(), h["high"].get<double>(), h["merges"].get<int>());
    }
    html += "</div>\n";
  }

  html += "<h2>Timeline of landed commits</h2>\n";
  if (r["timeline"].empty()) html += "<p>Nothing landed.</p>\n";
  for (const auto& [metric, steps] : r["timeline"].items()) {
    absl::StrAppend(&html, "<h3>", Escape(metric), "</h3>\n", Chart(metric, steps));
  }

  html += "<h2>Candidates</h2>\n";
  html += r["candidates"].empty()
              ? "<p>No evaluation finished in this period.</p>\n"
              : Table(kCandidateHeaders, Rows(r["candidates"], CandidateCells));

  html += "<h2>Rejected, by reason</h2>\n";
  if (r["rejected"].empty()) html += "<p>Nothing was rejected.</p>\n";
  for (const auto& [code, list] : r["rejected"].items()) {
    absl::StrAppendFormat(&html, "<h3>%s (%d)</h3>\n<ul>\n", Escape(code), list.size());
    for (const nlohmann::json& c : list) {
      absl::StrAppend(&html, "<li><code>", Escape(c["commit"].get<std::string>()), "</code> by ",
                      Escape(c["submitter"].get<std::string>()), ": ",
                      Escape(c.contains("reason") ? c["reason"]["message"].get<std::string>() : ""),
                      "</li>\n");
    }
    html += "</ul>\n";
  }

  html += "<h2>Precision: error against fp64 by context length</h2>\n";
  if (r["precision"].empty()) {
    html += "<p>No evaluation in this period ran a precision suite.</p>\n";
  }
  for (const nlohmann::json& p : r["precision"]) {
    absl::StrAppendFormat(&html, "<h3>%s: %s (%s, %s)</h3>\n", Escape(p["suite"].get<std::string>()),
                          Escape(p["commit"].get<std::string>()),
                          Escape(p["evaluation"].get<std::string>()),
                          Escape(p["decision"].get<std::string>()));
    html += PrecisionChart(p);
  }

  html += "<h2>Bisections</h2>\n";
  if (r["bisections"].empty()) html += "<p>No bisection in this period.</p>\n";
  for (const nlohmann::json& b : r["bisections"]) {
    absl::StrAppendFormat(
        &html, "<h3>%s over %s (%d commits): culprit %s</h3>\n", Escape(b["metric"].get<std::string>()),
        Escape(b["range"].get<std::string>()), b["commits"].get<int>(),
        b["culprit"].is_null() ? "not found yet"
                               : "<code>" + Escape(b["culprit"]["commit"].get<std::string>()) +
                                     "</code>");
    html += Table(kBisectHeaders, Rows(b["steps"], BisectCells));
  }

  html += "<h2>Change points</h2>\n";
  html += r["change_points"].empty()
              ? absl::StrCat("<p>", kNoChangePoints, "</p>\n")
              : Table(kChangePointHeaders, Rows(r["change_points"], ChangePointCells));

  html += "<h2>Nodes</h2>\n";
  html += r["nodes"].empty() ? "<p>No node registered.</p>\n"
                             : Table(kNodeHeaders, Rows(r["nodes"], NodeCells));
  html += "</body></html>\n";
  return html;
}

}  // namespace densegate::results
