// Evaluator: one candidate against its baseline, on this node, start to
// verdict. The engine behind `densegate eval` and the node worker.
//
// Data path of one evaluation:
//   1. preflight: check out both commits (Workspace), read the manifest from
//      the BASELINE commit, validate it against the baseline tree, and
//      reject a candidate that changes a protected path (unless overridden);
//   2. build both arms with the manifest's command (same flags), each arm
//      in its own sandbox (platform/process/launcher.h): builds and tests of
//      an arm share one sandbox that lives as long as its Bazel server may
//      (the candidate's ends with the evaluation), and every runner and
//      benchmark repetition gets a fresh one that sees its arm read-only;
//      a failing candidate build rejects, a failing baseline build is an
//      infrastructure error;
//   3. correctness: the manifest's kernel checks (harness/runner: the
//      candidate-built kernel runner against the baseline-built reference,
//      out of process, fresh hidden inputs per call, every output verified)
//      and its test commands on the candidate, results per test case (exit
//      code, JUnit XML, or Bazel's test.xml files);
//   4. precision: each long-context sweep, the candidate's error curve
//      against fp64 compared with the bound and with the baseline's curve;
//   5+6. benchmarks: Google Benchmark binaries and timed kernel checks
//      (microbenchmark stage) and JSON commands (end-to-end stage), baseline
//      and candidate interleaved ABBA (the two arms of each benchmark back
//      to back), each repetition a fresh process (on a noisy node several
//      per end-to-end sample: EndToEndRunsPerArm),
//      pairs added until the sequential gate (results/gate) decides. A
//      benchmark with skip_when_identical whose inputs are byte-identical in
//      both arms is not run (harness/identity); a re-measure whose arms
//      read the inputs of the evaluation it re-measures takes its samples
//      (EvalRequest::prior).
//      Self-reported times are checked against the process's own lifetime
//      on the harness's clock.
// Stages stop at the first failure. Every stage is reported to the
// listener as it starts and ends, with repetition progress in between, and
// written with its log into the feedback bundle when an output directory is
// given (see feedback.h).
//
// Thread-safety: one evaluation at a time per Evaluator (it owns a slot).
#ifndef DENSEGATE_HARNESS_EVALUATOR_H_
#define DENSEGATE_HARNESS_EVALUATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "harness/process/host_lock.h"
#include "platform/process/launcher.h"
#include "harness/process/machine_probe.h"
#include "harness/runner/precision_baseline_cache.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

struct EvalRequest {
  // The scheduler's evaluation this runs (empty for `densegate eval`): named
  // in the verdict and the feedback bundle.
  std::string evaluation_id;
  std::string repo;  // Local path or URL.
  std::string baseline_ref;
  std::string candidate_ref;
  // UNSPECIFIED: GAIN.
  v1::Policy policy = v1::POLICY_UNSPECIFIED;
  std::vector<v1::Claim> claims;
  // Empty: every metric. Otherwise the benchmark stage measures and gates
  // only these (v1::Candidate::metric_scope); each must be one the
  // baseline's manifest measures (else InvalidArgument).
  std::vector<std::string> metric_scope;
  // A re-measure against a moved tip, or a second part: the evaluation it
  // re-measures or continues (empty evaluation_id: none). When the prior
  // ran on a node with this node's fingerprint, a benchmark with
  // skip_when_identical whose arms read the inputs (and manifest entry)
  // whose digests the prior recorded for its arms takes the prior's
  // samples (the same programs on the same data on the same kind of
  // machine), measured further only if the gate asks for more pairs; the
  // other benchmarks and timed kernel checks are measured.
  v1::PriorMeasurement prior;
  // Share of the manifest's error budget this evaluation spends (0: all),
  // and the first part it continues (empty: none); see v1::Candidate and
  // results::PartParameters. A second part's `prior` is its first part, so
  // that the benchmarks whose inputs match pool that part's pairs.
  double error_share = 0;
  std::string continues;
  bool protected_path_override = false;
  std::string override_reason;
  // A declared change of numerics (v1::Candidate::precision_change): a
  // benchmark with an OutputCheck then accepts the candidate's generated
  // tokens within its min_token_agreement instead of only identical ones.
  std::string precision_change;
  // The node's latest calibration noise (robust coefficient of variation of
  // its A/A calibration; v1::Lease::node_calibration_noise); 0: unknown. A
  // noisy node runs each end-to-end benchmark several times per arm and
  // pair (EndToEndRunsPerArm), so that its samples are as precise as a
  // quiet node's instead of its bounds being wider.
  double node_noise = 0;
  // Feedback bundle directory; empty: none.
  std::string out_dir;
  // Seeds the statistics (bootstrap); recorded in the verdict.
  uint64_t seed = 0;
};

// Receives live progress. Called on the evaluating thread.
class EvalListener {
 public:
  virtual ~EvalListener() = default;
  virtual void OnStage(const v1::Stage& stage) = 0;
  virtual void OnProgress(const v1::Progress& progress) = 0;
  // Polled between stages and between benchmark pairs: true stops the
  // evaluation, which then ends with a Cancelled infrastructure_error.
  virtual bool Cancelled() { return false; }
};

struct EvaluatorOptions {
  // Worktrees, mirrors and the shared build cache live here.
  std::string workspace_root;
  int slot = 0;
  // Reported in the verdict's provenance.
  std::string node_id = "local";
  std::string node_fingerprint;
  std::string software_version;
  // CPUs the measured processes are pinned to; empty: any.
  std::vector<int> cpus;
  // Host users the arms' sandboxes run as (never the node's): every
  // baseline arm as `sandbox_uid` (they write the trusted build cache), the
  // candidate arm of slot s as candidate_uid + s (0: sandbox_uid + 1).
  // Nodes that share a machine need candidate ranges that do not overlap;
  // they may share the baseline user, and with it a trusted cache.
  uint32_t sandbox_uid = 59000;
  uint32_t candidate_uid = 0;
  // How the launcher isolates arms, for the verdict's provenance.
  std::string isolation = "bubblewrap";
  // Free space the workspace's filesystem must keep. Below it, before a
  // stage or after one failed (or when a failed stage's log reports ENOSPC),
  // the evaluation ends as an infrastructure error, not a verdict.
  int64_t min_free_bytes = int64_t{256} << 20;
  // Disk the candidate's arm (its worktree, home and build cache) may fill
  // during its build and correctness commands. Past it, or when the
  // workspace's filesystem falls below min_free_bytes while the candidate's
  // arm holds at least min_free_bytes more than the baseline's, the command
  // is stopped and the candidate rejected: a candidate that fills the disk fails its own
  // evaluation, not the node's.
  int64_t arm_disk_quota_bytes = int64_t{32} << 30;
  // Processes and threads each arm's user may run at once (RLIMIT_NPROC);
  // a command whose user reaches it is stopped and named a fork bomb.
  int64_t arm_max_processes = 8192;
  // Set when other nodes share this machine (not owned): the two measured
  // processes of each benchmark of a pair run under it exclusively, every
  // other stage shared.
  HostLock* host_lock = nullptr;
  // Timed before each measured process and after each benchmark's two runs
  // of a pair (see MachineProbe). When the probe times around those two
  // differ by more than `max_probe_spread` (slowest / fastest), they ran
  // across a change of the machine's speed: their samples are dropped, the
  // node waits for the host to settle (backoff from
  // `first_unsteady_wait_seconds`, doubling with each unsteady measurement
  // in a row, up to a minute; the probe is read each second and the wait
  // ends once three reads in a row agree within max_probe_spread; the
  // listener sees "host unsteady: waiting ..."), and that benchmark of the pair is
  // measured again. Bounded three ways: `max_remeasures_in_a_row` for one
  // pair, max_pairs per evaluation, and `max_unsteady_seconds` of dropped
  // runs and waits per evaluation. Past a bound the pair is kept as
  // measured: the sequential gate's error control holds for pairs kept
  // through a phase change (results/gate: gate_calibration's slow-phase
  // model), so the bounds trade precision, never the error rate, for time.
  // The stage summary and Provenance.host say what happened. Null: no probe.
  MachineProbe* machine_probe = nullptr;
  // Between the probe's two states on the VM measured in machine_probe.h
  // (1.05x and 1.85x its best time).
  double max_probe_spread = 1.3;
  int max_remeasures_in_a_row = 3;
  double max_unsteady_seconds = 300;
  double first_unsteady_wait_seconds = 5;
  // Keeps the baseline's half of each precision sweep (drawn inputs, fp64
  // reference, the baseline's errors) for later evaluations whose baseline
  // runner is byte-identical (not owned; see PrecisionBaselineCache). Null:
  // every sweep computes its own.
  PrecisionBaselineCache* precision_baselines = nullptr;
};

struct EvalOutcome {
  // Set when a decision was reached (accept, reject or inconclusive).
  v1::Verdict verdict;
  // Set instead when the evaluation could not be carried out for reasons
  // that are not the candidate's fault (exit code 4).
  absl::Status infrastructure_error;
  // Every raw sample, in measurement order (ids local to this evaluation,
  // as the verdict's provenance lists them).
  std::vector<v1::Sample> samples;
  // The feedback bundle, as a node's JobRunner reads it back from the
  // directory the evaluation wrote it to; the Evaluator itself only writes
  // the directory (EvalRequest::out_dir) and leaves this empty.
  v1::FeedbackBundle feedback;
};

// Calibration noise at or below which a node runs each end-to-end benchmark
// once per arm and pair: calm nodes of the development VM calibrate at
// 0.2-1.3%.
inline constexpr double kQuietNodeNoise = 0.015;
inline constexpr int kMaxEndToEndRunsPerArm = 4;

// Runs per arm and pair of an end-to-end (JSON_COMMAND) benchmark on a node
// calibrated at `node_noise`: the sample is the geometric mean of the runs,
// whose noise falls as one over the square root of their number, so
// ceil((node_noise / kQuietNodeNoise)^2) runs bring a noisy node's samples
// back to a quiet node's precision. At most kMaxEndToEndRunsPerArm (4 runs
// match a node at 3%, the default manifest limit; noisier nodes get no gate
// work from such a repository); 1 when the noise is unknown (0).
int EndToEndRunsPerArm(double node_noise);

class Evaluator {
 public:
  // `launcher` is not owned and must outlive the evaluator.
  Evaluator(EvaluatorOptions options, platform::ProcessLauncher* launcher);

  // InvalidArgument/NotFound for bad requests (unknown refs, no manifest,
  // invalid baseline manifest); everything else ends in an EvalOutcome.
  absl::StatusOr<EvalOutcome> Evaluate(const EvalRequest& request,
                                       EvalListener* listener);

 private:
  EvaluatorOptions options_;
  platform::ProcessLauncher* launcher_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_EVALUATOR_H_
