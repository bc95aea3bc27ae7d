// ScriptedJobRunner: a JobRunner that builds and measures nothing, for
// scheduler scenarios that need nodes but not benchmarks. Each evaluation
// asks the test's script how the candidate fares, then reports what a real
// node would: stage events and per-pair progress to the listener, samples
// for every metric in scope of the baseline's manifest, and the gate's
// verdict over them (so that the scheduler, which decides again from the
// samples, agrees with it), and the feedback bundle harness/feedback.h
// writes for them. Calibration reports a fixed noise.
//
// Thread-safety: the script may be called while the test's thread reads
// requests(); both are guarded.
#ifndef DENSEGATE_HARNESS_NODE_TESTING_SCRIPTED_JOB_RUNNER_H_
#define DENSEGATE_HARNESS_NODE_TESTING_SCRIPTED_JOB_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "harness/node/job_runner.h"
#include "platform/process/launcher.h"

namespace densegate::harness::testing {

// How a scripted candidate fares.
struct ScriptedAnswer {
  enum class Kind {
    // The correctness stage fails: REJECT, no samples.
    kCorrectnessFails,
    // Every benchmark's inputs are byte-identical in both arms: no pairs,
    // every metric exactly unchanged.
    kInputsUnchanged,
    // Every metric in scope measured pair by pair until the gate decides,
    // the candidate at `ratio` times the baseline (within half a percent).
    kMeasured,
  };
  Kind kind = Kind::kInputsUnchanged;
  double ratio = 1.0;
  // Runs, reporting progress, until the scheduler cancels the evaluation
  // (then ends as the Evaluator does, with a Cancelled infrastructure
  // error); after a minute it answers as above.
  bool until_cancelled = false;
  // The bundle gets a log of this many bytes (logs/bench-scripted.out), to
  // try the feedback cap.
  int64_t log_bytes = 100;
};

class ScriptedJobRunner : public JobRunner {
 public:
  // Called on the node's thread for each evaluation; it may block (a test
  // holding a job running).
  using Script = std::function<ScriptedAnswer(const EvalRequest& request)>;

  // `launcher` (not owned) runs git to read the baseline's manifest.
  ScriptedJobRunner(Script script, platform::ProcessLauncher* launcher,
                    double calibration_noise = 0.005);

  v1::NodeDimensions Dimensions() override;
  double MeasureNoise() override { return calibration_noise_; }
  absl::StatusOr<EvalOutcome> Evaluate(const std::string& node_id, const EvalRequest& request,
                                       int64_t feedback_max_bytes,
                                       EvalListener* listener) override;

  // Every evaluation request so far, in order.
  std::vector<EvalRequest> requests() const;

 private:
  Script script_;
  platform::ProcessLauncher* launcher_;
  double calibration_noise_;
  mutable absl::Mutex mu_;
  std::vector<EvalRequest> requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace densegate::harness::testing

#endif  // DENSEGATE_HARNESS_NODE_TESTING_SCRIPTED_JOB_RUNNER_H_
