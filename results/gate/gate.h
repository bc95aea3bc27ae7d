// The gate: turns paired benchmark samples and stage outcomes into a
// decision (accept, reject, inconclusive) with reasons that name the stage,
// the metric and the numbers.
//
// Sequential design. Pairs are measured in batches; the gate looks at the
// data only at the pair counts of a fixed plan (SequentialPlan), and each
// look l spends its own share alpha_l of the one-sided error budget
// alpha = (1 - confidence) / 2. Because the shares add up to alpha, the union
// bound keeps the probability of a false accept at any look, summed over all
// looks, <= alpha whatever the dependence between looks (optional stopping is
// paid for). The first look gets 5/8 of alpha so that large effects stop at
// the first look; later looks split the rest evenly.
//
// At a look with n pairs, each metric's speedup is bounded by the Wilcoxon
// signed-rank bounds of its paired log-ratios at level alpha_l (divided by
// the number of primary metrics, Bonferroni, since any one of them can carry
// an accept). Rules, in order:
//   * a failing stage (build, correctness, precision, gaming, protected
//     path) rejects, whatever the metrics say;
//   * any metric whose slowdown beyond the regression budget is significant
//     (Benjamini-Hochberg across all metrics at alpha_l) rejects;
//   * policy GAIN: accept when some primary metric's lower bound clears
//     1 + min_effect (and every claim is decided); reject when every primary
//     metric's upper bound is below it (no gain possible);
//   * policy NO_REGRESSION: accept when every metric's lower bound is above
//     1 / (1 + regression_budget);
//   * otherwise measure more pairs; at the last look the result is
//     inconclusive.
// A metric whose inputs were identical in both arms is taken as exactly 1x
// (an interval [1, 1]); when every metric is, the decision takes no pairs.
// A claim "metric >= X" is verified when the lower bound reaches
// X * claim_tolerance.
//
// Confirmed metrics. A metric M with `confirmed_by` = C is measured by a
// program the candidate built, C by a trusted harness timing the same
// computation. M's gain counts only when C shows a gain too (C's lower
// bound clears the gain threshold), and so does a claim on M (its size is
// M's to show: C's own timing carries a per-call overhead that dilutes a
// speedup toward 1). When M shows a gain that C rules out (C's upper bound
// below the gain threshold), the candidate is rejected
// (BENCHMARK_ONLY_GAIN). A confirmed primary metric and its primary
// confirmer share one Bonferroni share: an accept through either needs the
// confirmer's bound. A speedup estimate above the sanity ceiling (or a
// metric's roofline) turns an accept into inconclusive, flagged for review.
//
// Evaluate() is a pure function of its input: the harness calls it after each
// batch of pairs, and `densegate verdict recompute` calls it on the stored
// samples to reproduce the stored verdict exactly.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_RESULTS_GATE_GATE_H_
#define DENSEGATE_RESULTS_GATE_GATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/densegate.pb.h"

namespace densegate::results {

// GatePolicy with every default filled in (0 in the manifest = default).
struct GateParameters {
  double min_effect = 0.02;
  double confidence = 0.95;
  double regression_budget = 0.02;
  int min_pairs = 6;
  int max_pairs = 30;
  double claim_tolerance = 0.97;
  double sanity_ceiling = 20;
  double max_calibration_noise = 0.03;
  // The part of a continued evaluation these parameters are for (see
  // PartParameters): the share of alpha its plan spends, and whether it is
  // the second part. Not manifest settings: the scheduler's split.
  double error_share = 1;
  bool second_part = false;
};

// Fills defaults and checks ranges (e.g. min_effect < 0 is InvalidArgument).
absl::StatusOr<GateParameters> ResolveGateParameters(const v1::GatePolicy& policy);
v1::GatePolicy ToProto(const GateParameters& params);

// The parameters of one part of an evaluation that may be continued once.
// Noise can leave an evaluation inconclusive at its last look; the
// scheduler then queues a second part on a calm node of the same kind,
// which pools the first part's pairs with new ones. So that both parts
// together keep the manifest's error rate, alpha is split up front: the
// first part's plan spends `error_share` of it (its first look keeps its
// 5/8, the later looks share what is left: share - 5/8, so share must be
// above 5/8) and the second part's plan (`second_part`, error_share = the
// rest) spends the rest, with looks after the first part's last: from
// max_pairs + min_pairs to 2 * max_pairs pooled pairs. Every look of either
// part spends its own share and the shares add up to alpha, so the union
// bound holds across both parts whatever the dependence between their
// looks, and whether or not the second part runs. error_share 0 or 1: the
// whole budget, one part.
GateParameters PartParameters(GateParameters params, double error_share, bool second_part);

// The pair counts at which the gate looks, and the one-sided error each look
// spends.
struct SequentialPlan {
  std::vector<int> pairs;
  std::vector<double> alpha;
};
SequentialPlan PlanLooks(const GateParameters& params);

// One metric's repetitions, pair i = (baseline[i], candidate[i]) in the
// order they were measured.
struct MetricSamples {
  std::string name;
  std::string unit;
  v1::Direction direction = v1::LOWER_IS_BETTER;
  bool primary = false;
  // MICROBENCHMARK or END_TO_END: named in the reasons about this metric.
  v1::StageKind stage = v1::MICROBENCHMARK;
  std::vector<double> baseline;
  std::vector<double> candidate;
  // Largest physically plausible speedup (e.g. from the memory-bandwidth
  // roofline); 0 when unknown.
  double roofline_speedup = 0;
  // Not measured (no samples): the benchmark's inputs were byte-identical in
  // both arms, so the metric is exactly unchanged. It never regresses,
  // never gains, and spends none of the error budget.
  bool inputs_identical = false;
  // Name of another metric of the input, measured by a trusted harness
  // timing the same computation (MetricSpec.confirmed_by), or empty. See
  // the rules for confirmed metrics above.
  std::string confirmed_by;
};

struct GateInput {
  v1::Policy policy = v1::GAIN;
  GateParameters params;
  std::vector<v1::Claim> claims;
  std::vector<MetricSamples> metrics;
  // Failures found by earlier stages; any one rejects.
  std::vector<v1::Reason> stage_failures;
  // Seeds the bootstrap intervals reported beside the rank bounds.
  uint64_t seed = 0;
};

struct GateResult {
  // True when no decision is possible yet: measure up to `next_pairs` pairs
  // per metric and call Evaluate again.
  bool needs_more_pairs = false;
  int next_pairs = 0;
  // The look (1-based) and pair count the decision was taken at.
  int look = 0;
  int pairs_used = 0;
  v1::Decision decision = v1::DECISION_UNSPECIFIED;
  std::vector<v1::Reason> reasons;
  std::vector<v1::MetricComparison> metrics;
  std::vector<v1::ClaimResult> claims;
};

// InvalidArgument for: bad parameters, a policy that isn't GAIN or
// NO_REGRESSION, no metrics (unless a stage failed), samples that are empty
// (or present on an inputs_identical metric), non-finite, non-positive or of
// mismatched lengths, GAIN without a primary
// metric, a claim on an unknown metric or with a claimed speedup <= 0.
absl::StatusOr<GateResult> Evaluate(const GateInput& input);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_GATE_GATE_H_
