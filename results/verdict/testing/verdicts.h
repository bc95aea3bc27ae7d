// Verdicts as a node reports them, for tests and benchmarks of the
// scheduler (which decides again from the samples and quarantines a node
// whose verdict disagrees): as an honest node does for jobs whose decision
// rests on no samples (REJECT from a failed correctness stage, ACCEPT
// because the one metric's inputs were identical in both arms), and the
// gate's verdict over samples with the metrics described as a node chooses.
//
// Thread-safety: pure function.
#ifndef DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_
#define DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "proto/densegate.pb.h"
#include "results/gate/gate.h"

namespace densegate::results::testing {

// `decision`: ACCEPT or REJECT. An ACCEPT names `metric` (one the
// baseline's manifest gates, lower is better) as not measured.
v1::Verdict VerdictWithoutSamples(const std::string& evaluation_id, v1::Policy policy,
                                  v1::Decision decision,
                                  const std::string& metric = "kernel.time");

// The gate's verdict over `samples` (all pairs at one look) under `gate`,
// with `metrics` (no samples) describing them as the node says, e.g.
// without a confirmer the manifest names, for the part of the evaluation
// that `error_share` and `second_part` say (PartParameters). Aborts where
// the gate wants more pairs.
v1::Verdict VerdictFromSamples(const std::string& evaluation_id, v1::Policy policy,
                               const v1::GatePolicy& gate,
                               const std::vector<MetricSamples>& metrics,
                               absl::Span<const v1::Sample> samples, double error_share = 0,
                               bool second_part = false);

}  // namespace densegate::results::testing

#endif  // DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_
