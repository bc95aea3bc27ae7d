// --unsafe_no_sandbox, --sandbox_uid, --candidate_uid and the per-arm limits, shared by `densegate node` and
// `densegate eval`: the launcher every arm command goes through, checked
// before any work is taken.
#ifndef DENSEGATE_CLI_SANDBOX_FLAGS_H_
#define DENSEGATE_CLI_SANDBOX_FLAGS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "platform/process/launcher.h"

namespace densegate::cli {

struct SandboxFlags {
  bool unsafe_no_sandbox = false;
  uint32_t sandbox_uid = 59000;
  uint32_t candidate_uid = 0;  // 0: sandbox_uid + 1.
  int64_t arm_disk_quota_mib = 32 << 10;  // EvaluatorOptions::arm_disk_quota_bytes.
  int64_t arm_max_processes = 8192;       // EvaluatorOptions::arm_max_processes.
};

void AddSandboxFlags(CLI::App* cmd, SandboxFlags* flags);

// The sandbox launcher, once a trial sandbox has started (FailedPrecondition
// with what is missing otherwise). With --unsafe_no_sandbox it warns on
// stderr instead, and every verdict records it (Isolation).
absl::StatusOr<std::unique_ptr<platform::ProcessLauncher>> NewArmLauncher(
    const SandboxFlags& flags, const std::string& command);

// Provenance.isolation for verdicts made with these flags.
std::string Isolation(const SandboxFlags& flags);

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_SANDBOX_FLAGS_H_
