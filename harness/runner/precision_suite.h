// The precision stage: a manifest's long-context sweep (PrecisionSuite) run
// through the kernel runners. One sequence of the longest length is drawn
// from a hidden seed; the baseline-built runner computes the fp64 reference
// and the baseline's fp32 result, the candidate-built runner the candidate's.
// The error at each length L is rel_rms over the outputs of the (up to) 256
// tokens before L, as the shared precision notes measure it. The candidate
// fails when its error exceeds the suite's absolute bound at any length, or
// when at the longest length it exceeds the baseline's by more than
// max_growth_vs_baseline (default 2x): the failure class a short-context
// tolerance misses (see the notes: TF32 passes 2e-3 at 1k tokens at 1000x
// the baseline's error).
//
// Thread-compatible.
#ifndef DENSEGATE_HARNESS_RUNNER_PRECISION_SUITE_H_
#define DENSEGATE_HARNESS_RUNNER_PRECISION_SUITE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "platform/process/launcher.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.pb.h"

namespace densegate::harness {

struct PrecisionCurve {
  std::vector<int64_t> lengths;
  std::vector<double> rel_rms;
  std::vector<double> max_abs_err;
};

struct PrecisionReport {
  enum class Outcome { kPassed, kFailed, kInfrastructure };
  Outcome outcome = Outcome::kPassed;
  std::string message;
  PrecisionCurve baseline;
  PrecisionCurve candidate;
  // Both curves, the bound and the verdict, for the feedback bundle.
  nlohmann::json ToJson(const v1::PrecisionSuite& suite) const;
  // Both curves and the bound, for the stage record (and so the report).
  v1::PrecisionCurve ToProto(const v1::PrecisionSuite& suite) const;
};

class PrecisionBaselineCache;

struct PrecisionSetup {
  platform::ProcessLauncher* launcher = nullptr;
  std::string baseline_dir;
  std::string candidate_dir;
  // The sandboxes each arm's runner runs in (unset: none).
  std::optional<platform::Confinement> baseline_confinement;
  std::optional<platform::Confinement> candidate_confinement;
  std::string log_prefix;
  std::vector<int> cpus;
  uint64_t salt = 0;
  // The candidate's runner and everything it reads are byte-identical to
  // the baseline's (harness/identity): its arm is not run, and its errors
  // are the baseline's, the same program's on the same inputs.
  bool candidate_runner_identical = false;
  // With both set, the baseline's half of the sweep (inputs, fp64
  // reference, the baseline's errors) is taken from `baselines` (not owned)
  // when it holds `baseline_key` (PrecisionBaselineKey of the baseline
  // runner's digest and the suite), and kept there otherwise.
  PrecisionBaselineCache* baselines = nullptr;
  std::string baseline_key;
};

PrecisionReport RunPrecisionSuite(const v1::PrecisionSuite& suite, const PrecisionSetup& setup);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_RUNNER_PRECISION_SUITE_H_
