// JobRunner: the work behind a node's leases. NodeWorker speaks the node
// protocol (register, long-poll, heartbeats, the report stream, finish and
// claim the next job); a JobRunner does the job: measures the node's timing
// noise for a CALIBRATION lease and evaluates the candidate of an
// EVALUATION lease. EvaluatorJobRunner (evaluator_job_runner.h) runs the
// harness's Evaluator and the calibration probe on this machine;
// testing/scripted_job_runner.h measures nothing and answers as a test
// scripts it, so that scheduler scenarios run in seconds.
//
// Thread-safety: NodeWorker calls one method at a time, from its thread.
#ifndef DENSEGATE_HARNESS_NODE_JOB_RUNNER_H_
#define DENSEGATE_HARNESS_NODE_JOB_RUNNER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "harness/evaluator.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

class JobRunner {
 public:
  virtual ~JobRunner() = default;

  // What the node registers as: accelerator kind, CPU, memory, and the
  // fingerprint that says which nodes measure alike.
  virtual v1::NodeDimensions Dimensions() = 0;
  // A CALIBRATION lease: the node's timing noise, as a robust coefficient
  // of variation.
  virtual double MeasureNoise() = 0;
  // An EVALUATION lease, on node `node_id`: as Evaluator::Evaluate, with
  // the evaluation's feedback bundle in EvalOutcome::feedback, at most
  // `feedback_max_bytes` (> 0: the scheduler's cap; what does not fit is
  // listed as omitted).
  virtual absl::StatusOr<EvalOutcome> Evaluate(const std::string& node_id,
                                               const EvalRequest& request,
                                               int64_t feedback_max_bytes,
                                               EvalListener* listener) = 0;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_NODE_JOB_RUNNER_H_
