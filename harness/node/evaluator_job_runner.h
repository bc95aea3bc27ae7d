// EvaluatorJobRunner: the JobRunner of `densegate node`. Each evaluation
// runs the harness's Evaluator (harness/evaluator.h) with this node's
// options, the cache-sweep machine probe and one precision-baseline cache
// kept across evaluations; calibration times a fixed CPU- and memory-bound
// probe (MeasureCalibrationNoise), alone on the machine when a host lock
// is shared with other nodes.
//
// Thread-safety: one call at a time (JobRunner's contract).
#ifndef DENSEGATE_HARNESS_NODE_EVALUATOR_JOB_RUNNER_H_
#define DENSEGATE_HARNESS_NODE_EVALUATOR_JOB_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/evaluator.h"
#include "harness/node/job_runner.h"
#include "harness/runner/precision_baseline_cache.h"
#include "platform/process/launcher.h"

namespace densegate::harness {

// This machine's dimensions: CPU model and cores (`cpus` when pinned),
// memory, and a fingerprint of CPU, kernel and compiler.
v1::NodeDimensions DetectDimensions(const std::vector<int>& cpus);

// Robust coefficient of variation (1.4826 MAD / median) of `runs` timings
// of a fixed CPU- and memory-bound probe.
double MeasureCalibrationNoise(int runs);

class EvaluatorJobRunner : public JobRunner {
 public:
  // `evaluator` is every evaluation's options (node_fingerprint is this
  // machine's; node_id, machine_probe and precision_baselines are set per
  // evaluation);
  // `precision_cache_bytes` bounds the baselines' halves of precision
  // sweeps kept for later candidates (0: none). `launcher` is not owned.
  EvaluatorJobRunner(EvaluatorOptions evaluator, int64_t precision_cache_bytes,
                     platform::ProcessLauncher* launcher);

  v1::NodeDimensions Dimensions() override;
  double MeasureNoise() override;
  absl::StatusOr<EvalOutcome> Evaluate(const std::string& node_id, const EvalRequest& request,
                                       int64_t feedback_max_bytes,
                                       EvalListener* listener) override;

 private:
  EvaluatorOptions options_;
  platform::ProcessLauncher* launcher_;
  PrecisionBaselineCache precision_baselines_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_NODE_EVALUATOR_JOB_RUNNER_H_
