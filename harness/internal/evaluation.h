// One evaluation in progress: the class behind Evaluator::Evaluate and the
// helpers its stages share. Each stage is a member function defined in
// harness/stages/ (preflight, build, correctness, precision, benchmarks,
// disk_space); evaluator.cc runs them in order. Private to harness.
#ifndef DENSEGATE_HARNESS_INTERNAL_EVALUATION_H_
#define DENSEGATE_HARNESS_INTERNAL_EVALUATION_H_

#include "harness/evaluator.h"

#include <ftw.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "google/protobuf/util/time_util.h"
#include "harness/feedback.h"
#include "harness/identity/benchmark_inputs.h"
#include "harness/identity/generated_outputs.h"
#include "harness/parse/benchmark_output.h"
#include "harness/runner/kernel_check.h"
#include "harness/runner/precision_suite.h"
#include "harness/workspace/git_tree.h"
#include "harness/workspace/workspace.h"
#include "manifest/manifest.h"
#include "results/gate/gate.h"
#include "results/stats/paired.h"
#include "results/verdict/verdict.h"

namespace densegate::harness::internal {


using results::GateInput;
using results::GateResult;
using results::MetricSamples;

// A seed for a serving benchmark's prompts, from OS entropy: neither the
// candidate nor anything it built can know it before its run.
inline std::string PromptSeed() {
  std::random_device entropy;
  const uint64_t seed = (static_cast<uint64_t>(entropy()) << 32 | entropy()) >> 1;
  return std::to_string(seed);
}

// The upper median (the middle element; for an even count, the higher of
// the two middle ones); 0 for none.
inline double UpperMedian(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The live speedup of `m` after its first `pairs` pairs: the verdict's
// estimator (Hodges-Lehmann of the per-pair log-ratios) over those pairs, so
// that the progress line converges to the figure the verdict will show; 0
// when they cannot be paired yet.
inline double RunningSpeedup(const MetricSamples& m, int pairs) {
  const size_t n = std::min({static_cast<size_t>(pairs), m.baseline.size(), m.candidate.size()});
  absl::StatusOr<std::vector<double>> r = results::PairedLogRatios(
      absl::MakeConstSpan(m.baseline).first(n), absl::MakeConstSpan(m.candidate).first(n),
      m.direction == v1::LOWER_IS_BETTER ? results::Better::kLower : results::Better::kHigher);
  if (!r.ok()) return 0;
  return std::exp(results::HodgesLehmann(*r));
}

inline std::string LastLines(const std::string& text, int lines) {
  size_t start = text.size();
  // Step back over `lines` newlines (ignoring a trailing one).
  if (start > 0 && text[start - 1] == '\n') --start;
  for (int i = 0; i < lines && start > 0; ++i) {
    size_t nl = text.rfind('\n', start - 1);
    if (nl == std::string::npos) return text;
    start = nl;
  }
  return start == 0 ? text : text.substr(start + 1);
}

inline v1::Reason Reason(v1::ReasonCode code, v1::StageKind stage, std::string message,
                  std::string metric = "") {
  v1::Reason r;
  r.set_code(code);
  r.set_stage(stage);
  r.set_metric(std::move(metric));
  r.set_message(std::move(message));
  return r;
}

// A stage in progress: times itself and reports start and end.
class StageRun {
 public:
  StageRun(v1::StageKind kind, EvalListener* listener, std::vector<v1::Stage>* stages)
      : listener_(listener), stages_(stages), start_(absl::Now()) {
    stage_.set_kind(kind);
    stage_.set_status(v1::STAGE_RUNNING);
    *stage_.mutable_started_at() =
        google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(start_));
    if (listener_) listener_->OnStage(stage_);
  }
  v1::Stage& stage() { return stage_; }
  void End(v1::StageStatus status, std::string summary) {
    stage_.set_status(status);
    stage_.set_summary(std::move(summary));
    stage_.set_seconds(absl::ToDoubleSeconds(absl::Now() - start_));
    if (listener_) listener_->OnStage(stage_);
    stages_->push_back(stage_);
  }

 private:
  EvalListener* listener_;
  std::vector<v1::Stage>* stages_;
  absl::Time start_;
  v1::Stage stage_;
};

inline void Skip(v1::StageKind kind, const char* why, EvalListener* listener,
          std::vector<v1::Stage>* stages) {
  StageRun run(kind, nullptr, stages);
  run.End(v1::STAGE_SKIPPED, why);
  if (listener) listener->OnStage(stages->back());
}

class Evaluation {
 public:
  Evaluation(const EvaluatorOptions& options, platform::ProcessLauncher* launcher,
             const EvalRequest& request, EvalListener* listener)
      : options_(options), launcher_(launcher), git_(launcher), request_(request),
        listener_(listener) {}

  absl::StatusOr<EvalOutcome> Run();

 private:
  // Benchmark -> counter -> values per arm (baseline, candidate).
  using CounterSamples =
      std::map<std::string, std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>>;

  // Runs a shell command in an arm's worktree and sandbox; its output goes
  // to logs/<name>.{out,err}.
  absl::StatusOr<platform::ProcessResult> Shell(const std::string& command, bool candidate,
                                      const std::string& name, int timeout_s,
                                      platform::Confinement confinement);
  // An arm's sandbox. kBuild: the arm's shared one (builds and tests; its
  // worktree, home and caches writable). kMeasure: a fresh one of the
  // process's own that sees the arm's worktree and caches read-only, so a
  // runner or benchmark can keep nothing (hidden inputs included) for later.
  enum class Access { kBuild, kMeasure };
  platform::Confinement ArmSandbox(bool candidate, Access access) const;
  // A progress line of `stage` for whoever listens.
  void Say(v1::StageKind stage, const std::string& message) const {
    if (listener_ == nullptr) return;
    v1::Progress p;
    p.set_stage(stage);
    p.set_message(message);
    listener_->OnProgress(p);
  }
  // The host user an arm's sandbox runs as (EvaluatorOptions::sandbox_uid).
  uint32_t ArmUid(bool candidate) const {
    if (!candidate) return options_.sandbox_uid;
    uint32_t first = options_.candidate_uid != 0 ? options_.candidate_uid : options_.sandbox_uid + 1;
    return first + options_.slot;
  }
  // The users the arms' files go to, when the node can give them away.
  ArmUsers Users() const {
    if (geteuid() != 0) return {};
    return {ArmUid(false), ArmUid(true)};
  }
  // Kills whatever the candidate still runs (its shared sandbox); the
  // baseline's sandbox and Bazel server stay for the next evaluation.
  void EndCandidateSandbox() {
    if (!checkout_.candidate_dir.empty()) launcher_->EndSandbox(checkout_.candidate_dir);
  }
  const std::string& ArmDir(bool candidate) const {
    return candidate ? checkout_.candidate_dir : checkout_.baseline_dir;
  }
  std::string LogPath(const std::string& name) const { return log_dir_ + "/" + name; }

  // The stages, one file each in harness/stages/, run in this order by
  // Run() over this shared state. Each has the same contract (a Stage):
  // true to go on; false when the candidate failed it, a verdict (the
  // failure is in failures_); an error when the evaluation cannot be
  // carried out (InvalidArgument or NotFound: the request; anything else:
  // infrastructure).
  using Stage = absl::StatusOr<bool> (Evaluation::*)();
  absl::StatusOr<bool> Preflight();
  absl::StatusOr<bool> Build();
  absl::StatusOr<bool> Correctness();
  // The manifest's kernel checks, candidate against the baseline's
  // reference; part of the correctness stage.
  bool KernelChecks(StageRun* run, std::vector<std::string>* failed, int* passed);
  absl::StatusOr<bool> Precision();
  absl::StatusOr<bool> Benchmarks();

  // The benchmark stage (stages/benchmark*.cc), planned before its first
  // pair (benchmark_plan.cc):
  struct BenchmarkPlan {
    // The kernel checks with a metric in scope, manifest order; their
    // metrics follow the benchmarks' in metrics_.
    std::vector<const v1::KernelCheck*> timed_checks;
    // Benchmarks with no metric in the request's scope: not run.
    std::vector<std::string> out_of_scope;
    bool has_micro = false, has_e2e = false;
    // Every benchmark and timed check is out of scope or byte-identical.
    bool nothing_to_measure = false;
    // Benchmark -> runs per arm and pair (EndToEndRunsPerArm, for guards).
    std::map<std::string, int> runs_per_arm;
    // Which benchmarks' pairs were taken from request_.prior, for the summary.
    std::string prior_note;
    // The metric (index into metrics_) the per-pair progress line shows.
    size_t shown_metric = 0;
  };
  // Builds metrics_ and the plan's scope: which benchmarks and timed checks run.
  BenchmarkPlan ScopeBenchmarks();
  // The rest of the plan: unchanged inputs, runs per arm, prior samples.
  void PlanMeasurements(BenchmarkPlan* plan);
  // Marks the timed checks whose runner is byte-identical in both arms
  // unchanged; returns how many.
  size_t FindUnchangedTimedChecks(const std::vector<const v1::KernelCheck*>& checks);
  // The ABBA loop (benchmark_pairs.cc): pairs until the gate decides
  // (gate_). False when a run ended the stage (it recorded why).
  absl::StatusOr<bool> MeasurePairs(const BenchmarkPlan& plan, StageRun* stage);
  // Pair loop_.pair of every benchmark and timed check to measure.
  absl::StatusOr<bool> MeasurePair(const BenchmarkPlan& plan, StageRun* stage);
  // Benchmark `b`'s two arms of the pair, `runs` runs each; its metrics
  // start at metrics_[first_metric].
  absl::StatusOr<bool> MeasureBenchmark(const v1::BenchmarkSpec& b, int runs, size_t first_metric,
                                        const std::string& pair_seed, StageRun* stage);
  absl::StatusOr<bool> MeasureTimedCheck(const v1::KernelCheck& c, size_t metric_index,
                                         StageRun* stage);
  // Runs one arm's run `run` of the pair; false ends the stage.
  using RunArm = absl::FunctionRef<absl::StatusOr<bool>(bool candidate, const std::string& arm,
                                                        int run)>;
  // Both arms of one benchmark of the pair, measured again while
  // MeasureAgain says so.
  absl::StatusOr<bool> MeasureBothArms(const std::string& benchmark, int runs, RunArm run_arm);
  // What a benchmark's runs of a pair add, so that they can be taken back
  // (see EvaluatorOptions::machine_probe).
  struct PairUndo {
    std::vector<MetricSamples> metrics;
    size_t samples;
    CounterSamples counters;
    std::map<std::string, OutputComparison> agreement;
    int64_t next_sample_id;
  };
  // True when the runs since `before` (try `tries`, taking `run_seconds`)
  // are to be measured again: the probe moved more than max_probe_spread
  // within them and no re-measure bound is spent. Then they are taken back
  // and the host given time to settle (a backoff wait).
  bool MeasureAgain(const PairUndo& before, const std::vector<double>& probe_seconds,
                    const std::string& benchmark, int runs, int tries, double run_seconds);
  // Waits up to `seconds` for the host to settle: reads the probe once a
  // second and returns early once three reads in a row agree within
  // max_probe_spread. Returns the seconds waited.
  double WaitForSteadyHost(double seconds, double fastest, double slowest);
  // One machine probe read, recorded in host_.
  double ReadProbe();
  void SayUnsteady(const std::string& message) const;
  // One sample of `metric` in the pair loop_.pair, into both the gate's
  // values and samples_.
  void AddSample(MetricSamples* metric, bool candidate, double value, double wall_seconds,
                 double cpu_seconds);
  std::string BenchmarkSummary(const BenchmarkPlan& plan) const;
  // Compares the inputs of each benchmark with skip_when_identical; those
  // byte-identical in both arms go to unchanged_ and their metrics are
  // marked inputs_identical (never measured). Records each one's digests in
  // benchmark_inputs_. Call once metrics_ is built.
  void FindUnchangedBenchmarks();
  // The metrics of benchmark `b` (manifest order) from one run (`run` of
  // pair `pair` in arm `arm`, logged as `name`), after checking what it
  // generated (OutputCheck) and, for a Google Benchmark, that its times are
  // real. Empty when the run failed: the candidate's failure or, in the
  // baseline's arm, the infrastructure error is recorded and `stage` ended.
  std::vector<double> MeasuredValues(const v1::BenchmarkSpec& b, bool candidate,
                                     const std::string& arm, int pair, int run,
                                     const std::string& pair_seed, const std::string& name,
                                     const platform::ProcessResult& r, StageRun* stage);
  // Records what one arm of benchmark `b` generated in run `run` of pair
  // `pair`; once both arms' same run has, compares them (OutputCheck) and
  // returns why the candidate's are not acceptable, or nullopt.
  std::optional<std::string> OutputMismatch(const v1::BenchmarkSpec& b, bool candidate, int pair,
                                            int run, GeneratedTokens tokens);
  // Under a declared precision change: why a benchmark's agreement pooled
  // over its pairs is below its OutputCheck's bound, or nullopt.
  std::optional<std::string> PooledOutputMismatch() const;
  // For a re-measure (request_.prior): each benchmark to measure that read
  // the prior's inputs arm for arm gets the prior's complete leading pairs
  // of its metrics in metrics_ and samples_ (new ids from next_sample_id_)
  // and their count in carried_pairs_; the others are measured from pair 0.
  // *note says which.
  void TakePriorSamples(std::string* note);
  // In the request's metric scope (results::InMetricScope).
  bool InScope(const std::string& metric) const {
    return results::InMetricScope(manifest_, request_.metric_scope, metric);
  }
  bool InScope(const v1::BenchmarkSpec& b) const {
    return std::any_of(b.metrics().begin(), b.metrics().end(),
                       [&](const v1::MetricSpec& m) { return InScope(m.name()); });
  }
  KernelCheckSetup CheckSetup(bool candidate, const std::string& log_name) const;
  // ResourceExhausted when the workspace's filesystem is below
  // options_.min_free_bytes or, after a failed stage (`after_failure`), a
  // log of this evaluation reports ENOSPC: a full disk is the node's
  // problem, never the candidate's.
  absl::Status CheckDiskSpace(bool after_failure) const;
  // Bytes the files under `dirs` take (symbolic links not followed, each
  // inode once).
  static int64_t DiskUsage(const std::vector<std::string>& dirs);
  // The candidate's and the baseline's arm: worktree, home and build cache.
  std::vector<std::string> ArmDirs(bool candidate) const;
  // Why the candidate's arm is to blame for the disk (over its quota, or
  // bigger than the baseline's while the filesystem is below
  // min_free_bytes), or empty.
  std::string CandidateDiskBlame(bool disk_low);
  // The workspace's filesystem below options_.min_free_bytes.
  bool DiskLow() const;
  // ProcessSpec::watch for the candidate's build and test commands.
  std::function<std::string()> CandidateDiskWatch();
  // Per-arm medians of the benchmarks' counters into counters_.
  void SummarizeCounters();
  // One unmeasured traced run per arm of each benchmark with a trace_arg,
  // into the bundle's traces/; returns what could not be traced.
  std::string Traces();

  const EvaluatorOptions& options_;
  platform::ProcessLauncher* launcher_;
  platform::Git git_;
  const EvalRequest& request_;
  EvalListener* listener_;

  std::string log_dir_;
  Checkout checkout_;
  v1::Manifest manifest_;
  std::string manifest_hash_;
  std::vector<v1::Stage> stages_;
  std::vector<v1::Reason> failures_;
  absl::Status infrastructure_;
  std::vector<v1::Sample> samples_;
  std::vector<MetricSamples> metrics_;
  // Set when CandidateDiskWatch stopped a command: the disk is the
  // candidate's doing, not the node's.
  bool candidate_filled_disk_ = false;
  // OutputCheck: what each arm (0 baseline, 1 candidate) of a benchmark
  // generated in a run of a pair, by (benchmark, pair, run), and per benchmark the
  // comparisons of all its pairs pooled.
  std::map<std::tuple<std::string, int, int>, GeneratedTokens> generated_[2];
  std::map<std::string, OutputComparison> agreement_;
  // Benchmarks and timed kernel checks not measured: their inputs (a
  // check: its runner) were identical in both arms.
  std::set<std::string> unchanged_;
  // Input digests of the benchmarks that skip when unchanged, per arm.
  std::vector<v1::BenchmarkInputs> benchmark_inputs_;
  // What the machine probe saw during the benchmark pairs.
  v1::HostSteadiness host_;
  // Benchmark -> its leading pairs taken from request_.prior, not measured.
  std::map<std::string, int> carried_pairs_;
  CounterSamples counter_samples_;
  std::vector<CounterMedians> counters_;
  GateResult gate_;
  GateInput gate_input_;
  // The ABBA loop's position and its re-measure bookkeeping.
  struct PairLoop {
    int pair = 0;    // The pair being measured.
    int target = 0;  // Pairs until the gate's next look.
    // Pairs measured again because the machine probe moved within them,
    // and pairs kept although it did (once a re-measure bound was spent).
    int remeasured = 0;
    int kept_unsteady = 0;
    // Unsteady measurements since the last steady one, and seconds of
    // dropped runs and of waits for the host to settle.
    int unsteady_in_a_row = 0;
    double unsteady_seconds = 0;
  } loop_;
  int64_t next_sample_id_ = 1;
};

}  // namespace densegate::harness::internal

#endif  // DENSEGATE_HARNESS_INTERNAL_EVALUATION_H_
