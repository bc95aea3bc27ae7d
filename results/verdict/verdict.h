// Verdicts: assembling one from the gate's result, and recomputing a stored
// one from what it records it was computed from.
//
// A verdict's Provenance names its samples (by id), the resolved gate
// parameters, the statistics seed, the manifest hash, the node and the
// software version. Redecide runs the gate again over a verdict's samples;
// RecomputeVerdict reads a stored verdict back from the store, redecides it
// and compares decision, reasons, metric comparisons and claims field by
// field.
//
// Thread-safety: free functions; RecomputeVerdict uses the store's own
// thread-safety.
#ifndef DENSEGATE_RESULTS_VERDICT_VERDICT_H_
#define DENSEGATE_RESULTS_VERDICT_VERDICT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/densegate.pb.h"
#include "results/gate/gate.h"
#include "results/store/store.h"

namespace densegate::results {

// Pairs raw samples by (metric, pair_index) into the gate's input form.
// `specs` give each metric's metadata (name, unit, direction, primary,
// stage, roofline); their sample vectors are ignored. Only pairs with both
// arms count, in pair_index order. InvalidArgument for a sample of an
// unknown metric, a repeated (metric, arm, pair_index), or a metric without
// any complete pair (unless it is inputs_identical: never measured).
absl::StatusOr<std::vector<MetricSamples>> PairSamples(
    absl::Span<const v1::Sample> samples, absl::Span<const MetricSamples> specs);

// Who and what produced a verdict, beyond the gate's input.
struct VerdictContext {
  std::string evaluation_id;
  std::string candidate_id;
  std::string manifest_hash;
  std::string node_id;
  std::string node_fingerprint;
  std::string software_version;
  std::string isolation;
  std::vector<int64_t> sample_ids;
  std::vector<v1::Stage> stages;
  std::vector<v1::BenchmarkInputs> benchmark_inputs;
  // Recorded when set.
  v1::HostSteadiness host;
};

// Reason codes that come from a failing stage rather than from the metrics.
bool IsStageFailure(v1::ReasonCode code);
// Whether `v` names a failed stage: then its metrics decide nothing.
bool DecidedByStages(const v1::Verdict& v);

// Inconclusive only because the metrics were too noisy to decide within
// the pair budget (every reason for it UNDECIDED), not held for review.
bool InconclusiveForNoise(const v1::Verdict& v);
// Whether `evaluation` (FINISHED) is a first part that noise left
// inconclusive and that kept error budget for a second part
// (v1::Candidate::error_share, results/gate PartParameters). A merge-queue
// re-measure is not continued: the merge queue decides on its verdict.
bool ContinuationDue(const v1::Evaluation& evaluation);

// Each metric `manifest` gates, described as the gate needs it (name, unit,
// direction, primary, stage, confirmer; no samples), in the order an
// evaluation reports them: its benchmarks' metrics, then its timed kernel
// checks' (nanoseconds, lower is better, primary, microbenchmark stage).
std::vector<MetricSamples> ManifestMetrics(const v1::Manifest& manifest);

// Whether `scope` takes in `metric` (an empty scope takes in every metric),
// or a metric that `metric` confirms: a gain on a confirmed metric means
// nothing without its confirmer's samples.
bool InMetricScope(const v1::Manifest& manifest, absl::Span<const std::string> scope,
                   const std::string& metric);

// The verdict for `result` (which must not need more pairs).
v1::Verdict MakeVerdict(const GateInput& input, const GateResult& result,
                        const VerdictContext& context);

// The verdict the gate gives for `samples` (the ones a verdict rests on),
// with the policy, claims and metric scope of `evaluation` as it was
// submitted, and the statistics seed, stage failures and context as
// `reported` records them. The gate parameters and metric descriptions come
// from `manifest`, the baseline's, when given (the scheduler's case: what
// a node measured decides, not what it concluded or how it says to decide;
// the scheduler stores this, not the node's verdict), taken for the
// evaluation's part (PartParameters of its candidate's error_share and
// continues), else from `reported` (recomputing a stored verdict).
// FailedPrecondition when the samples are not enough for a decision;
// InvalidArgument when they do not pair up, or, with a manifest, when
// `reported` leaves out a metric in scope or has one the manifest does not
// declare.
absl::StatusOr<v1::Verdict> Redecide(const v1::Verdict& reported,
                                     const v1::Evaluation& evaluation,
                                     absl::Span<const v1::Sample> samples,
                                     const v1::Manifest* manifest = nullptr);

// The samples of `evaluation_id` in the store whose ids a verdict's
// provenance names, in the store's order (no store call when it names none).
absl::StatusOr<std::vector<v1::Sample>> NamedSamples(Store& store,
                                                     absl::string_view evaluation_id,
                                                     const v1::Provenance& provenance);

// One line per difference in what the gate decides (decision, policy,
// reasons, metric comparisons, claims), e.g. "metrics[0].ci_low: 1.61 vs
// 1.62"; empty when they agree.
std::vector<std::string> DecisionDifferences(const v1::Verdict& a, const v1::Verdict& b);

struct Recomputation {
  v1::Verdict stored;
  v1::Verdict recomputed;
  // One line per field that differs, e.g. "metrics[0].ci_low: 1.61 vs 1.62".
  std::vector<std::string> differences;
  bool identical() const { return differences.empty(); }
};

// NotFound for an unknown evaluation or one without a verdict.
absl::StatusOr<Recomputation> RecomputeVerdict(Store& store,
                                               absl::string_view evaluation_id);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_VERDICT_VERDICT_H_
