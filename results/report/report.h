// Report: what a manager reads about a branch over a period, gathered from
// the store. BuildReport fills the typed model (model.h); the renderers
// write it for people (RenderMarkdown: text and tables for chat and CI
// comments; RenderHtml: one offline page with charts) and for scripts
// (ReportToJson).
//
// Content:
//   headline     each metric's cumulative speedup over the candidates that
//                landed on the branch (product of the per-merge speedups, with
//                the products of their interval ends as a bracket)
//   timeline     per metric, each landed commit with its step and
//                cumulative speedup
//   candidates   every finished evaluation in the period: who, kind,
//                decision, primary metric with interval, claims, first
//                reason, merge state, and its feedback bundle when its
//                node uploaded one (a link on the scheduler's page)
//   rejected     the rejected candidates grouped by reason (correctness,
//                precision, regression, gaming, protected path, build)
//   precision    error vs context length against fp64, baseline and
//                candidate, of the most recent evaluations with a precision
//                stage (from the verdict's stage records)
//   change_points  e-divisive change points in each branch's history of
//                each metric: the samples of its successive tips (the
//                first baseline, then each landed commit), each change with
//                the commit it points at and whether it falls where that
//                commit's samples begin
//   bisections   each `densegate bisect` run found in the period: its
//                metric and range, the commits it measured in range order
//                with their intervals, and the culprit
//   nodes        node health: state and A/A calibration noise
//
// Thread-safety: free functions; the store is used through its own
// thread-safe interface.
#ifndef DENSEGATE_RESULTS_REPORT_REPORT_H_
#define DENSEGATE_RESULTS_REPORT_REPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "results/report/model.h"
#include "results/store/store.h"

namespace densegate::results {

struct ReportRequest {
  // Repository URL or path as submitted; empty: all.
  std::string repo;
  // Target branch of the candidates; empty: all.
  std::string branch;
  absl::Time since = absl::InfinitePast();
};

// NotFound-free: an empty period gives an empty report. Store errors pass
// through.
absl::StatusOr<Report> BuildReport(Store& store, const ReportRequest& request, absl::Time now);

// What `densegate bisect` names its evaluations, so that the report can
// put each bisection back together: campaign "bisect:METRIC@GOOD..BAD" and
// hypothesis "bisect commit I of N" (I counts from 1 along the range).
std::string BisectCampaign(const std::string& metric, const std::string& good,
                           const std::string& bad);
std::string BisectHypothesis(int index, int count);

// The comparison of `metric` in `verdict`, or null.
const v1::MetricComparison* FindMetric(const v1::Verdict& verdict, absl::string_view metric);

// What one bisection step's verdict says of its metric, by the gate's own
// test (the policy's regression budget, multiplicity-corrected), never by
// the interval alone: an interval just below 1 is noise or a slowdown the
// gate tolerates. Regressed: the gate found the metric slower beyond the
// budget. Clean: the verdict accepted (every metric's slowdown bounded
// within the budget, or its inputs identical). Undecided: anything else (an
// inconclusive verdict, a failed stage, the metric not measured).
enum class BisectResult { kClean, kRegressed, kUndecided };
BisectResult ClassifyBisectStep(const v1::Verdict& verdict, absl::string_view metric);
// "clean", "regressed" or "undecided".
const char* BisectResultName(BisectResult result);

// A comparison's speedup as every text view prints it: "2.430x [2.250,
// 2.910], 20 pairs", or that it was not measured because its benchmark's
// inputs were identical in both arms.
std::string SpeedupText(const v1::MetricComparison& m);

// The report as Markdown: headline, timeline, candidates, rejected by
// reason, change points, nodes.
std::string RenderMarkdown(const Report& report);

// The same as one self-contained HTML page (inline CSS and SVG, no script,
// nothing fetched): a chart per metric of the cumulative speedup over the
// landed commits, with the bracket as a band, axes with units and a legend.
std::string RenderHtml(const Report& report);

// The report as the file report.FORMAT holds it: FORMAT "html", "md" or
// "json" (ReportToJson, indented, with a final newline); empty for any
// other format.
std::string RenderReportFile(const Report& report, absl::string_view format);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_REPORT_REPORT_H_
