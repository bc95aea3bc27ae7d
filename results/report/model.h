// Report: the typed model of a regression report, between the store (what
// BuildReport gathers) and the renderers (Markdown, HTML, JSON). Every
// field is what a reader sees; nothing is recomputed by a renderer.
//
// ReportToJson writes the model as report.json and GetReport's JSON format:
// one key per field, in snake_case, absent optionals as absent keys (a
// candidate's metric and reason, a bisection step's speedup, a change
// point's nearest landing) or null (a timeline step's value, a bisection's
// culprit, the report's `since`). Scripts read that form; keep it stable.
//
// Thread-safety: plain values.
#ifndef DENSEGATE_RESULTS_REPORT_MODEL_H_
#define DENSEGATE_RESULTS_REPORT_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace densegate::results {

// One metric's comparison as a row shows it: a candidate's headline metric
// (see internal::Headline), a bisection step's metric.
struct MetricSummary {
  std::string name;
  double speedup = 0;
  double ci_low = 0;
  double ci_high = 0;
  int n_pairs = 0;
  bool inputs_identical = false;
  std::string text;  // SpeedupText.
};

struct ClaimRow {
  std::string metric;
  double claimed = 0;
  bool verified = false;
};

// The reason that decided a verdict: its code in lower case, its message.
struct ReasonRow {
  std::string code;
  std::string message;
};

// One finished evaluation.
struct CandidateRow {
  std::string evaluation;
  std::string submitter;
  std::string kind;  // "ci", "experiment", ...
  std::string commit;  // The candidate's first 12 hex digits.
  std::string hypothesis;
  std::string decision;  // "accept", "reject", "inconclusive".
  std::string decided_at;
  std::string merge;  // The merge state in lower case.
  std::optional<MetricSummary> metric;
  std::vector<ClaimRow> claims;
  std::optional<ReasonRow> reason;
  // The node uploaded a feedback bundle (`densegate feedback EVALUATION`,
  // GET /feedback?evaluation=EVALUATION); its one-line headline.
  bool has_feedback = false;
  std::string feedback_headline;
};

// One landed commit on a metric's timeline.
struct TimelineStep {
  std::string evaluation;
  std::string merged_sha;
  std::string decided_at;
  std::string unit;
  // The candidate's value; when the inputs were identical, the previous
  // step's (the tip did not move); unknown before any measured step.
  std::optional<double> value;
  bool inputs_identical = false;
  double speedup = 0;
  double cumulative = 0;  // Product of the speedups so far.
  double cumulative_low = 0;
  double cumulative_high = 0;
};

// A metric's cumulative speedup over the landed candidates.
struct HeadlineRow {
  std::string metric;
  int merges = 0;
  double cumulative = 0;
  double low = 0;
  double high = 0;
};

// Error against fp64 by context length of one suite in one evaluation.
struct PrecisionChart {
  std::string evaluation;
  std::string commit;
  std::string decision;
  std::string suite;
  std::string op;
  double bound = 0;  // The suite's max_rel_rms.
  // (context length in tokens, rel_rms), by length.
  std::vector<std::pair<int64_t, double>> baseline;
  std::vector<std::pair<int64_t, double>> candidate;
};

// One commit a bisection measured.
struct BisectStep {
  int index = 0;  // Counted from 1 along the range.
  std::string commit;
  std::string evaluation;
  std::string result;  // BisectResultName.
  // The metric's comparison, when the verdict measured it.
  std::optional<MetricSummary> measured;
};

struct Bisection {
  std::string metric;
  std::string range;  // "GOOD..BAD", 12 hex digits each.
  int commits = 0;
  std::vector<BisectStep> steps;  // In range order.
  std::optional<BisectStep> culprit;
};

// One experiment of an agent's campaign that was accepted toward a branch:
// what it claimed, what the accepting evaluation measured, and what the
// merge queue's fresh confirmation measured of the same metric before it
// could land (agent/README.md, "False merges").
struct CampaignExperimentRow {
  std::string evaluation;
  std::string hypothesis;  // Its first line.
  std::vector<ClaimRow> claims;
  std::optional<MetricSummary> measured;  // The accepting verdict's headline metric.
  std::string confirmation;               // Evaluation id; empty: none ran.
  std::string confirmation_decision;
  std::optional<MetricSummary> confirmed;  // The same metric, measured afresh.
  std::string merge;
};

struct CampaignRow {
  std::string campaign;
  std::vector<CampaignExperimentRow> experiments;  // In decision order.
  int landed = 0;
};

// One e-divisive change point of a branch's tip history.
struct ChangePointRow {
  std::string metric;
  std::string commit;  // Of the first sample after the split.
  std::string evaluation;
  bool at_landing = false;  // The split is where that commit's samples begin.
  int64_t index = 0;
  int64_t samples = 0;
  double mean_before = 0;
  double mean_after = 0;
  double p_value = 0;
  // The landing nearest the split and the distance to it in samples
  // (negative: before it); absent when the history has one commit.
  struct Landing {
    std::string commit;
    int64_t offset = 0;
  };
  std::optional<Landing> nearest_landing;
};

struct NodeRow {
  std::string name;
  std::string state;
  double calibration_noise = 0;
  std::string gate_work;  // "yes", or why it gets none.
  std::string fingerprint;
};

struct Report {
  std::string generated_at;
  std::string repo;    // Empty: all.
  std::string branch;  // Empty: all.
  std::optional<std::string> since;
  std::vector<HeadlineRow> headline;  // Highest cumulative speedup first.
  std::map<std::string, std::vector<TimelineStep>> timeline;  // By metric.
  std::vector<CandidateRow> candidates;  // In decision order.
  // Accepted experiments held for a person's approval by their branch's
  // policy (merge "awaiting_approval"): what a maintainer decides on.
  std::vector<CandidateRow> awaiting_approval;
  std::map<std::string, std::vector<CandidateRow>> rejected;  // By reason code.
  std::vector<PrecisionChart> precision;  // Most recent first.
  std::vector<Bisection> bisections;
  std::vector<CampaignRow> campaigns;
  std::vector<ChangePointRow> change_points;
  std::vector<NodeRow> nodes;
  // Where the HTML links a candidate's feedback: this, then its evaluation
  // id (the scheduler's page sets "feedback?token=T&evaluation="). Empty:
  // a file read offline, which names the command instead.
  std::string feedback_link_prefix;
};

nlohmann::json ReportToJson(const Report& report);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_REPORT_MODEL_H_
