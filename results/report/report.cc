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
#include "nlohmann/json.hpp"
#include "results/changepoint/e_divisive.h"
#include "results/report/internal/cells.h"

namespace densegate::results {
namespace {

using google::protobuf::util::TimeUtil;
using internal::Headline;

// Precision charts kept in a report (the most recent evaluations').
constexpr size_t kMaxPrecisionCharts = 12;

std::string Time(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ",
                          absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t)),
                          absl::UTCTimeZone());
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

MetricSummary Summary(const v1::MetricComparison& m) {
  return {m.metric(),  m.speedup(),          m.ci_low(),     m.ci_high(),
          m.n_pairs(), m.inputs_identical(), SpeedupText(m)};
}

CandidateRow Candidate(const v1::Evaluation& e) {
  const v1::Verdict& v = e.verdict();
  CandidateRow row;
  row.evaluation = e.id();
  row.submitter = e.candidate().submitter();
  row.kind = absl::AsciiStrToLower(v1::CandidateKind_Name(e.candidate().kind()));
  row.commit = e.candidate().candidate_sha().substr(0, 12);
  row.hypothesis = e.candidate().hypothesis();
  row.decision = absl::AsciiStrToLower(v1::Decision_Name(v.decision()));
  row.decided_at = Time(v.decided_at());
  row.merge = absl::AsciiStrToLower(v1::MergeState_Name(e.merge().state()));
  if (const v1::MetricComparison* m = Headline(v)) row.metric = Summary(*m);
  for (const auto& c : v.claims()) row.claims.push_back({c.metric(), c.claimed(), c.verified()});
  if (const v1::Reason* r = DecidingReason(v)) {
    row.reason = ReasonRow{absl::AsciiStrToLower(v1::ReasonCode_Name(r->code())), r->message()};
  }
  return row;
}

// Each campaign's experiments that were accepted toward a branch, with
// the confirmation the merge queue ran (read from the store: it aims at
// no branch, so a branch's report does not list it).
std::vector<CampaignRow> Campaigns(Store& store, const std::vector<v1::Evaluation>& evaluations) {
  std::map<std::string, CampaignRow> by_campaign;
  for (const v1::Evaluation& e : evaluations) {
    const v1::Candidate& c = e.candidate();
    if (c.campaign().empty() || c.campaign().rfind("bisect:", 0) == 0 ||
        c.kind() != v1::EXPERIMENT || c.target_branch().empty() ||
        e.verdict().decision() != v1::ACCEPT) {
      continue;
    }
    CampaignRow& campaign = by_campaign[c.campaign()];
    campaign.campaign = c.campaign();
    CampaignExperimentRow row;
    row.evaluation = e.id();
    row.hypothesis = c.hypothesis().substr(0, c.hypothesis().find('\n'));
    for (const auto& claim : e.verdict().claims()) {
      row.claims.push_back({claim.metric(), claim.claimed(), claim.verified()});
    }
    const v1::MetricComparison* measured = Headline(e.verdict());
    if (measured != nullptr) row.measured = Summary(*measured);
    row.merge = absl::AsciiStrToLower(v1::MergeState_Name(e.merge().state()));
    campaign.landed += e.merge().state() == v1::MERGED;
    const std::string& confirmation = e.merge().remeasure_evaluation_id();
    if (absl::StatusOr<v1::Evaluation> conf = store.GetEvaluation(confirmation);
        !confirmation.empty() && conf.ok() && !conf->candidate().confirms().empty()) {
      row.confirmation = conf->id();
      row.confirmation_decision = conf->state() == v1::FINISHED
                                      ? absl::AsciiStrToLower(v1::Decision_Name(conf->verdict().decision()))
                                      : absl::AsciiStrToLower(v1::EvaluationState_Name(conf->state()));
      if (measured != nullptr) {
        if (const v1::MetricComparison* m = FindMetric(conf->verdict(), measured->metric())) {
          row.confirmed = Summary(*m);
        }
      }
    }
    campaign.experiments.push_back(std::move(row));
  }
  std::vector<CampaignRow> out;
  for (auto& [name, row] : by_campaign) out.push_back(std::move(row));
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

std::string RenderReportFile(const Report& report, absl::string_view format) {
  if (format == "html") return RenderHtml(report);
  if (format == "md") return RenderMarkdown(report);
  if (format == "json") return ReportToJson(report).dump(2) + "\n";
  return "";
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
std::vector<Bisection> Bisections(const std::vector<v1::Evaluation>& evaluations) {
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
  std::vector<Bisection> out;
  for (auto& [campaign, steps] : runs) {
    std::sort(steps.begin(), steps.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::string spec = campaign.substr(std::string("bisect:").size());
    const std::string metric = spec.substr(0, spec.rfind('@'));
    Bisection& b = out.emplace_back();
    b.metric = metric;
    b.range = spec.substr(spec.rfind('@') + 1);
    b.commits = counts[campaign];
    int clean_up_to = 0;  // Highest index known clean (0: the good end).
    for (const auto& [index, e] : steps) {
      const v1::MetricComparison* m = FindMetric(e->verdict(), metric);
      const BisectResult result = ClassifyBisectStep(e->verdict(), metric);
      BisectStep& step = b.steps.emplace_back();
      step.index = index;
      step.commit = e->candidate().candidate_sha().substr(0, 12);
      step.evaluation = e->id();
      step.result = BisectResultName(result);
      if (m != nullptr) step.measured = Summary(*m);
      if (result == BisectResult::kClean) clean_up_to = std::max(clean_up_to, index);
      if (result == BisectResult::kRegressed && !b.culprit && index == clean_up_to + 1) {
        b.culprit = step;
      }
    }
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
absl::StatusOr<std::vector<ChangePointRow>> ChangePoints(
    Store& store, const std::vector<v1::Evaluation>& evaluations, const std::string& branch) {
  absl::StatusOr<std::map<std::string, std::vector<TipSample>>> histories =
      TipHistories(store, evaluations, branch);
  if (!histories.ok()) return histories.status();
  std::vector<ChangePointRow> out;
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
      ChangePointRow& point = out.emplace_back();
      point.metric = metric;
      point.commit = at.commit.substr(0, 12);
      point.evaluation = at.evaluation;
      point.at_landing = series[p.index - 1].commit != at.commit;
      point.index = static_cast<int64_t>(p.index);
      point.samples = static_cast<int64_t>(series.size());
      point.mean_before = p.mean_before;
      point.mean_after = p.mean_after;
      point.p_value = p.p_value;
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
        point.nearest_landing = ChangePointRow::Landing{
            series[*nearest].commit.substr(0, 12),
            static_cast<int64_t>(p.index) - static_cast<int64_t>(*nearest)};
      }
    }
  }
  return out;
}

// The timeline step of merged candidate `e` for metric `m`, after `last`
// (the metric's previous merged step, or null): its value (the last
// measured one when the inputs were identical) and the cumulative speedup.
TimelineStep Step(const v1::Evaluation& e, const v1::MetricComparison& m,
                  const TimelineStep* last) {
  TimelineStep step;
  step.evaluation = e.id();
  step.merged_sha = e.merge().merged_sha().substr(0, 12);
  step.decided_at = Time(e.verdict().decided_at());
  step.unit = m.unit();
  // Not measured: the tip's value did not move.
  if (!m.inputs_identical()) {
    step.value = m.candidate();
  } else if (last != nullptr) {
    step.value = last->value;
  }
  step.inputs_identical = m.inputs_identical();
  step.speedup = m.speedup();
  step.cumulative = (last != nullptr ? last->cumulative : 1.0) * m.speedup();
  step.cumulative_low = (last != nullptr ? last->cumulative_low : 1.0) * m.ci_low();
  step.cumulative_high = (last != nullptr ? last->cumulative_high : 1.0) * m.ci_high();
  return step;
}

// Precision curves of the most recent evaluations that ran the stage.
std::vector<PrecisionChart> PrecisionCharts(const std::vector<v1::Evaluation>& evaluations) {
  std::vector<PrecisionChart> charts;
  auto points = [](const auto& list) {
    std::vector<std::pair<int64_t, double>> out;
    for (const v1::PrecisionPoint& p : list) out.emplace_back(p.length(), p.rel_rms());
    return out;
  };
  for (auto e = evaluations.rbegin(); e != evaluations.rend(); ++e) {
    for (const v1::Stage& stage : e->verdict().stages()) {
      if (stage.kind() != v1::PRECISION) continue;
      for (const v1::PrecisionCurve& c : stage.curves()) {
        if (charts.size() >= kMaxPrecisionCharts) return charts;
        charts.push_back(
            {e->id(), e->candidate().candidate_sha().substr(0, 12),
             absl::AsciiStrToLower(v1::Decision_Name(e->verdict().decision())), c.suite(),
             c.op(), c.max_rel_rms(), points(c.baseline()), points(c.candidate())});
      }
    }
  }
  return charts;
}

// Each node's state and whether it gets gate work. The repository's noise
// limit is the one its latest verdict applied (the baseline manifest's
// max_calibration_noise): a node above it is quarantined for this
// repository's gate work, whatever its state.
absl::StatusOr<std::vector<NodeRow>> NodeRows(Store& store,
                                              const std::vector<v1::Evaluation>& all,
                                              const std::string& repo) {
  double repo_noise_limit = 0;
  for (const v1::Evaluation& e : all) {
    const double limit = e.verdict().provenance().policy_parameters().max_calibration_noise();
    if (limit > 0) repo_noise_limit = limit;
  }
  absl::StatusOr<std::vector<v1::Node>> nodes = store.ListNodes({});
  if (!nodes.ok()) return nodes.status();
  std::vector<NodeRow> rows;
  for (const v1::Node& n : *nodes) {
    std::string gate_work = "yes";
    if (n.state() == v1::QUARANTINED) {
      gate_work = "none: quarantined, its calibration noise over the scheduler's limit; it "
                  "calibrates again each minute";
    } else if (n.state() == v1::DISTRUSTED) {
      gate_work = "none: distrusted (a verdict of it was contradicted)";
    } else if (n.state() != v1::ACTIVE) {
      gate_work = "none while " + absl::AsciiStrToLower(v1::NodeState_Name(n.state()));
    } else if (!repo.empty() && repo_noise_limit > 0 && n.calibration_noise() > repo_noise_limit) {
      gate_work = absl::StrFormat(
          "none from this repository: quarantined for it, calibration noise %.2f%% over its "
          "max_calibration_noise %.2f%%; it calibrates again while that work waits",
          100 * n.calibration_noise(), 100 * repo_noise_limit);
    }
    rows.push_back({n.name(), absl::AsciiStrToLower(v1::NodeState_Name(n.state())),
                    n.calibration_noise(), gate_work, n.dimensions().fingerprint()});
  }
  return rows;
}

}  // namespace

absl::StatusOr<Report> BuildReport(Store& store, const ReportRequest& request, absl::Time now) {
  absl::StatusOr<std::vector<v1::Evaluation>> all = FinishedEvaluations(store, request);
  if (!all.ok()) return all.status();
  // The branch's candidates (all of them without a branch).
  std::vector<v1::Evaluation> evaluations;
  for (const v1::Evaluation& e : *all) {
    if (request.branch.empty() || e.candidate().target_branch() == request.branch) {
      evaluations.push_back(e);
    }
  }

  Report report;
  report.generated_at = absl::FormatTime("%Y-%m-%d %H:%M:%SZ", now, absl::UTCTimeZone());
  report.repo = request.repo;
  report.branch = request.branch;
  if (request.since != absl::InfinitePast()) {
    report.since = absl::FormatTime("%Y-%m-%d %H:%M:%SZ", request.since, absl::UTCTimeZone());
  }
  for (const v1::Evaluation& e : evaluations) {
    CandidateRow& row = report.candidates.emplace_back(Candidate(e));
    absl::StatusOr<FeedbackRecord> feedback = store.GetFeedback(e.id(), /*with_files=*/false);
    if (feedback.ok()) {
      row.has_feedback = true;
      // Written by a node: read defensively.
      const nlohmann::json summary = nlohmann::json::parse(feedback->summary_json, nullptr, false);
      if (summary.is_object() && summary.contains("headline") && summary["headline"].is_string()) {
        row.feedback_headline = summary["headline"].get<std::string>();
      }
    }  // Else none, or one the store cannot read: the row says none.
    if (e.verdict().decision() == v1::REJECT) {
      report.rejected[row.reason ? row.reason->code : "unspecified"].push_back(row);
    }
    if (e.merge().state() == v1::AWAITING_APPROVAL) report.awaiting_approval.push_back(row);
    if (e.merge().state() != v1::MERGED) continue;
    for (const auto& m : e.verdict().metrics()) {
      std::vector<TimelineStep>& steps = report.timeline[m.metric()];
      steps.push_back(Step(e, m, steps.empty() ? nullptr : &steps.back()));
    }
  }
  report.precision = PrecisionCharts(evaluations);
  report.bisections = Bisections(evaluations);
  report.campaigns = Campaigns(store, evaluations);
  for (const auto& [metric, steps] : report.timeline) {
    const TimelineStep& last = steps.back();
    report.headline.push_back({metric, static_cast<int>(steps.size()), last.cumulative,
                               last.cumulative_low, last.cumulative_high});
  }
  std::sort(report.headline.begin(), report.headline.end(),
            [](const HeadlineRow& a, const HeadlineRow& b) { return a.cumulative > b.cumulative; });

  absl::StatusOr<std::vector<ChangePointRow>> change_points =
      ChangePoints(store, *all, request.branch);
  if (!change_points.ok()) return change_points.status();
  report.change_points = *std::move(change_points);
  absl::StatusOr<std::vector<NodeRow>> nodes = NodeRows(store, *all, request.repo);
  if (!nodes.ok()) return nodes.status();
  report.nodes = *std::move(nodes);
  return report;
}

}  // namespace densegate::results
