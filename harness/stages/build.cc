// The build stage: both arms built with the manifest's command.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::Build() {
  StageRun run(v1::BUILD, listener_, &stages_);
  run.stage().set_log_uri(LogPath("build-candidate.err"));
  const auto& build = manifest_.build();
  for (bool candidate : {false, true}) {
    std::string arm = candidate ? "candidate" : "baseline";
    if (candidate) {
      if (absl::Status s = Workspace(options_.workspace_root, options_.slot, &git_, Users())
                               .SeedCandidate(checkout_);
          !s.ok()) {
        return s;
      }
    }
    Say(v1::BUILD, "building " + arm);
    absl::StatusOr<platform::ProcessResult> r = Shell(build.command(), candidate, "build-" + arm,
                                            build.timeout_s(), ArmSandbox(candidate, Access::kBuild));
    if (!r.ok()) return r.status();
    if (!r->ok()) {
      std::string tail = LastLines(platform::ReadOutputFile(LogPath("build-" + arm + ".err")), 8);
      std::string message = absl::StrFormat("%s build %s: %s\n%s", arm, r->Describe(),
                                            build.command(), tail);
      if (!candidate) {
        run.End(v1::STAGE_ERROR, message);
        infrastructure_ = absl::FailedPreconditionError(
            "the baseline does not build, so nothing can be compared: " + message);
        return false;
      }
      failures_.push_back(Reason(v1::BUILD_FAILED, v1::BUILD, message));
      run.End(v1::STAGE_FAILED, message);
      return false;
    }
  }
  run.End(v1::STAGE_PASSED, "baseline and candidate built with: " + build.command());
  return true;
}

}  // namespace densegate::harness::internal
