// The precision stage: long-context error sweeps against an fp64 reference.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::Precision() {
  if (manifest_.precision().empty()) {
    Skip(v1::PRECISION, "no precision suites declared", listener_, &stages_);
    return true;
  }
  StageRun run(v1::PRECISION, listener_, &stages_);
  std::vector<std::string> passed;
  for (const v1::PrecisionSuite& suite : manifest_.precision()) {
    Say(v1::PRECISION,
        absl::StrFormat("precision suite %s (%s, up to %d tokens)", suite.name(), suite.op(),
                        suite.lengths().empty() ? 0 : suite.lengths(suite.lengths_size() - 1)));
    PrecisionSetup setup;
    setup.launcher = launcher_;
    setup.baseline_dir = checkout_.baseline_dir;
    setup.candidate_dir = checkout_.candidate_dir;
    setup.baseline_confinement = ArmSandbox(false, Access::kMeasure);
    setup.candidate_confinement = ArmSandbox(true, Access::kMeasure);
    setup.log_prefix = LogPath("precision-" + suite.name());
    setup.cpus = options_.cpus;
    setup.salt = request_.seed;
    // Each arm's runner and everything it reads, as one digest (each file
    // read once): equal digests mean a runner the candidate did not change
    // (a comment, or a change to the runtime only), which would compute the
    // baseline's errors again; the baseline's keys its kept baseline half.
    // An unreadable runner gets neither.
    v1::BenchmarkSpec runner;
    runner.set_command(suite.runner());
    const absl::StatusOr<std::string> baseline_runner =
        BenchmarkInputsDigest(runner, checkout_.baseline_dir);
    const absl::StatusOr<std::string> candidate_runner =
        BenchmarkInputsDigest(runner, checkout_.candidate_dir);
    setup.candidate_runner_identical =
        baseline_runner.ok() && candidate_runner.ok() && *baseline_runner == *candidate_runner;
    if (options_.precision_baselines != nullptr && baseline_runner.ok()) {
      setup.baselines = options_.precision_baselines;
      setup.baseline_key = PrecisionBaselineKey(*baseline_runner, suite);
    }
    PrecisionReport r = RunPrecisionSuite(suite, setup);
    WritePrecisionCurve(request_.out_dir, suite.name(), r.ToJson(suite));
    if (!r.baseline.lengths.empty() || !r.candidate.lengths.empty()) {
      *run.stage().add_curves() = r.ToProto(suite);
    }
    if (r.outcome == PrecisionReport::Outcome::kInfrastructure) {
      infrastructure_ = absl::FailedPreconditionError("precision suite " + r.message);
      run.End(v1::STAGE_ERROR, r.message);
      return false;
    }
    if (r.outcome == PrecisionReport::Outcome::kFailed) {
      failures_.push_back(Reason(v1::PRECISION_FAILED, v1::PRECISION, r.message));
      run.End(v1::STAGE_FAILED, r.message);
      return false;
    }
    passed.push_back(r.message);
  }
  run.End(v1::STAGE_PASSED, absl::StrJoin(passed, "; "));
  return true;
}

}  // namespace densegate::harness::internal
