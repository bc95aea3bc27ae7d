// A trusted kernel check: one arm's kernel runner against the baseline's
// reference, out of process, on inputs it cannot predict.
//
// For every call the harness draws fresh inputs from a hidden seed, copies
// them into the subject's and the reference runner's separate shared
// memories, poisons the subject's outputs with NaN, times the subject's
// call on its own clock, then has the reference computed (fp64, or the
// baseline's fp32 result for timed repetitions) and verifies every output
// of that timed call. It rejects, naming the trick:
//   * outputs left unwritten (partial output, skipped tail): NaN poison left;
//   * outputs equal to the previous call's for new inputs (cached);
//   * results outside max_rel_rms of the reference (wrong, or lower
//     precision than declared);
//   * inputs modified by the call;
//   * two calls on identical inputs that differ (nondeterminism,
//     uninitialised reads);
//   * CPU used between calls, outside the timed region (background work).
// The subject and the reference never share a process or memory.
//
// Thread-compatible.
#ifndef DENSEGATE_HARNESS_RUNNER_KERNEL_CHECK_H_
#define DENSEGATE_HARNESS_RUNNER_KERNEL_CHECK_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "platform/process/launcher.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

struct KernelCheckReport {
  enum class Outcome { kPassed, kIncorrect, kGaming, kInfrastructure };
  Outcome outcome = Outcome::kPassed;
  std::string message;
  // The subject's timed calls, seconds on the harness's clock.
  std::vector<double> call_seconds;
  double worst_rel_rms = 0;
};

struct KernelCheckSetup {
  platform::ProcessLauncher* launcher = nullptr;
  // Worktree whose runner computes the reference (always the baseline).
  std::string reference_dir;
  // Worktree whose runner is checked and timed.
  std::string subject_dir;
  // The sandboxes each runner runs in (unset: none).
  std::optional<platform::Confinement> reference_confinement;
  std::optional<platform::Confinement> subject_confinement;
  // Runner stderr goes to <log_prefix>-{reference,subject}.err.
  std::string log_prefix;
  std::vector<int> cpus;
  // Mixed into the hidden per-call seeds.
  uint64_t salt = 0;
  // What the subject is verified against. kFp64: the baseline runner's
  // reference mode (the correctness stage). kBaselineCompute: the baseline
  // runner's own fp32 result on the same inputs, which costs one kernel call
  // instead of an fp64 recurrence; used for the timed repetitions, where
  // every output is still verified within max_rel_rms.
  enum class Reference { kFp64, kBaselineCompute };
  Reference reference = Reference::kFp64;
  // A call that takes longer is a hung runner.
  absl::Duration call_timeout = absl::Seconds(120);
  // After each timed call the runner is watched idle at least this long:
  // CPU it uses meanwhile is work outside the timed region.
  absl::Duration idle_watch = absl::Milliseconds(60);
};

KernelCheckReport RunKernelCheck(const v1::KernelCheck& check, const KernelCheckSetup& setup);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_RUNNER_KERNEL_CHECK_H_
