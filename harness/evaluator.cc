#include "harness/evaluator.h"

#include "harness/internal/evaluation.h"

namespace densegate::harness {
namespace internal {

platform::Confinement Evaluation::ArmSandbox(bool candidate, Access access) const {
  const ArmArea& area = candidate ? checkout_.candidate : checkout_.baseline;
  platform::Confinement c;
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

absl::StatusOr<platform::ProcessResult> Evaluation::Shell(const std::string& command, bool candidate,
                                                const std::string& name, int timeout_s,
                                                platform::Confinement confinement) {
  platform::ProcessSpec spec;
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
      platform::Confinement confinement = ArmSandbox(candidate, Access::kMeasure);
      std::filesystem::remove(path, ec);
      std::ofstream(path).close();
      if (geteuid() == 0) (void)!chown(path.c_str(), confinement.uid, confinement.gid);
      confinement.writable.push_back(path);
      absl::StatusOr<platform::ProcessResult> r = Shell(command, candidate, name, b.timeout_s(), confinement);
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
  bool ok = true;
  for (Stage step : {&Evaluation::Preflight, &Evaluation::Build, &Evaluation::Correctness,
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
    WriteFeedbackBundle(request_.out_dir, nullptr, stages_, samples_, counters_, infrastructure_,
                        request_.evaluation_id);
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
  context.evaluation_id = request_.evaluation_id;
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

}  // namespace internal


int EndToEndRunsPerArm(double node_noise) {
  if (!(node_noise > kQuietNodeNoise)) return 1;
  const double runs = std::ceil(std::pow(node_noise / kQuietNodeNoise, 2) - 1e-9);
  return static_cast<int>(std::min<double>(runs, kMaxEndToEndRunsPerArm));
}

Evaluator::Evaluator(EvaluatorOptions options, platform::ProcessLauncher* launcher)
    : options_(std::move(options)), launcher_(launcher) {}

absl::StatusOr<EvalOutcome> Evaluator::Evaluate(const EvalRequest& request,
                                                EvalListener* listener) {
  return internal::Evaluation(options_, launcher_, request, listener).Run();
}

}  // namespace densegate::harness
