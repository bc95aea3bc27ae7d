#include "cli/sandbox_flags.h"

#include <iostream>

namespace densegate::cli {

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* flags) {
  cmd->add_flag("--unsafe_no_sandbox", flags->unsafe_no_sandbox,
                "development only: run every arm's commands as this process's user, "
                "without the bubblewrap sandbox (verdicts say so)");
  cmd->add_option("--sandbox_uid", flags->sandbox_uid,
                  "host user the baseline arm runs as (it alone writes the trusted build "
                  "cache)")
      ->capture_default_str();
  cmd->add_option("--candidate_uid", flags->candidate_uid,
                  "host user the candidate arm of slot 0 runs as, slot S as this + S "
                  "(default --sandbox_uid + 1; nodes sharing a machine need ranges that do "
                  "not overlap)");
  cmd->add_option("--arm_disk_quota_mib", flags->arm_disk_quota_mib,
                  "disk a candidate's arm (worktree, home, build cache) may fill; a build or "
                  "test past it is stopped and rejects the candidate")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--arm_max_processes", flags->arm_max_processes,
                  "processes and threads each arm's user may run at once; a command that "
                  "reaches it is stopped as a fork bomb (a candidate's rejects it)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 22));
}

absl::StatusOr<std::unique_ptr<platform::ProcessLauncher>> NewArmLauncher(
    const SandboxFlags& flags, const std::string& command) {
  platform::SandboxOptions options;
  options.unsafe_no_sandbox = flags.unsafe_no_sandbox;
  if (flags.unsafe_no_sandbox) {
    std::cerr << "densegate " << command
              << ": WARNING: --unsafe_no_sandbox: candidates run with this process's rights; "
                 "for development only\n";
  } else if (absl::Status s = platform::CheckSandbox(options); !s.ok()) {
    return s;
  }
  return platform::NewSandboxLauncher(options);
}

std::string Isolation(const SandboxFlags& flags) {
  return flags.unsafe_no_sandbox ? "none: --unsafe_no_sandbox (development only)" : "bubblewrap";
}

}  // namespace densegate::cli
