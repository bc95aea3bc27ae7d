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
#include "harness/workspace/workspace.h"
#include "proto/manifest.h"
#include "results/gate/gate.h"
#include "results/stats/paired.h"
#include "results/verdict/verdict.h"

namespace densegate::harness {
namespace {

using results::GateInput;
using results::GateResult;
using results::MetricSamples;

// A seed for a serving benchmark's prompts, from OS entropy: neither the
// candidate nor anything it built can know it before its run.
std::string PromptSeed() {
  std::random_device entropy;
  const uint64_t seed = (static_cast<uint64_t>(entropy()) << 32 | entropy()) >> 1;
  return std::to_string(seed);
}

// The upper median (the middle element; for an even count, the higher of
// the two middle ones); 0 for none.
double UpperMedian(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The live speedup of `m` after its first `pairs` pairs: the verdict's
// estimator (Hodges-Lehmann of the per-pair log-ratios) over those pairs, so
// that the progress line converges to the figure the verdict will show; 0
// when they cannot be paired yet.
double RunningSpeedup(const MetricSamples& m, int pairs) {
  const size_t n = std::min({static_cast<size_t>(pairs), m.baseline.size(), m.candidate.size()});
  absl::StatusOr<std::vector<double>> r = results::PairedLogRatios(
      absl::MakeConstSpan(m.baseline).first(n), absl::MakeConstSpan(m.candidate).first(n),
      m.direction == v1::LOWER_IS_BETTER ? results::Better::kLower : results::Better::kHigher);
  if (!r.ok()) return 0;
  return std::exp(results::HodgesLehmann(*r));
}

std::string LastLines(const std::string& text, int lines) {
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

v1::Reason Reason(v1::ReasonCode code, v1::StageKind stage, std::string message,
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

void Skip(v1::StageKind kind, const char* why, EvalListener* listener,
          std::vector<v1::Stage>* stages) {
  StageRun run(kind, nullptr, stages);
  run.End(v1::STAGE_SKIPPED, why);
  if (listener) listener->OnStage(stages->back());
}

class Evaluation {
 public:
  Evaluation(const EvaluatorOptions& options, ProcessLauncher* launcher,
             const EvalRequest& request, EvalListener* listener)
      : options_(options), launcher_(launcher), git_(launcher), request_(request),
        listener_(listener) {}

  absl::StatusOr<EvalOutcome> Run();

 private:
  // Runs a shell command in an arm's worktree and sandbox; its output goes
  // to logs/<name>.{out,err}.
  absl::StatusOr<ProcessResult> Shell(const std::string& command, bool candidate,
                                      const std::string& name, int timeout_s,
                                      Confinement confinement);
  // An arm's sandbox. kBuild: the arm's shared one (builds and tests; its
  // worktree, home and caches writable). kMeasure: a fresh one of the
  // process's own that sees the arm's worktree and caches read-only, so a
  // runner or benchmark can keep nothing (hidden inputs included) for later.
  enum class Access { kBuild, kMeasure };
  Confinement ArmSandbox(bool candidate, Access access) const;
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

  absl::StatusOr<bool> Preflight();
  absl::StatusOr<bool> Build();
  absl::StatusOr<bool> Correctness();
  // The manifest's kernel checks, candidate against the baseline's
  // reference; part of the correctness stage.
  bool KernelChecks(StageRun* run, std::vector<std::string>* failed, int* passed);
  absl::StatusOr<bool> Precision();
  absl::StatusOr<bool> Benchmarks();
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
                                     const ProcessResult& r, StageRun* stage);
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
  // of its metrics in metrics_ and samples_ (new ids from *next_sample_id)
  // and their count in carried_pairs_; the others are measured from pair 0.
  // *note says which.
  void TakePriorSamples(int64_t* next_sample_id, std::string* note);
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
  ProcessLauncher* launcher_;
  Git git_;
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
  // Benchmark -> counter -> values per arm (baseline, candidate).
  std::map<std::string, std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>>
      counter_samples_;
  std::vector<CounterMedians> counters_;
  GateResult gate_;
  GateInput gate_input_;
};

Confinement Evaluation::ArmSandbox(bool candidate, Access access) const {
  const ArmArea& area = candidate ? checkout_.candidate : checkout_.baseline;
  Confinement c;
  c.uid = ArmUid(candidate);
  c.gid = c.uid;
  c.max_processes = options_.arm_max_processes;
  if (access == Access::kBuild) {
    c.sandbox = ArmDir(candidate);
    c.writable = area.writable;
    c.read_only = area.read_only;
  } else {
    c.read_only = area.writable;
  }
  return c;
}

absl::StatusOr<ProcessResult> Evaluation::Shell(const std::string& command, bool candidate,
                                                const std::string& name, int timeout_s,
                                                Confinement confinement) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.working_dir = ArmDir(candidate);
  spec.env["HOME"] = (candidate ? checkout_.candidate : checkout_.baseline).home;
  spec.confinement = std::move(confinement);
  spec.stdout_path = LogPath(name + ".out");
  spec.stderr_path = LogPath(name + ".err");
  spec.wall_timeout = absl::Seconds(timeout_s > 0 ? timeout_s : 1800);
  spec.limits.file_size_bytes = int64_t{8} << 30;
  spec.cpus = options_.cpus;
  // The candidate's build and test commands (the ones in its shared
  // sandbox, which write); never a measured run.
  if (candidate && !spec.confinement->sandbox.empty()) spec.watch = CandidateDiskWatch();
  return launcher_->Run(spec);
}

absl::StatusOr<bool> Evaluation::Preflight() {
  StageRun run(v1::PREFLIGHT, listener_, &stages_);
  absl::StatusOr<Checkout> checkout =
      Workspace(options_.workspace_root, options_.slot, &git_, Users())
          .Prepare(request_.repo, request_.baseline_ref, request_.candidate_ref);
  if (!checkout.ok()) {
    run.End(v1::STAGE_ERROR, std::string(checkout.status().message()));
    return checkout.status();
  }
  checkout_ = *checkout;
  absl::StatusOr<std::string> text =
      git_.ShowFile(checkout_.mirror, checkout_.baseline_sha, kManifestFileName);
  if (!text.ok()) {
    run.End(v1::STAGE_ERROR, "no densegate.json in the baseline commit");
    return absl::NotFoundError(absl::StrFormat(
        "the baseline commit %s of %s has no %s at its root: add a manifest (see "
        "README, \"The manifest\") to the baseline first",
        checkout_.baseline_sha.substr(0, 12), request_.repo, kManifestFileName));
  }
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> manifest = ParseManifest(*text, &errors);
  if (manifest.ok()) {
    absl::StatusOr<std::vector<std::string>> files =
        git_.ListFiles(checkout_.mirror, checkout_.baseline_sha);
    if (!files.ok()) return files.status();
    errors = ValidateManifest(*manifest, GitTree(*files));
  }
  if (!errors.empty()) {
    std::vector<std::string> lines;
    for (const auto& e : errors) lines.push_back(e.ToString());
    run.End(v1::STAGE_ERROR, "invalid manifest in the baseline");
    return absl::InvalidArgumentError(absl::StrFormat(
        "the baseline's %s is invalid; fix it there first:\n  %s", kManifestFileName,
        absl::StrJoin(lines, "\n  ")));
  }
  manifest_ = *manifest;
  manifest_hash_ = absl::StrFormat("%016x", std::hash<std::string>{}(*text));
  absl::StatusOr<results::GateParameters> params =
      results::ResolveGateParameters(manifest_.gate());
  if (!params.ok()) return params.status();
  // Everything the gate needs besides the samples is known from here on,
  // for both the early-exit and the benchmark paths.
  gate_input_.policy = request_.policy == v1::POLICY_UNSPECIFIED ? v1::GAIN : request_.policy;
  gate_input_.params = results::PartParameters(*params, request_.error_share,
                                               !request_.continues.empty());
  gate_input_.claims = request_.claims;
  gate_input_.seed = request_.seed;
  if (absl::Status s =
          CheckMetricScope(manifest_, request_.metric_scope, request_.claims, gate_input_.policy);
      !s.ok()) {
    run.End(v1::STAGE_ERROR, "invalid metric scope");
    return s;
  }

  absl::StatusOr<std::vector<std::string>> changed =
      git_.ChangedPaths(checkout_.mirror, checkout_.baseline_sha, checkout_.candidate_sha);
  if (!changed.ok()) return changed.status();
  std::vector<std::string> hits;
  for (const std::string& path : *changed) {
    for (const std::string& p : manifest_.protected_paths()) {
      if (IsUnderPath(path, p)) {
        hits.push_back(path);
        break;
      }
    }
  }
  if (!hits.empty() && !request_.protected_path_override) {
    std::string message = absl::StrFormat(
        "the candidate changes protected paths: %s (protected by the baseline's "
        "manifest; an admin override is needed)",
        absl::StrJoin(hits, ", "));
    failures_.push_back(Reason(v1::PROTECTED_PATH, v1::PREFLIGHT, message));
    run.End(v1::STAGE_FAILED, message);
    return false;
  }
  run.End(v1::STAGE_PASSED,
          hits.empty() ? absl::StrFormat("%d files changed, none protected", changed->size())
                       : absl::StrFormat("protected paths changed under override (%s): %s",
                                         request_.override_reason, absl::StrJoin(hits, ", ")));
  return true;
}

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
    absl::StatusOr<ProcessResult> r = Shell(build.command(), candidate, "build-" + arm,
                                            build.timeout_s(), ArmSandbox(candidate, Access::kBuild));
    if (!r.ok()) return r.status();
    if (!r->ok()) {
      std::string tail = LastLines(ReadOutputFile(LogPath("build-" + arm + ".err")), 8);
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

// JUnit files named by a correctness suite's results.
std::vector<std::string> ResultFiles(const v1::CorrectnessSuite& suite, const std::string& dir) {
  std::string root = suite.results() == v1::BAZEL_TEST ? dir + "/bazel-testlogs"
                                                       : dir + "/" + suite.results_path();
  // -H: follow the named link (bazel-testlogs) only, never a link the
  // candidate's tests left inside it.
  std::string list = absl::StrFormat("find -H '%s' -name '*.xml' -type f 2>/dev/null > '%s.list'",
                                     root, root);
  std::vector<std::string> files;
  if (std::system(list.c_str()) != 0) return files;
  std::ifstream in(root + ".list");
  for (std::string line; std::getline(in, line);) files.push_back(line);
  std::remove((root + ".list").c_str());
  return files;
}

KernelCheckSetup Evaluation::CheckSetup(bool candidate, const std::string& log_name) const {
  KernelCheckSetup setup;
  setup.launcher = launcher_;
  setup.reference_dir = checkout_.baseline_dir;
  setup.subject_dir = candidate ? checkout_.candidate_dir : checkout_.baseline_dir;
  setup.reference_confinement = ArmSandbox(false, Access::kMeasure);
  setup.subject_confinement = ArmSandbox(candidate, Access::kMeasure);
  setup.log_prefix = LogPath(log_name);
  setup.cpus = options_.cpus;
  setup.salt = request_.seed;
  return setup;
}

bool Evaluation::KernelChecks(StageRun* run, std::vector<std::string>* failed, int* passed) {
  for (const v1::KernelCheck& check : manifest_.kernel_checks()) {
    Say(v1::CORRECTNESS, "kernel check " + check.name());
    KernelCheckReport r = RunKernelCheck(check, CheckSetup(true, "check-" + check.name()));
    v1::TestCaseResult* t = run->stage().add_tests();
    t->set_suite("kernel_checks");
    t->set_name(check.name());
    t->set_passed(r.outcome == KernelCheckReport::Outcome::kPassed);
    t->set_message(r.message);
    switch (r.outcome) {
      case KernelCheckReport::Outcome::kPassed:
        ++*passed;
        break;
      case KernelCheckReport::Outcome::kIncorrect:
        failed->push_back(absl::StrCat("kernel check ", check.name(), ": ", r.message));
        break;
      case KernelCheckReport::Outcome::kGaming: {
        std::string message = absl::StrCat("kernel check ", check.name(), ": ", r.message);
        failures_.push_back(Reason(v1::GAMING, v1::CORRECTNESS, message));
        run->End(v1::STAGE_FAILED, message);
        return false;
      }
      case KernelCheckReport::Outcome::kInfrastructure:
        infrastructure_ = absl::FailedPreconditionError(
            absl::StrCat("kernel check ", check.name(), ": ", r.message));
        run->End(v1::STAGE_ERROR, r.message);
        return false;
    }
  }
  return true;
}

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

absl::StatusOr<bool> Evaluation::Correctness() {
  if (manifest_.correctness().empty() && manifest_.kernel_checks().empty()) {
    Skip(v1::CORRECTNESS, "no correctness suites or kernel checks declared", listener_, &stages_);
    return true;
  }
  StageRun run(v1::CORRECTNESS, listener_, &stages_);
  int passed = 0;
  std::vector<std::string> failed;
  if (!KernelChecks(&run, &failed, &passed)) return false;
  // A kernel that computes wrong results decides the stage: the (slower)
  // test suites would only add detail to a rejection.
  static const google::protobuf::RepeatedPtrField<v1::CorrectnessSuite> kNone;
  // Each suite runs on the baseline first, in its arm: what it builds, and
  // the results of the tests whose inputs the candidate left alone, go to
  // the trusted build cache, where the candidate's run finds them (nothing a
  // candidate builds or runs is kept for another evaluation, so without
  // this every candidate built and ran all of its suites' tests from
  // scratch). How the baseline fares is told, and decides nothing.
  std::vector<std::string> baseline_failing;
  for (const v1::CorrectnessSuite& suite : failed.empty() ? manifest_.correctness() : kNone) {
    Say(v1::CORRECTNESS, absl::StrFormat("suite %s on the baseline", suite.name()));
    absl::StatusOr<ProcessResult> r =
        Shell(suite.command(), false, "correctness-baseline-" + suite.name(), suite.timeout_s(),
              ArmSandbox(false, Access::kBuild));
    if (!r.ok()) return r.status();
    if (!r->ok()) baseline_failing.push_back(suite.name());
  }
  const std::string baseline_note =
      baseline_failing.empty()
          ? ""
          : absl::StrFormat(" (the baseline fails %s too)", absl::StrJoin(baseline_failing, ", "));
  for (const v1::CorrectnessSuite& suite : failed.empty() ? manifest_.correctness() : kNone) {
    Say(v1::CORRECTNESS, absl::StrFormat("suite %s on the candidate", suite.name()));
    std::string name = "correctness-" + suite.name();
    absl::StatusOr<ProcessResult> r = Shell(suite.command(), true, name, suite.timeout_s(),
                                            ArmSandbox(true, Access::kBuild));
    if (!r.ok()) return r.status();
    bool cases_failed = false;
    if (suite.results() == v1::JUNIT_XML || suite.results() == v1::BAZEL_TEST) {
      for (const std::string& file : ResultFiles(suite, checkout_.candidate_dir)) {
        absl::StatusOr<std::vector<v1::TestCaseResult>> cases = ParseJUnitXml(ReadOutputFile(file));
        if (!cases.ok()) continue;
        for (v1::TestCaseResult& c : *cases) {
          if (c.passed()) {
            ++passed;
          } else {
            cases_failed = true;
            failed.push_back(absl::StrCat(c.suite(), ".", c.name(),
                                          c.message().empty() ? "" : ": " + c.message()));
          }
          *run.stage().add_tests() = std::move(c);
        }
      }
    }
    if (!r->ok() && !cases_failed) {
      failed.push_back(absl::StrFormat("suite %s: %s\n%s", suite.name(), r->Describe(),
                                       LastLines(ReadOutputFile(LogPath(name + ".err")), 8)));
    } else if (r->ok() && suite.results() == v1::EXIT_CODE) {
      ++passed;
    }
  }
  if (!failed.empty()) {
    // One line per failure, the first few only: the logs hold the rest.
    std::vector<std::string> lines;
    for (size_t i = 0; i < failed.size() && i < 5; ++i) {
      std::string first = failed[i].substr(0, failed[i].find('\n'));
      lines.push_back(first.size() > 240 ? first.substr(0, 240) + "..." : first);
    }
    if (failed.size() > lines.size()) {
      lines.push_back(absl::StrFormat("and %d more (see the correctness logs)",
                                      failed.size() - lines.size()));
    }
    std::string message = absl::StrFormat("%d failing: %s%s", failed.size(),
                                          absl::StrJoin(lines, "; "), baseline_note);
    failures_.push_back(Reason(v1::CORRECTNESS_FAILED, v1::CORRECTNESS, message));
    run.End(v1::STAGE_FAILED, message);
    return false;
  }
  run.End(v1::STAGE_PASSED, absl::StrFormat("%d passed%s", passed, baseline_note));
  return true;
}

absl::StatusOr<bool> Evaluation::Benchmarks() {
  std::vector<const v1::KernelCheck*> timed_checks;
  for (const v1::KernelCheck& c : manifest_.kernel_checks()) {
    if (!c.metric().empty() && InScope(c.metric())) timed_checks.push_back(&c);
  }
  if (manifest_.benchmarks().empty() && timed_checks.empty()) {
    Skip(v1::MICROBENCHMARK, "no benchmarks declared", listener_, &stages_);
    Skip(v1::END_TO_END, "no benchmarks declared", listener_, &stages_);
    return true;
  }
  // Every benchmark's metrics (indexed by (benchmark, metric) below), then
  // the timed checks' in scope, in timed_checks' order.
  std::set<std::string> timed_out_of_scope;
  for (const v1::KernelCheck& c : manifest_.kernel_checks()) {
    if (!c.metric().empty() && !InScope(c.metric())) timed_out_of_scope.insert(c.metric());
  }
  for (MetricSamples& s : results::ManifestMetrics(manifest_)) {
    if (timed_out_of_scope.count(s.name) == 0) metrics_.push_back(std::move(s));
  }
  bool has_micro = !timed_checks.empty(), has_e2e = false;
  // Benchmarks producing no metric of the request's scope are not run.
  std::vector<std::string> out_of_scope;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (!InScope(b)) {
      out_of_scope.push_back(b.name());
      continue;
    }
    (b.kind() == v1::GOOGLE_BENCHMARK ? has_micro : has_e2e) = true;
  }
  // Both kinds run interleaved in one ABBA loop so that the gate sees every
  // metric at each look; the loop is recorded under the first stage kind.
  StageRun micro(has_micro ? v1::MICROBENCHMARK : v1::END_TO_END, listener_, &stages_);
  FindUnchangedBenchmarks();
  const bool benchmarks_unchanged =
      unchanged_.size() + out_of_scope.size() == static_cast<size_t>(manifest_.benchmarks_size());
  // A timed check whose runner (with its runfiles) the candidate left
  // byte-identical would time the baseline's program twice on the harness's
  // inputs: its metric is exactly unchanged, as a benchmark's is.
  size_t unchanged_checks = 0;
  for (size_t i = 0, index = metrics_.size() - timed_checks.size(); i < timed_checks.size();
       ++i, ++index) {
    v1::BenchmarkSpec runner;
    runner.set_command(timed_checks[i]->runner());
    const absl::StatusOr<std::string> baseline =
        BenchmarkInputsDigest(runner, checkout_.baseline_dir);
    const absl::StatusOr<std::string> candidate =
        BenchmarkInputsDigest(runner, checkout_.candidate_dir);
    if (!baseline.ok() || !candidate.ok() || *baseline != *candidate) continue;
    metrics_[index].inputs_identical = true;
    unchanged_.insert(timed_checks[i]->name());
    ++unchanged_checks;
    Say(v1::MICROBENCHMARK,
        absl::StrFormat("%s: not measured, its runner is byte-identical in both arms",
                        timed_checks[i]->name()));
  }
  const bool nothing_to_measure = benchmarks_unchanged && unchanged_checks == timed_checks.size();
  // A noisy node measures its end-to-end samples more precisely, never
  // with wider bounds (EndToEndRunsPerArm). The extra runs are for guards:
  // a benchmark whose every metric carries a claim is decided by its
  // claims, and runs once.
  const int runs_per_arm = EndToEndRunsPerArm(request_.node_noise);
  std::set<std::string> claimed;
  for (const v1::Claim& c : request_.claims) claimed.insert(c.metric());
  auto runs_of = [&](const v1::BenchmarkSpec& b) {
    if (b.kind() != v1::JSON_COMMAND) return 1;
    for (const v1::MetricSpec& m : b.metrics()) {
      if (claimed.count(m.name()) == 0) return runs_per_arm;
    }
    return 1;
  };
  std::vector<std::string> repeated;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (InScope(b) && !unchanged_.count(b.name()) && runs_of(b) > 1) repeated.push_back(b.name());
  }
  host_.set_node_noise(request_.node_noise);
  host_.set_end_to_end_runs_per_arm(repeated.empty() ? 1 : runs_per_arm);
  if (!repeated.empty()) {
    Say(v1::END_TO_END,
        absl::StrFormat("node calibrated at %.2f%% noise (quiet: %.1f%%): %s runs %d times "
                        "per arm and pair, its sample their geometric mean",
                        100 * request_.node_noise, 100 * kQuietNodeNoise,
                        absl::StrJoin(repeated, ", "), runs_per_arm));
  }
  int pairs = 0;
  int target = nothing_to_measure ? 0 : results::PlanLooks(gate_input_.params).pairs.front();
  int64_t next_sample_id = 1;
  std::string prior_note;
  if (!nothing_to_measure) TakePriorSamples(&next_sample_id, &prior_note);
  if (!nothing_to_measure && request_.error_share > 0 && request_.error_share < 1) {
    Say(v1::MICROBENCHMARK,
        request_.continues.empty()
            ? absl::StrFormat("spends %.0f%% of the manifest's error budget; the rest is kept "
                              "for a second part should noise leave it inconclusive",
                              100 * request_.error_share)
            : absl::StrFormat("second part of %s: spends the %.0f%% of the error budget it "
                              "kept, looks at %d to %d pairs, pooled with its pairs",
                              request_.continues, 100 * request_.error_share,
                              gate_input_.params.min_pairs, gate_input_.params.max_pairs));
  }
  // The metric the per-pair progress line shows: the first one measured,
  // preferring one whose pairs are not taken from a prior.
  std::vector<bool> taken_from_prior(metrics_.size(), false);
  for (size_t b = 0, i = 0; b < static_cast<size_t>(manifest_.benchmarks_size()); ++b) {
    const v1::BenchmarkSpec& spec = manifest_.benchmarks(b);
    for (int j = 0; j < spec.metrics_size(); ++j, ++i) {
      taken_from_prior[i] = carried_pairs_.count(spec.name()) > 0;
    }
  }
  auto measured_metric = [&](bool here) {
    for (size_t i = 0; i < metrics_.size(); ++i) {
      const MetricSamples& m = metrics_[i];
      if (!m.inputs_identical && InScope(m.name) && !(here && taken_from_prior[i])) {
        return metrics_.begin() + i;
      }
    }
    return metrics_.end();
  };
  const auto shown = measured_metric(true) != metrics_.end() ? measured_metric(true)
                                                              : measured_metric(false);
  // Pairs measured again because the machine probe moved during them, and
  // pairs kept although it did (once a re-measure bound was spent).
  int remeasured = 0, kept_unsteady = 0;
  // Seconds of dropped runs and of waits for the host to settle, and the
  // unsteady measurements since the last steady one.
  double unsteady_seconds = 0;
  int unsteady_in_a_row = 0;
  MachineProbe* probe = options_.machine_probe;
  if (probe != nullptr) probe->Seconds();  // Warms its array; not used.
  auto read_probe = [&] {
    const double seconds = probe->Seconds();
    const double ms = 1e3 * seconds;
    if (host_.probe_reads() == 0 || ms < host_.probe_fastest_ms()) host_.set_probe_fastest_ms(ms);
    host_.set_probe_slowest_ms(std::max(host_.probe_slowest_ms(), ms));
    host_.set_probe_reads(host_.probe_reads() + 1);
    return seconds;
  };
  auto say_unsteady = [&](const std::string& message) {
    if (!listener_) return;
    v1::Progress p;
    p.set_stage(v1::MICROBENCHMARK);
    p.set_repetition(pairs);
    p.set_repetitions_planned(target);
    p.set_message(message);
    listener_->OnProgress(p);
  };
  // Waits up to `seconds` for the host to settle: reads the probe once a
  // second and returns early once three reads in a row agree within
  // max_probe_spread. Returns the seconds waited.
  auto wait_for_steady_host = [&](double seconds, double fastest, double slowest) {
    say_unsteady(absl::StrFormat(
        "host unsteady: waiting up to %.0f s, probe %.1f-%.1f ms vs %.1f ms calm", seconds,
        1e3 * fastest, 1e3 * slowest, host_.probe_fastest_ms()));
    std::deque<double> last;
    double waited = 0;
    while (waited < seconds && !(listener_ != nullptr && listener_->Cancelled())) {
      probe->Pause(absl::Seconds(1));
      waited += 1;
      last.push_back(read_probe());
      if (last.size() > 3) last.pop_front();
      if (last.size() == 3 &&
          *std::max_element(last.begin(), last.end()) <=
              *std::min_element(last.begin(), last.end()) * options_.max_probe_spread) {
        break;
      }
    }
    return waited;
  };
  // What a benchmark's two runs of a pair add, so that they can be taken
  // back (see EvaluatorOptions::machine_probe).
  struct Added {
    std::vector<MetricSamples> metrics;
    size_t samples;
    decltype(counter_samples_) counters;
    decltype(agreement_) agreement;
    int64_t next_id;
  };
  auto before_runs = [&] {
    return Added{metrics_, samples_.size(), counter_samples_, agreement_, next_sample_id};
  };
  // True when the runs of pair `pairs` since `before` (`tries` of them so
  // far, taking `run_seconds`) are to be measured again: the probe moved
  // more than max_probe_spread within them and no re-measure bound is
  // spent. Then they are taken back, and the host given time to settle.
  auto measure_again = [&](const Added& before, const std::vector<double>& probe_seconds,
                           const std::string& benchmark, int tries, double run_seconds) {
    if (probe_seconds.empty()) return false;
    const auto [fastest, slowest] = std::minmax_element(probe_seconds.begin(), probe_seconds.end());
    if (*slowest <= *fastest * options_.max_probe_spread) {
      unsteady_in_a_row = 0;
      return false;
    }
    ++unsteady_in_a_row;
    if (remeasured >= gate_input_.params.max_pairs || tries > options_.max_remeasures_in_a_row ||
        unsteady_seconds + run_seconds > options_.max_unsteady_seconds) {
      ++kept_unsteady;
      host_.set_pairs_kept_unsteady(kept_unsteady);
      return false;
    }
    ++remeasured;
    host_.set_pairs_measured_again(remeasured);
    unsteady_seconds += run_seconds;
    say_unsteady(absl::StrFormat(
        "%s, pair %d measured again: the machine probe took %.2f-%.2f ms within it", benchmark,
        pairs + 1, 1e3 * *fastest, 1e3 * *slowest));
    metrics_ = before.metrics;
    samples_.resize(before.samples);
    counter_samples_ = before.counters;
    // Both arms' outputs of the pair are generated again, and compared once.
    agreement_ = before.agreement;
    for (auto& arm : generated_) {
      for (int run = 0; run < runs_per_arm; ++run) arm.erase({benchmark, pairs, run});
    }
    next_sample_id = before.next_id;
    // Backoff: 5 s after the first unsteady measurement, doubling with each
    // one in a row (across pairs), capped at a minute and at what is left
    // of the evaluation's unsteady budget.
    const double wait = std::min(
        {options_.first_unsteady_wait_seconds * std::pow(2.0, std::min(unsteady_in_a_row, 8) - 1),
         60.0, options_.max_unsteady_seconds - unsteady_seconds});
    if (wait >= 1) {
      const double waited = wait_for_steady_host(wait, *fastest, *slowest);
      unsteady_seconds += waited;
      host_.set_seconds_waited(host_.seconds_waited() + waited);
    }
    return true;
  };
  // Runs `run_arm` for both arms of one benchmark of pair `pairs` (ABBA: even
  // pairs the baseline first), back to back under one hold of the host lock
  // (the machine to themselves), so that a slow spell of the host lasting
  // seconds meets both arms, not one (arm by arm, with two nodes taking
  // turns, they were ~10 s apart). The probe runs before each arm and after
  // both; the two are measured again while measure_again says so. run_arm
  // returns false to end the stage (it recorded why).
  auto measure_both_arms =
      [&](const std::string& benchmark,
          absl::FunctionRef<absl::StatusOr<bool>(bool candidate, const std::string& arm)> run_arm)
      -> absl::StatusOr<bool> {
    for (int tries = 1;; ++tries) {
      const Added before = before_runs();
      const absl::Time started = absl::Now();
      std::vector<double> probe_seconds;
      {
        HostLock::Guard measuring(options_.host_lock, HostLock::Mode::kExclusive);
        for (int turn = 0; turn < 2; ++turn) {
          const bool candidate = (pairs % 2 == 0) == (turn == 1);
          if (probe != nullptr) probe_seconds.push_back(read_probe());
          absl::StatusOr<bool> ok = run_arm(candidate, candidate ? "candidate" : "baseline");
          if (!ok.ok() || !*ok) return ok;
        }
        if (probe != nullptr) probe_seconds.push_back(read_probe());
      }
      if (!measure_again(before, probe_seconds, benchmark, tries,
                         absl::ToDoubleSeconds(absl::Now() - started))) {
        return true;
      }
    }
  };
  while (true) {
    for (; pairs < target; ++pairs) {
      if (listener_ != nullptr && listener_->Cancelled()) {
        infrastructure_ = absl::CancelledError("the evaluation was cancelled");
        micro.End(v1::STAGE_CANCELLED, "cancelled");
        return false;
      }
      size_t first_metric = 0;
      // The prompts of this pair's serving runs: drawn here, the same for
      // both arms, unknown to any build (OutputCheck).
      const std::string pair_seed = PromptSeed();
      for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
        const auto carried = carried_pairs_.find(b.name());
        if (unchanged_.count(b.name()) || !InScope(b) ||
            (carried != carried_pairs_.end() && pairs < carried->second)) {
          first_metric += b.metrics_size();
          continue;
        }
        absl::StatusOr<bool> measured = measure_both_arms(
            b.name(), [&](bool candidate, const std::string& arm) -> absl::StatusOr<bool> {
              size_t metric_index = first_metric;
              std::string command =
                  absl::StrReplaceAll(b.command(), {{kSeedPlaceholder, pair_seed}});
              if (b.kind() == v1::GOOGLE_BENCHMARK) command += " --benchmark_format=json";
              const int runs = runs_of(b);
              // Per metric, the log of each run's value: the sample is their
              // geometric mean (EndToEndRunsPerArm).
              std::vector<double> log_sum(b.metrics_size(), 0);
              double wall_seconds = 0, cpu_seconds = 0;
              for (int run = 0; run < runs; ++run) {
                std::string name = absl::StrFormat("bench-%s-%s-%d", b.name(), arm, pairs);
                if (run > 0) absl::StrAppend(&name, "-run", run + 1);
                absl::StatusOr<ProcessResult> r = Shell(command, candidate, name, b.timeout_s(),
                                                        ArmSandbox(candidate, Access::kMeasure));
                if (!r.ok()) return r.status();
                wall_seconds += r->wall_seconds;
                cpu_seconds += r->user_seconds + r->system_seconds;
                const std::vector<double> values =
                    MeasuredValues(b, candidate, arm, pairs, run, pair_seed, name, *r, &micro);
                if (values.empty()) return false;  // MeasuredValues recorded why.
                for (size_t i = 0; i < values.size(); ++i) log_sum[i] += std::log(values[i]);
              }
              std::vector<double> values;
              for (double sum : log_sum) values.push_back(std::exp(sum / runs));
              for (size_t i = 0; i < values.size(); ++i, ++metric_index) {
                MetricSamples& s = metrics_[metric_index];
                // Kept out of the samples too, so that recompute sees what the gate saw.
                if (!InScope(s.name)) continue;
                (candidate ? s.candidate : s.baseline).push_back(values[i]);
                v1::Sample sample;
                sample.set_id(next_sample_id++);
                sample.set_metric(s.name);
                sample.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
                sample.set_pair_index(pairs);
                sample.set_value(values[i]);
                sample.set_unit(s.unit);
                sample.set_process_wall_seconds(wall_seconds);
                sample.set_process_cpu_seconds(cpu_seconds);
                samples_.push_back(sample);
              }
              return true;
            });
        if (!measured.ok() || !*measured) return measured;
        first_metric += b.metrics_size();
      }
      for (const v1::KernelCheck* c : timed_checks) {
        if (unchanged_.count(c->name()) > 0) {
          ++first_metric;
          continue;
        }
        absl::StatusOr<bool> measured = measure_both_arms(
            c->name(), [&](bool candidate, const std::string& arm) -> absl::StatusOr<bool> {
              size_t metric_index = first_metric;
              std::string name = absl::StrFormat("timed-%s-%s-%d", c->name(), arm, pairs);
              KernelCheckSetup setup = CheckSetup(candidate, name);
              setup.reference = KernelCheckSetup::Reference::kBaselineCompute;
              KernelCheckReport r = RunKernelCheck(*c, setup);
              if (r.outcome != KernelCheckReport::Outcome::kPassed) {
                std::string message = absl::StrFormat("%s kernel check %s (pair %d): %s", arm,
                                                      c->name(), pairs, r.message);
                if (!candidate || r.outcome == KernelCheckReport::Outcome::kInfrastructure) {
                  infrastructure_ = absl::FailedPreconditionError(message);
                  micro.End(v1::STAGE_ERROR, message);
                } else {
                  failures_.push_back(Reason(r.outcome == KernelCheckReport::Outcome::kGaming
                                                 ? v1::GAMING
                                                 : v1::CORRECTNESS_FAILED,
                                             v1::MICROBENCHMARK, message));
                  micro.End(v1::STAGE_FAILED, message);
                }
                return false;
              }
              const double value = UpperMedian(r.call_seconds) * 1e9;
              double total = 0;
              for (double x : r.call_seconds) total += x;
              MetricSamples& s = metrics_[metric_index++];
              (candidate ? s.candidate : s.baseline).push_back(value);
              v1::Sample sample;
              sample.set_id(next_sample_id++);
              sample.set_metric(s.name);
              sample.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
              sample.set_pair_index(pairs);
              sample.set_value(value);
              sample.set_unit(s.unit);
              sample.set_process_wall_seconds(total);
              samples_.push_back(sample);
              return true;
            });
        if (!measured.ok() || !*measured) return measured;
        ++first_metric;
      }
      if (listener_) {
        v1::Progress p;
        p.set_stage(v1::MICROBENCHMARK);
        p.set_repetition(pairs + 1);
        p.set_repetitions_planned(target);
        p.set_metric(shown->name);
        p.set_current_estimate(RunningSpeedup(*shown, pairs + 1));
        listener_->OnProgress(p);
      }
    }
    gate_input_.metrics.clear();
    std::copy_if(metrics_.begin(), metrics_.end(), std::back_inserter(gate_input_.metrics),
                 [&](const MetricSamples& m) { return InScope(m.name); });
    absl::StatusOr<GateResult> result = results::Evaluate(gate_input_);
    if (!result.ok()) return result.status();
    if (!result->needs_more_pairs) {
      gate_ = *result;
      break;
    }
    target = result->next_pairs;
  }
  if (std::optional<std::string> mismatch = PooledOutputMismatch()) {
    failures_.push_back(Reason(v1::OUTPUT_MISMATCH, v1::END_TO_END, *mismatch));
    micro.End(v1::STAGE_FAILED, *mismatch);
    return false;
  }
  bool regressed = false;
  for (const v1::Reason& r : gate_.reasons) regressed |= r.code() == v1::REGRESSION;
  std::string summary =
      nothing_to_measure
          ? absl::StrFormat("not measured, the inputs of every benchmark and timed check are "
                            "byte-identical in both arms (%s): %s",
                            absl::StrJoin(unchanged_, ", "), v1::Decision_Name(gate_.decision))
          : absl::StrFormat("%d pairs, ABBA, fresh process each: %s", gate_.pairs_used,
                            v1::Decision_Name(gate_.decision));
  if (!nothing_to_measure && !unchanged_.empty()) {
    absl::StrAppend(&summary, "; not measured, inputs byte-identical in both arms: ",
                    absl::StrJoin(unchanged_, ", "));
  }
  if (!prior_note.empty()) absl::StrAppend(&summary, "; ", prior_note);
  for (const auto& [benchmark, pooled] : agreement_) {
    absl::StrAppend(&summary, "; ", benchmark,
                    pooled.identical
                        ? ": generated tokens identical in both arms, every pair"
                        : absl::StrFormat(": %.1f%% of %d generated tokens agree with the "
                                          "baseline's (declared precision change: %s)",
                                          100 * pooled.agreement, pooled.tokens,
                                          request_.precision_change));
  }
  if (!request_.metric_scope.empty()) {
    absl::StrAppend(&summary, "; scoped to ", absl::StrJoin(request_.metric_scope, ", "),
                    out_of_scope.empty() ? "" : ", not run: " + absl::StrJoin(out_of_scope, ", "));
  }
  if (remeasured > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) measured again: the machine probe's time moved more "
                          "than %.2fx within the pair",
                          remeasured, options_.max_probe_spread);
  }
  if (host_.seconds_waited() > 0) {
    absl::StrAppendFormat(&summary, "; %.0f s waited for the host to settle (probe %.1f-%.1f ms)",
                          host_.seconds_waited(), host_.probe_fastest_ms(),
                          host_.probe_slowest_ms());
  }
  if (kept_unsteady > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) kept although it moved (a re-measure bound spent: %d "
                          "in a row, %d per evaluation, %.0f s)",
                          kept_unsteady, options_.max_remeasures_in_a_row,
                          gate_input_.params.max_pairs, options_.max_unsteady_seconds);
  }
  SummarizeCounters();
  const std::string traces = Traces();
  if (!traces.empty()) absl::StrAppend(&summary, "; ", traces);
  micro.End(regressed ? v1::STAGE_FAILED : v1::STAGE_PASSED, summary);
  if (has_micro && has_e2e) {
    StageRun e2e(v1::END_TO_END, nullptr, &stages_);
    e2e.End(stages_[stages_.size() - 2].status(),
            "interleaved with the microbenchmarks: " + summary);
  } else {
    Skip(has_micro ? v1::END_TO_END : v1::MICROBENCHMARK, "none declared", listener_, &stages_);
  }
  return true;
}

std::vector<double> Evaluation::MeasuredValues(const v1::BenchmarkSpec& b, bool candidate,
                                               const std::string& arm, int pair, int run,
                                               const std::string& pair_seed,
                                               const std::string& name, const ProcessResult& r,
                                               StageRun* stage) {
  std::string out = ReadOutputFile(LogPath(name + ".out"));
  auto fail = [&](v1::ReasonCode code, std::string message) {
    message = absl::StrFormat("%s benchmark %s (%s, pair %d): %s", arm, b.name(),
                              b.command(), pair, message);
    if (!candidate) {
      infrastructure_ = absl::FailedPreconditionError(message);
      stage->End(v1::STAGE_ERROR, message);
    } else {
      failures_.push_back(Reason(code, stage->stage().kind(), message));
      stage->End(v1::STAGE_FAILED, message);
    }
  };
  if (!r.ok()) {
    fail(v1::CORRECTNESS_FAILED,
         absl::StrCat(r.Describe(), "\n",
                      LastLines(ReadOutputFile(LogPath(name + ".err")), 6)));
    return {};
  }
  std::vector<double> values;
  if (b.kind() == v1::GOOGLE_BENCHMARK) {
    absl::StatusOr<std::vector<BenchmarkRun>> runs = ParseGoogleBenchmarkJson(out);
    if (absl::IsFailedPrecondition(runs.status())) {
      // The benchmark checked what it timed and found it wrong, yet
      // the tests passed: the code behaves differently when measured.
      fail(v1::GAMING,
           absl::StrCat(runs.status().message(),
                        "; the correctness stage passed, so the candidate takes a "
                        "different path when it is benchmarked"));
      return {};
    }
    if (!runs.ok()) {
      fail(v1::CORRECTNESS_FAILED, std::string(runs.status().message()));
      return {};
    }
    double claimed = ClaimedTimedSeconds(*runs);
    if (claimed > r.wall_seconds) {
      fail(v1::GAMING,
           absl::StrFormat("reports %.3f s of timed work in a process that lived "
                           "%.3f s by the harness's clock: its times are not real",
                           claimed, r.wall_seconds));
      return {};
    }
    for (const v1::MetricSpec& m : b.metrics()) {
      absl::StatusOr<double> v = GoogleBenchmarkMetric(*runs, m);
      if (!v.ok()) {
        fail(v1::CORRECTNESS_FAILED, std::string(v.status().message()));
        return {};
      }
      values.push_back(*v);
    }
  } else {
    for (const v1::MetricSpec& m : b.metrics()) {
      absl::StatusOr<double> v = JsonNumberAt(out, m.source());
      if (!v.ok() || !(*v > 0) || !std::isfinite(*v)) {
        fail(v1::CORRECTNESS_FAILED,
             v.ok()
                 ? absl::StrFormat("%s = %g is not a positive number", m.source(), *v)
                 : std::string(v.status().message()));
        return {};
      }
      values.push_back(*v);
    }
    if (b.has_outputs()) {
      absl::StatusOr<GeneratedTokens> tokens =
          JsonTokenSequencesAt(out, b.outputs().source());
      if (!tokens.ok()) {
        fail(v1::CORRECTNESS_FAILED, std::string(tokens.status().message()));
        return {};
      }
      if (std::optional<std::string> mismatch =
              OutputMismatch(b, candidate, pair, run, *std::move(tokens))) {
        const std::string message = absl::StrFormat(
            "candidate benchmark %s (pair %d, prompts from seed %s): %s", b.name(),
            pair, pair_seed, *mismatch);
        failures_.push_back(Reason(v1::OUTPUT_MISMATCH, v1::END_TO_END, message));
        stage->End(v1::STAGE_FAILED, message);
        return {};
      }
    }
    if (!b.counters().empty()) {
      // Explanatory only: a missing counters object costs the
      // attribution, not the verdict.
      absl::StatusOr<std::map<std::string, double>> counters =
          JsonNumbersAt(out, b.counters());
      for (const auto& [counter, value] :
           counters.ok() ? *counters : std::map<std::string, double>{}) {
        auto& arms = counter_samples_[b.name()][counter];
        (candidate ? arms.second : arms.first).push_back(value);
      }
    }
  }
  return values;
}

std::optional<std::string> Evaluation::OutputMismatch(const v1::BenchmarkSpec& b, bool candidate,
                                                      int pair, int run, GeneratedTokens tokens) {
  generated_[candidate][{b.name(), pair, run}] = std::move(tokens);
  const auto baseline = generated_[0].find({b.name(), pair, run});
  const auto subject = generated_[1].find({b.name(), pair, run});
  if (baseline == generated_[0].end() || subject == generated_[1].end()) return std::nullopt;
  const OutputComparison c = CompareGeneratedOutputs(baseline->second, subject->second);
  Pool(c, &agreement_[b.name()]);
  // A declared precision change is judged on all pairs together, once the
  // gate has decided (PooledOutputMismatch); anything else in every pair.
  std::string why;
  if (!request_.precision_change.empty() || OutputsAcceptable(c, false, 0, &why)) {
    return std::nullopt;
  }
  return why;
}

std::optional<std::string> Evaluation::PooledOutputMismatch() const {
  if (request_.precision_change.empty()) return std::nullopt;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const auto pooled = agreement_.find(b.name());
    if (pooled == agreement_.end()) continue;
    std::string why;
    if (!OutputsAcceptable(pooled->second, true, b.outputs().min_token_agreement(), &why)) {
      return absl::StrFormat("candidate benchmark %s, over all pairs: %s", b.name(), why);
    }
  }
  return std::nullopt;
}

void Evaluation::FindUnchangedBenchmarks() {
  size_t first_metric = 0;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const size_t metrics = b.metrics_size();
    first_metric += metrics;
    if (!InScope(b)) continue;
    if (!SkipsWhenIdentical(b)) {
      // Unset, yet not comparable: say why it is measured.
      if (!b.has_skip_when_identical()) {
        Say(v1::MICROBENCHMARK, absl::StrFormat("%s: measured, %s", b.name(),
                                                InputIdentityProblem(b).value_or("")));
      }
      continue;
    }
    absl::StatusOr<std::string> baseline = BenchmarkInputsDigest(b, checkout_.baseline_dir);
    absl::StatusOr<std::string> candidate = BenchmarkInputsDigest(b, checkout_.candidate_dir);
    if (baseline.ok() && candidate.ok()) {
      v1::BenchmarkInputs& digests = benchmark_inputs_.emplace_back();
      digests.set_benchmark(b.name());
      digests.set_baseline_digest(*baseline);
      digests.set_candidate_digest(*candidate);
    }
    absl::StatusOr<InputComparison> inputs =
        CompareBenchmarkInputs(b, checkout_.baseline_dir, checkout_.candidate_dir);
    std::string message;
    if (!inputs.ok()) {
      message = absl::StrFormat("%s: measured, its inputs could not be compared: %s", b.name(),
                                inputs.status().message());
    } else if (!inputs->identical) {
      message = absl::StrFormat("%s: measured, its inputs differ (%s)", b.name(),
                                inputs->difference);
    } else {
      message = absl::StrFormat(
          "%s: not measured, its inputs are byte-identical in both arms (%d files, %.1f MiB)",
          b.name(), inputs->files, inputs->bytes / 1048576.0);
      unchanged_.insert(b.name());
      for (size_t i = first_metric - metrics; i < first_metric; ++i) {
        metrics_[i].inputs_identical = true;
      }
    }
    Say(v1::MICROBENCHMARK, message);
  }
}

void Evaluation::TakePriorSamples(int64_t* next_sample_id, std::string* note) {
  const v1::PriorMeasurement& prior = request_.prior;
  if (prior.evaluation_id().empty()) return;
  if (prior.node_fingerprint() != options_.node_fingerprint) {
    // Another kind of machine (or toolchain): its samples do not pair with ours.
    *note = absl::StrFormat("measured anew: evaluation %s ran on another kind of node",
                            prior.evaluation_id());
    return;
  }
  auto digests_of = [](const auto& list, const std::string& benchmark) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const v1::BenchmarkInputs& d) {
      return d.benchmark() == benchmark;
    });
    return it == list.end() ? nullptr : &*it;
  };
  std::vector<std::string> taken, anew, undigested;
  size_t first_metric = 0;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const size_t index = first_metric;
    first_metric += b.metrics_size();
    if (!InScope(b) || unchanged_.count(b.name()) > 0) continue;
    const v1::BenchmarkInputs* ours = digests_of(benchmark_inputs_, b.name());
    const v1::BenchmarkInputs* theirs = digests_of(prior.benchmark_inputs(), b.name());
    if (ours == nullptr || theirs == nullptr) {
      undigested.push_back(b.name());
      continue;
    }
    if (ours->baseline_digest() != theirs->baseline_digest() ||
        ours->candidate_digest() != theirs->candidate_digest()) {
      anew.push_back(b.name());
      continue;
    }
    // Metric index -> pair -> (baseline, candidate), for this benchmark.
    std::map<size_t, std::map<int, std::pair<const v1::Sample*, const v1::Sample*>>> by_metric;
    for (int i = 0; i < b.metrics_size(); ++i) {
      if (InScope(b.metrics(i).name())) by_metric[index + i];
    }
    for (const v1::Sample& s : prior.samples()) {
      if (s.pair_index() < 0 || (s.arm() != v1::BASELINE && s.arm() != v1::CANDIDATE)) continue;
      for (auto& [metric, pairs] : by_metric) {
        if (metrics_[metric].name != s.metric()) continue;
        auto& slot = pairs[s.pair_index()];
        (s.arm() == v1::BASELINE ? slot.first : slot.second) = &s;
      }
    }
    auto complete = [&](int pair) {
      for (const auto& [metric, pairs] : by_metric) {
        const auto it = pairs.find(pair);
        if (it == pairs.end() || it->second.first == nullptr || it->second.second == nullptr) {
          return false;
        }
      }
      return true;
    };
    int n = 0;
    while (complete(n)) ++n;
    if (n == 0) {
      anew.push_back(b.name());
      continue;
    }
    // The gate's values by pair index; the samples in the prior's
    // measurement order (pair by pair, ABBA).
    std::set<const v1::Sample*> kept;
    for (const auto& [metric, pairs] : by_metric) {
      MetricSamples& m = metrics_[metric];
      for (int pair = 0; pair < n; ++pair) {
        const auto& [baseline, candidate] = pairs.at(pair);
        m.baseline.push_back(baseline->value());
        m.candidate.push_back(candidate->value());
        kept.insert(baseline);
        kept.insert(candidate);
      }
    }
    for (const v1::Sample& s : prior.samples()) {
      if (kept.count(&s) == 0) continue;
      // This evaluation's sample now, with the prior's value and timings.
      v1::Sample& copy = samples_.emplace_back(s);
      copy.set_id((*next_sample_id)++);
      copy.clear_evaluation_id();
      copy.clear_recorded_at();
    }
    carried_pairs_[b.name()] = n;
    taken.push_back(absl::StrFormat("%d pairs of %s", n, b.name()));
  }
  std::vector<std::string> parts;
  if (!taken.empty()) {
    parts.push_back(
        absl::StrFormat("%s taken from evaluation %s (the same inputs, arm for arm, "
                        "as there)",
                        absl::StrJoin(taken, ", "), prior.evaluation_id()));
  }
  if (!anew.empty()) {
    parts.push_back(absl::StrFormat("measured anew: %s (other inputs than in evaluation %s)",
                                    absl::StrJoin(anew, ", "), prior.evaluation_id()));
  }
  if (!undigested.empty()) {
    parts.push_back(absl::StrFormat("measured anew: %s (no input digest to compare)",
                                    absl::StrJoin(undigested, ", ")));
  }
  if (parts.empty()) return;
  *note = absl::StrJoin(parts, "; ");
  Say(v1::MICROBENCHMARK, *note);
}

absl::Status Evaluation::CheckDiskSpace(bool after_failure) const {
  struct statvfs fs;
  if (statvfs(options_.workspace_root.c_str(), &fs) != 0) return absl::OkStatus();
  const double free_bytes = static_cast<double>(fs.f_bavail) * fs.f_frsize;
  std::string evidence;
  if (free_bytes < options_.min_free_bytes) {
    evidence = absl::StrFormat("%.1f MiB free, at least %.1f MiB needed", free_bytes / (1 << 20),
                               options_.min_free_bytes / double(1 << 20));
  } else if (after_failure) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(log_dir_, ec)) {
      if (ReadOutputFile(entry.path().string()).find("No space left on device") !=
          std::string::npos) {
        evidence = absl::StrFormat("%s reports \"No space left on device\"",
                                   entry.path().filename().string());
        break;
      }
    }
  }
  if (evidence.empty()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the workspace filesystem under %s is full (%s); the candidate is not at fault: free "
      "space on this node and evaluate again",
      options_.workspace_root, evidence));
}

// nftw's callback takes no state: the walk in progress on this thread.
thread_local std::set<std::pair<dev_t, ino_t>>* walk_seen = nullptr;
thread_local int64_t walk_bytes = 0;

int64_t Evaluation::DiskUsage(const std::vector<std::string>& dirs) {
  std::set<std::pair<dev_t, ino_t>> seen;
  walk_seen = &seen;
  walk_bytes = 0;
  // Physical walk (links not followed). An entry that vanished or cannot be
  // read is skipped and the walk goes on: a build creates and deletes files
  // all the time, and a walk that stopped at the first would undercount.
  auto add = [](const char*, const struct stat* st, int type, struct FTW*) {
    if (type != FTW_NS && type != FTW_SL && walk_seen->emplace(st->st_dev, st->st_ino).second) {
      walk_bytes += int64_t{st->st_blocks} * 512;
    }
    return 0;
  };
  for (const std::string& dir : dirs) nftw(dir.c_str(), add, 32, FTW_PHYS);
  walk_seen = nullptr;
  return walk_bytes;
}

std::vector<std::string> Evaluation::ArmDirs(bool candidate) const {
  const ArmArea& area = candidate ? checkout_.candidate : checkout_.baseline;
  return {candidate ? checkout_.candidate_dir : checkout_.baseline_dir, area.home, area.cache};
}

std::string Evaluation::CandidateDiskBlame(bool disk_low) {
  const int64_t mine = DiskUsage(ArmDirs(true));
  const double mib = 1 << 20;
  if (mine > options_.arm_disk_quota_bytes) {
    return absl::StrFormat("the candidate's arm holds %.1f MiB, over its %.1f MiB disk quota",
                           mine / mib, options_.arm_disk_quota_bytes / mib);
  }
  if (!disk_low) return "";
  // Blamed when what it holds beyond the baseline's arm would restore the
  // reserve, not for a few blocks more while another slot filled the disk.
  const int64_t theirs = DiskUsage(ArmDirs(false));
  if (mine - theirs < options_.min_free_bytes) return "";
  return absl::StrFormat(
      "the workspace's filesystem is below the %.1f MiB the node keeps free, and the "
      "candidate's arm holds %.1f MiB, more than the baseline's %.1f MiB: the candidate filled "
      "the disk",
      options_.min_free_bytes / mib, mine / mib, theirs / mib);
}

bool Evaluation::DiskLow() const {
  struct statvfs fs;
  return statvfs(options_.workspace_root.c_str(), &fs) == 0 &&
         static_cast<double>(fs.f_bavail) * fs.f_frsize < options_.min_free_bytes;
}

std::function<std::string()> Evaluation::CandidateDiskWatch() {
  // Free space is cheap to read every time; walking the arm costs about a
  // millisecond per thousand files, so it runs at most 2% of the time, 10%
  // while the disk is low.
  auto next_walk = std::make_shared<absl::Time>(absl::InfinitePast());
  return [this, next_walk]() -> std::string {
    const bool low = DiskLow();
    if (absl::Now() < *next_walk) return "";
    const absl::Time start = absl::Now();
    std::string blame = CandidateDiskBlame(low);
    *next_walk = absl::Now() + std::max(absl::Milliseconds(500),
                                        (low ? 10 : 50) * (absl::Now() - start));
    if (!blame.empty()) candidate_filled_disk_ = true;
    return blame;
  };
}

void Evaluation::SummarizeCounters() {
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    auto it = counter_samples_.find(b.name());
    if (it == counter_samples_.end()) continue;
    CounterMedians c;
    c.benchmark = b.name();
    for (const v1::MetricSpec& m : b.metrics()) c.metrics.push_back(m.name());
    for (const auto& [counter, arms] : it->second) {
      c.counters[counter] = {UpperMedian(arms.first), UpperMedian(arms.second)};
    }
    counters_.push_back(std::move(c));
  }
}

std::string Evaluation::Traces() {
  if (request_.out_dir.empty()) return "";
  std::error_code ec;
  const std::string dir = std::filesystem::absolute(request_.out_dir, ec).string() + "/traces";
  std::vector<std::string> notes;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (b.trace_arg().empty() || unchanged_.count(b.name()) || !InScope(b)) continue;
    // Unmeasured work, beside other nodes' (and no wait for the lock when
    // there is nothing to trace).
    HostLock::Guard unmeasured(options_.host_lock, HostLock::Mode::kShared);
    std::filesystem::create_directories(dir, ec);
    const std::string seed = PromptSeed();  // Both arms' traces on the same prompts.
    for (bool candidate : {false, true}) {
      const std::string arm = candidate ? "candidate" : "baseline";
      const std::string path = absl::StrFormat("%s/%s-%s.json", dir, b.name(), arm);
      const std::string command =
          absl::StrCat(absl::StrReplaceAll(b.command(), {{kSeedPlaceholder, seed}}), " ",
                       absl::StrReplaceAll(b.trace_arg(), {{"{path}", path}}));
      const std::string name = absl::StrFormat("trace-%s-%s", b.name(), arm);
      // The arm may write this one file, created for it beforehand.
      Confinement confinement = ArmSandbox(candidate, Access::kMeasure);
      std::filesystem::remove(path, ec);
      std::ofstream(path).close();
      if (geteuid() == 0) (void)!chown(path.c_str(), confinement.uid, confinement.gid);
      confinement.writable.push_back(path);
      absl::StatusOr<ProcessResult> r = Shell(command, candidate, name, b.timeout_s(), confinement);
      if (!r.ok() || !r->ok() || std::filesystem::file_size(path, ec) == 0) {
        notes.push_back(absl::StrFormat("no %s trace of %s (see logs/%s.err)", arm, b.name(), name));
      }
    }
  }
  return absl::StrJoin(notes, "; ");
}

absl::StatusOr<EvalOutcome> Evaluation::Run() {
  std::string root = options_.workspace_root;
  log_dir_ = request_.out_dir.empty() ? root + "/logs/last" : request_.out_dir + "/logs";
  std::error_code ec;
  std::filesystem::remove_all(log_dir_, ec);
  std::filesystem::create_directories(log_dir_, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the log directory ", log_dir_, ": ", ec.message()));
  }
  EvalOutcome outcome;
  absl::Cleanup end_candidate = [this] { EndCandidateSandbox(); };
  using Step = absl::StatusOr<bool> (Evaluation::*)();
  bool ok = true;
  for (Step step : {&Evaluation::Preflight, &Evaluation::Build, &Evaluation::Correctness,
                    &Evaluation::Precision, &Evaluation::Benchmarks}) {
    if (listener_ != nullptr && listener_->Cancelled()) {
      infrastructure_ = absl::CancelledError("the evaluation was cancelled");
      ok = false;
      break;
    }
    if (absl::Status space = CheckDiskSpace(false); !space.ok()) {
      infrastructure_ = space;
      ok = false;
      break;
    }
    absl::StatusOr<bool> r;
    {
      // Benchmarks take the host lock per arm, exclusively; the rest share it.
      std::optional<HostLock::Guard> shared;
      if (step != &Evaluation::Benchmarks) shared.emplace(options_.host_lock, HostLock::Mode::kShared);
      r = (this->*step)();
    }
    if (!r.ok()) {
      if (r.status().code() == absl::StatusCode::kInvalidArgument ||
          r.status().code() == absl::StatusCode::kNotFound) {
        return r.status();
      }
      infrastructure_ = r.status();
    }
    if (!r.ok() || !*r) {
      ok = false;
      // A stage that failed because the disk filled up says nothing about
      // the candidate, unless the candidate's arm filled it.
      if (absl::Status space = CheckDiskSpace(true); !space.ok() && !candidate_filled_disk_) {
        std::string blame = failures_.empty() ? "" : CandidateDiskBlame(DiskLow());
        if (blame.empty()) {
          infrastructure_ = space;
          failures_.clear();
        } else {
          v1::Reason reason = failures_.front();
          reason.set_message(blame);
          failures_.push_back(reason);
        }
      }
      break;
    }
  }
  if (checkout_.baseline_dir.size()) {
    // Nothing the candidate started may outlive it or see the reset.
    EndCandidateSandbox();
    (void)Workspace(options_.workspace_root, options_.slot, &git_).Clean(checkout_);
  }
  outcome.samples = samples_;
  if (!infrastructure_.ok()) {
    outcome.infrastructure_error = infrastructure_;
    WriteFeedbackBundle(request_.out_dir, nullptr, stages_, samples_, counters_, infrastructure_);
    return outcome;
  }
  if (!ok) {
    // Early exit: later stages are skipped, the failure decides.
    for (v1::StageKind k : {v1::BUILD, v1::CORRECTNESS, v1::PRECISION, v1::MICROBENCHMARK}) {
      bool seen = false;
      for (const v1::Stage& s : stages_) seen |= s.kind() == k;
      if (!seen) Skip(k, "skipped: an earlier stage failed", listener_, &stages_);
    }
    gate_input_.stage_failures = failures_;
    absl::StatusOr<GateResult> result = results::Evaluate(gate_input_);
    if (!result.ok()) return result.status();
    gate_ = *result;
  }
  results::VerdictContext context;
  context.candidate_id = absl::StrFormat("%016x", std::hash<std::string>{}(absl::StrCat(
                                                      request_.repo, checkout_.baseline_sha,
                                                      checkout_.candidate_sha, manifest_hash_)));
  context.manifest_hash = manifest_hash_;
  context.node_id = options_.node_id;
  context.node_fingerprint = options_.node_fingerprint;
  context.software_version = options_.software_version;
  context.isolation = options_.isolation;
  for (const v1::Sample& s : samples_) context.sample_ids.push_back(s.id());
  context.stages = stages_;
  context.benchmark_inputs = benchmark_inputs_;
  context.host = host_;
  outcome.verdict = results::MakeVerdict(gate_input_, gate_, context);
  WriteFeedbackBundle(request_.out_dir, &outcome.verdict, stages_, samples_, counters_,
                      absl::OkStatus());
  return outcome;
}

}  // namespace

int EndToEndRunsPerArm(double node_noise) {
  if (!(node_noise > kQuietNodeNoise)) return 1;
  const double runs = std::ceil(std::pow(node_noise / kQuietNodeNoise, 2) - 1e-9);
  return static_cast<int>(std::min<double>(runs, kMaxEndToEndRunsPerArm));
}

Evaluator::Evaluator(EvaluatorOptions options, ProcessLauncher* launcher)
    : options_(std::move(options)), launcher_(launcher) {}

absl::StatusOr<EvalOutcome> Evaluator::Evaluate(const EvalRequest& request,
                                                EvalListener* listener) {
  return Evaluation(options_, launcher_, request, listener).Run();
}

}  // namespace densegate::harness
