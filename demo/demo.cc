#include "demo/demo.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "demo/expectation.h"
#include "demo/scenario.h"
#include "demo/scratch_repo.h"
#include "demo/service_process.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.grpc.pb.h"
#include "manifest/manifest.h"
#include "results/report/report.h"
#include "results/store/store.h"
#include "scheduler/tokens.h"

namespace densegate::demo {
namespace {

namespace fs = std::filesystem;

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitInfrastructure = 4;

struct Tokens {
  std::string ci, agent, viewer, admin;
  std::map<std::string, std::string> nodes;  // By node name.
};

// The CPUs this process may use, split in two halves, one per node. With a
// single CPU both nodes share it (and the demo says so).
std::pair<std::vector<int>, std::vector<int>> SplitCpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  if (cpus.size() < 2) return {cpus, cpus};
  const size_t half = cpus.size() / 2;
  return {std::vector<int>(cpus.begin(), cpus.begin() + half),
          std::vector<int>(cpus.begin() + half, cpus.end())};
}

// What the live view shows of one candidate.
struct Row {
  const ScenarioCandidate* candidate = nullptr;
  std::string id;
  // The evaluation the live view follows: the candidate's, then the merge
  // queue's re-measure of it, which may run on the other node.
  std::string watched_id;
  v1::EvaluationState state = v1::QUEUED;
  std::string node_id;              // Where watched_id runs.
  std::string activity = "queued";  // Stage and repetitions, or the outcome.
  // Activities set since the live view last drew: a log (no terminal)
  // prints each, also those replaced within the view's one-second redraw.
  std::vector<std::string> unshown;
  void SetActivity(std::string a) {
    unshown.push_back(a);
    activity = std::move(a);
  }
  bool settled = false;             // Final, merge included.
  v1::Evaluation final;
  // The merge queue's re-measure against the moved tip, when it ran.
  std::optional<v1::Evaluation> remeasure;
};

class Demo {
 public:
  Demo(const DemoOptions& options, std::ostream& out) : o_(options), out_(out) {}
  int Run();

 private:
  absl::Status Prepare();
  absl::Status StartServices();
  void SeedTrustedCache(const std::string& shared);
  absl::Status StartNode(size_t i);  // Starts node_specs_[i].
  absl::Status AwaitNodes();
  absl::Status SubmitAll();
  void Follow(Row* row);
  void FollowEvents(Row* row, const std::string& id, const std::string& prefix);
  absl::StatusOr<v1::Evaluation> Get(const std::string& id);
  bool WaitAndShow();
  void Show(bool final);
  std::string NodeName(const std::string& id);
  int Verdicts();
  // Prints the host state the run measured in: the machine probe's range,
  // the pairs measured again or kept unsteady and the waits (from every
  // verdict's Provenance.host), and each node's state and calibration
  // noise, with the quarantines seen. A reader can then tell a noisy run
  // from a regression.
  void HostState();
  // Starts `densegate bisect` over the scenario's bisection branch through
  // the scheduler, as a user would, once every candidate is decided: its
  // jobs then take the nodes that the merge queue's serial re-measures leave
  // idle (started with the candidates, its CI-class jobs would go ahead of
  // the experiments). Does nothing when started already or the scenario has
  // no bisection.
  void StartBisect();
  // Waits for the bisection and prints its steps. True when it names the
  // expected culprit (or the scenario has no bisection).
  bool FinishBisect();
  absl::Status WriteReport();

  template <typename Ctx>
  void Attach(Ctx* ctx, const std::string& token, int deadline_s = 30) {
    ctx->AddMetadata("authorization", "Bearer " + token);
    if (deadline_s > 0) {
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    }
  }

  const DemoOptions& o_;
  std::ostream& out_;
  const absl::Time start_ = absl::Now();
  std::unique_ptr<platform::ProcessLauncher> launcher_ = platform::NewSandboxLauncher();
  platform::Git git_{launcher_.get()};
  Scenario scenario_;
  ScratchRepo repo_;
  Tokens tokens_;
  std::string db_url_;
  std::unique_ptr<ServiceProcess> scheduler_;
  struct NodeSpec {
    std::string name;
    std::vector<int> cpus;
    std::vector<std::string> argv;
  };
  std::vector<NodeSpec> node_specs_;
  std::vector<std::unique_ptr<ServiceProcess>> nodes_;  // One per spec.
  std::string address_;
  int http_port_ = 0;
  std::unique_ptr<v1::Densegate::Stub> stub_;

  // Set when the demo gives up: watchers stop polling a stopped scheduler.
  std::atomic<bool> giving_up_{false};
  int inconclusive_ = 0;  // Misses allowed by allow_inconclusive.
  // Node name -> the calibration noise of each quarantine seen.
  std::map<std::string, std::vector<double>> quarantines_;
  // The target repository's max_calibration_noise (0: none): a node above
  // it gets none of its gate work.
  double repo_noise_limit_ = 0;
  // Why node `n` gets none of the repository's gate work, or "".
  std::string OverRepoLimit(const v1::Node& n) const {
    if (repo_noise_limit_ <= 0 || n.calibration_noise() <= repo_noise_limit_) return "";
    return absl::StrFormat(
        " (over the repository's max_calibration_noise %.2f%%: quarantined for its gate work, "
        "which goes to calmer nodes, until it calibrates calm)",
        100 * repo_noise_limit_);
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<Row>> rows_;  // Guarded by mu_ once watchers run.
  // Node id -> name, of every registration AwaitNodes saw (no node joins later).
  std::map<std::string, std::string> node_names_;
  // The bisection's process, run on its own thread from StartBisect.
  std::thread bisect_;
  platform::ProcessSpec bisect_spec_;
  absl::StatusOr<platform::ProcessResult> bisect_result_ = absl::UnknownError("not started");
  std::string bisect_started_at_, bisect_finished_at_;
  int shown_lines_ = 0;
  std::map<const Row*, std::string> last_printed_;
  const bool tty_ = isatty(STDOUT_FILENO);
};

std::string Elapsed(absl::Time start) {
  const int s = static_cast<int>(absl::ToInt64Seconds(absl::Now() - start));
  return absl::StrFormat("%2d:%02d", s / 60, s % 60);
}

absl::Status Demo::Prepare() {
  absl::StatusOr<Scenario> scenario = LoadScenario(o_.source_root + "/examples/scenario.json");
  if (!scenario.ok()) return scenario.status();
  scenario_ = *std::move(scenario);
  ScratchRepoOptions ro;
  ro.source_root = o_.source_root;
  ro.workload_dir = o_.source_root + "/examples/workload";
  ro.dir = o_.cache_dir + "/repo";
  ro.quick = o_.quick;
  absl::StatusOr<ScratchRepo> repo = CreateScratchRepo(ro, scenario_, git_);
  if (!repo.ok()) return repo.status();
  repo_ = *std::move(repo);
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> manifest =
      ParseManifest(platform::ReadOutputFile(repo_.dir + "/" + std::string(kManifestFileName)),
                    &errors);
  if (manifest.ok()) repo_noise_limit_ = manifest->gate().max_calibration_noise();
  out_ << absl::StrFormat("target repository %s: first version %s, %d candidate branches%s\n",
                          repo_.dir, repo_.first_version_sha.substr(0, 10),
                          repo_.candidate_sha.size(), o_.quick ? " (quick: fewer pairs, a smaller serving run)" : "");
  return absl::OkStatus();
}

// The nodes' trusted cache starts from this machine's own Bazel disk cache
// (the repository's .bazelrc puts it at ~/.cache/densegate/bazel-disk), which
// building densegate and running its tests fill with the workload's actions:
// the demo trusts what its own user built. Hard links, not copies: entries
// are never changed in place (Bazel writes a new file and renames it), and
// they become the baseline user's with the rest of the trusted cache.
void Demo::SeedTrustedCache(const std::string& shared) {
  const char* home = std::getenv("HOME");
  if (home == nullptr) return;
  const std::string own = std::string(home) + "/.cache/densegate/bazel-disk";
  const std::string seeded = shared + "/bazel-disk";
  std::error_code ec;
  if (!fs::is_directory(own) || fs::exists(seeded, ec)) return;
  out_ << "seeding the nodes' trusted build cache from " << own << " (hard links)\n";
  fs::copy(own, seeded, fs::copy_options::recursive | fs::copy_options::create_hard_links, ec);
  if (ec) {
    out_ << "note: cannot seed it (" << ec.message() << "); the nodes build from scratch\n";
    fs::remove_all(seeded, ec);
  }
}

absl::Status Demo::StartServices() {
  std::error_code ec;
  fs::create_directories(o_.out_dir + "/logs", ec);
  const std::string db = o_.out_dir + "/densegate.db";
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix, ec);
  db_url_ = "sqlite:" + db;
  // The tokens file holds hashes only (scheduler/tokens.h); each node has
  // a token of its own.
  const std::string tokens_path = o_.out_dir + "/tokens";
  fs::remove(tokens_path, ec);
  for (auto [token, role, principal] :
       {std::tuple{&tokens_.ci, scheduler::Role::kCi, "ci:demo-bot"},
        std::tuple{&tokens_.agent, scheduler::Role::kAgent, "agent:kda-optimizer"},
        std::tuple{&tokens_.viewer, scheduler::Role::kViewer, "viewer:manager"},
        std::tuple{&tokens_.admin, scheduler::Role::kAdmin, "admin:demo"},
        std::tuple{&tokens_.nodes["node-a"], scheduler::Role::kNode, "node-a"},
        std::tuple{&tokens_.nodes["node-b"], scheduler::Role::kNode, "node-b"}}) {
    absl::StatusOr<std::string> created = scheduler::CreateToken(tokens_path, role, principal);
    if (!created.ok()) return created.status();
    *token = *std::move(created);
  }
  const std::string port_file = o_.out_dir + "/ports";
  fs::remove(port_file, ec);
  absl::StatusOr<std::unique_ptr<ServiceProcess>> s = ServiceProcess::Start(
      {o_.densegate_binary, "serve", "--address", "127.0.0.1:0", "--http_address", "127.0.0.1:0",
       "--port_file", port_file, "--db", db_url_, "--tokens", tokens_path},
      o_.out_dir + "/logs/scheduler.log", {});
  if (!s.ok()) return s.status();
  scheduler_ = *std::move(s);
  // The scheduler writes the file once it listens; a start takes well under
  // the deadline, so waiting longer means it failed.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int grpc_port = 0;
  while (grpc_port == 0) {
    std::ifstream(port_file) >> grpc_port >> http_port_;
    if (grpc_port != 0) break;
    if (!scheduler_->Running() || absl::Now() > deadline) {
      return absl::UnavailableError("the scheduler did not start; see " + scheduler_->log_path());
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  address_ = absl::StrCat("127.0.0.1:", grpc_port);
  stub_ = v1::Densegate::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  out_ << absl::StrFormat("scheduler on %s (store %s); live report: http://127.0.0.1:%d/report?token=%s\n",
                          address_, db_url_, http_port_, tokens_.viewer);

  const auto [cpus_a, cpus_b] = SplitCpus();
  if (cpus_a == cpus_b) {
    out_ << "note: one CPU only, so both nodes share it; benchmarks will disturb each other\n";
  }
  if (o_.unsafe_no_sandbox) {
    out_ << "WARNING: --unsafe_no_sandbox: the nodes run candidates with their own rights, "
            "without the sandbox (development only; every verdict says so)\n";
  }
  // Both nodes' baseline arms run as one user and share one trusted build
  // cache: the second node builds what the first already built from it.
  // Their candidate arms run as users of their own.
  const std::string shared = o_.cache_dir + "/bazel-shared";
  fs::create_directories(shared, ec);
  SeedTrustedCache(shared);
  for (const auto& [name, cpus, candidate_uid] :
       {std::tuple{"node-a", cpus_a, "59001"}, std::tuple{"node-b", cpus_b, "59101"}}) {
    const std::string ws = o_.cache_dir + "/nodes/" + name;
    const std::string link = ws + "/shared-cache";
    fs::create_directories(ws, ec);
    if (!ec && !fs::is_symlink(link)) {
      fs::remove_all(link, ec);
      if (!ec) fs::create_directory_symlink(shared, link, ec);
    }
    if (ec) return absl::InternalError(absl::StrFormat("cannot prepare %s: %s", ws, ec.message()));
    NodeSpec spec{name, cpus,
                  {o_.densegate_binary, "node", "--server", address_, "--token",
                   tokens_.nodes.at(name),
                   "--name", name, "--workspace", ws, "--host_lock", o_.cache_dir + "/host.lock",
                   "--sandbox_uid", "59000", "--candidate_uid", candidate_uid}};
    if (o_.unsafe_no_sandbox) spec.argv.push_back("--unsafe_no_sandbox");
    if (!cpus.empty()) {
      spec.argv.push_back("--cpus");
      spec.argv.push_back(absl::StrJoin(cpus, ","));
    }
    node_specs_.push_back(std::move(spec));
    nodes_.emplace_back();
    if (absl::Status s = StartNode(nodes_.size() - 1); !s.ok()) return s;
    out_ << absl::StrFormat("%s pinned to CPU %s\n", name,
                            cpus.empty() ? "(any)" : absl::StrJoin(cpus, ","));
  }
  return absl::OkStatus();
}

absl::Status Demo::StartNode(size_t i) {
  const NodeSpec& spec = node_specs_[i];
  absl::StatusOr<std::unique_ptr<ServiceProcess>> n = ServiceProcess::Start(
      spec.argv, o_.out_dir + "/logs/" + spec.name + ".log", spec.cpus);
  if (!n.ok()) return n.status();
  nodes_[i] = *std::move(n);
  return absl::OkStatus();
}

// Both nodes must pass their A/A calibration. A quarantined node is left
// running: the scheduler has it calibrate again right away and then once a
// minute, so a burst of load elsewhere on the machine does not end the
// demo, sustained noise does. (Restarting it instead killed the
// recalibration it was running, whose lease then had to expire first.)
absl::Status Demo::AwaitNodes() {
  constexpr int kCalibrationAttempts = 3;
  // The noise of the last failed calibration seen per node name.
  std::map<std::string, double> last_noise;
  const absl::Time deadline = absl::Now() + absl::Seconds(240);
  while (true) {
    grpc::ClientContext ctx;
    Attach(&ctx, tokens_.admin);
    v1::ListNodesResponse resp;
    grpc::Status s = stub_->ListNodes(&ctx, v1::ListNodesRequest(), &resp);
    if (!s.ok()) return absl::UnavailableError("ListNodes: " + s.error_message());
    std::map<std::string, const v1::Node*> active;
    for (const v1::Node& n : resp.nodes()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        node_names_[n.id()] = n.name();
      }
      if (n.state() == v1::ACTIVE) active[n.name()] = &n;
      // A new result: quarantined with another noise than the last seen.
      if (n.state() != v1::QUARANTINED || (last_noise.count(n.name()) > 0 &&
                                           last_noise[n.name()] == n.calibration_noise())) {
        continue;
      }
      last_noise[n.name()] = n.calibration_noise();
      const std::string noise = absl::StrFormat("%.1f%%", 100 * n.calibration_noise());
      std::vector<double>& seen = quarantines_[n.name()];
      seen.push_back(n.calibration_noise());
      if (static_cast<int>(seen.size()) >= kCalibrationAttempts) {
        return absl::UnavailableError(absl::StrFormat(
            "%s quarantined %d times (calibration noise %s): this machine is too noisy "
            "for gate work right now (stop other load and run again)",
            n.name(), seen.size(), noise));
      }
      out_ << absl::StrFormat(
          "%s quarantined (calibration noise %s); the scheduler calibrates it again\n", n.name(),
          noise);
    }
    if (active.size() == node_specs_.size()) {
      for (const auto& [name, n] : active) {
        out_ << absl::StrFormat("%s active: A/A calibration noise %.2f%%%s\n", name,
                                100 * n->calibration_noise(), OverRepoLimit(*n));
      }
      return absl::OkStatus();
    }
    for (const auto& n : nodes_) {
      if (!n->Running()) return absl::UnavailableError("a node exited; see " + n->log_path());
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError("the nodes did not become active; see " + o_.out_dir + "/logs");
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status Demo::SubmitAll() {
  for (const ScenarioCandidate& c : scenario_.candidates) {
    v1::SubmitRequest req;
    req.set_repo(repo_.dir);
    if (c.merge) req.set_target_branch(scenario_.target_branch);
    req.set_baseline_ref(repo_.first_version_sha);
    req.set_candidate_ref(repo_.candidate_sha.at(c.name));
    req.set_kind(c.kind);
    req.set_hypothesis(c.hypothesis);
    req.set_precision_change(c.precision_change);
    if (c.submitter == "agent") req.set_campaign("kda-decode");
    for (const v1::Claim& claim : c.claims) *req.add_claims() = claim;
    grpc::ClientContext ctx;
    Attach(&ctx, c.submitter == "ci" ? tokens_.ci : tokens_.agent);
    v1::SubmitResponse resp;
    grpc::Status s = stub_->Submit(&ctx, req, &resp);
    if (!s.ok()) {
      return absl::InternalError(absl::StrFormat("submitting %s: %s", c.name, s.error_message()));
    }
    auto row = std::make_unique<Row>();
    row->candidate = &c;
    row->id = resp.evaluation().id();
    row->watched_id = row->id;
    rows_.push_back(std::move(row));
  }
  out_ << absl::StrFormat("submitted %d candidates (CI first, then experiments; FIFO within each)\n\n",
                          rows_.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::Evaluation> Demo::Get(const std::string& id) {
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.viewer);
  v1::GetEvaluationRequest req;
  req.set_id(id);
  v1::Evaluation e;
  grpc::Status s = stub_->GetEvaluation(&ctx, req, &e);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return e;
}

std::string StageName(v1::StageKind k) {
  std::string s = absl::AsciiStrToLower(v1::StageKind_Name(k));
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// Streams one evaluation's events into the row until it ends.
void Demo::FollowEvents(Row* row, const std::string& id, const std::string& prefix) {
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.viewer, 0);
  v1::WatchEvaluationRequest req;
  req.set_id(id);
  std::unique_ptr<grpc::ClientReader<v1::EvaluationEvent>> reader = stub_->WatchEvaluation(&ctx, req);
  v1::EvaluationEvent ev;
  while (reader->Read(&ev)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ev.has_stage()) {
      const v1::Stage& st = ev.stage();
      if (st.status() == v1::STAGE_RUNNING) {
        row->SetActivity(prefix + StageName(st.kind()));
      } else if (st.status() == v1::STAGE_FAILED) {
        row->SetActivity(prefix + StageName(st.kind()) + " failed");
      }
    } else if (ev.has_progress()) {
      const v1::Progress& p = ev.progress();
      std::string text = prefix + StageName(p.stage());
      if (p.repetitions_planned() > 0) {
        absl::StrAppendFormat(&text, " %d/%d", p.repetition(), p.repetitions_planned());
      }
      if (p.current_estimate() > 0) absl::StrAppendFormat(&text, " %.2fx", p.current_estimate());
      if (!p.metric().empty()) absl::StrAppend(&text, " ", p.metric());
      if (!p.message().empty()) absl::StrAppend(&text, ": ", p.message());
      row->SetActivity(text);
    } else if (ev.event_case() == v1::EvaluationEvent::kState && prefix.empty()) {
      row->state = ev.state();
      if (ev.state() == v1::RUNNING) row->SetActivity("starting");
    }
  }
  reader->Finish();
}

void Demo::Follow(Row* row) {
  FollowEvents(row, row->id, "");
  // Noise may leave it inconclusive: then its second part, on a calm node,
  // decides (v1::Evaluation::continued_by).
  for (absl::StatusOr<v1::Evaluation> e = Get(row->id);
       !giving_up_ && e.ok() && !e->continued_by().empty(); e = Get(row->id)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      row->id = row->watched_id = e->continued_by();
      row->node_id.clear();
    }
    FollowEvents(row, row->id, "second part: ");
  }
  // Then the merge queue: it may re-measure against a moved tip first.
  std::string followed_remeasure;
  while (!giving_up_) {
    absl::StatusOr<v1::Evaluation> e = Get(row->id);
    if (e.ok()) {
      const v1::MergeState m = e->merge().state();
      const bool final_state = e->state() == v1::FINISHED || e->state() == v1::CANCELLED ||
                               e->state() == v1::DEAD;
      const bool settled = final_state && m != v1::MERGE_QUEUED && m != v1::REMEASURING;
      std::optional<v1::Evaluation> remeasure;
      if (settled && !e->merge().remeasure_evaluation_id().empty()) {
        absl::StatusOr<v1::Evaluation> re = Get(e->merge().remeasure_evaluation_id());
        if (!re.ok()) {  // Asked again below: the verdict table needs it.
          absl::SleepFor(absl::Milliseconds(500));
          continue;
        }
        remeasure = std::move(*re);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        row->state = e->state();
        if (row->watched_id == row->id) row->node_id = e->node_id();
        if (settled) {
          row->remeasure = std::move(remeasure);
          row->final = *e;
          row->settled = true;
          row->SetActivity("done");
          return;
        }
        if (m == v1::MERGE_QUEUED) row->SetActivity("accepted; merge queued");
      }
      const std::string& re = e->merge().remeasure_evaluation_id();
      if (m == v1::REMEASURING && !re.empty() && re != followed_remeasure) {
        followed_remeasure = re;
        {
          std::lock_guard<std::mutex> lock(mu_);
          row->watched_id = re;
          row->node_id.clear();  // Until the live view finds where it runs.
        }
        FollowEvents(row, re, "re-measure on the new tip: ");
        continue;
      }
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

std::string Demo::NodeName(const std::string& id) {
  auto it = node_names_.find(id);
  return it == node_names_.end() ? id.substr(0, 8) : it->second;
}

std::string DecisionText(const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) return absl::AsciiStrToLower(v1::EvaluationState_Name(e.state()));
  std::string text = absl::AsciiStrToLower(v1::Decision_Name(e.verdict().decision()));
  for (const v1::Reason& r : e.verdict().reasons()) {
    if (r.code() != v1::VERIFIED && r.code() != v1::REASON_CODE_UNSPECIFIED) {
      absl::StrAppend(&text, " (", absl::AsciiStrToLower(v1::ReasonCode_Name(r.code())), ")");
      break;
    }
  }
  return text;
}

void Demo::Show(bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  // Per row, the activities that another replaced before this redraw.
  std::vector<std::vector<std::string>> replaced(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    Row& r = *rows_[i];
    const std::string where = r.node_id.empty() ? "" : NodeName(r.node_id);
    auto line = [&](const std::string& what) {
      return absl::StrFormat("  %-24s %-7s %s", r.candidate->name, where, what);
    };
    for (size_t k = 0; k + 1 < r.unshown.size(); ++k) replaced[i].push_back(line(r.unshown[k]));
    r.unshown.clear();
    std::string what = r.settled ? DecisionText(r.final) : r.activity;
    if (r.settled && r.final.merge().state() == v1::MERGED) what += ", merged";
    lines.push_back(line(what));
  }
  if (tty_) {
    if (shown_lines_ > 0) out_ << "\x1b[" << shown_lines_ << "A";
    out_ << "\x1b[K" << Elapsed(start_) << (final ? " all decided" : " running") << "\n";
    for (const std::string& l : lines) out_ << "\x1b[K" << l << "\n";
    shown_lines_ = static_cast<int>(lines.size()) + 1;
  } else {
    // A log: one line per change, none skipped.
    for (size_t i = 0; i < rows_.size(); ++i) {
      std::string& last = last_printed_[rows_[i].get()];
      replaced[i].push_back(lines[i]);
      for (const std::string& l : replaced[i]) {
        if (last == l) continue;
        last = l;
        out_ << Elapsed(start_) << l << "\n";
      }
    }
  }
  out_.flush();
}

bool Demo::WaitAndShow() {
  std::vector<std::thread> watchers;
  for (auto& r : rows_) watchers.emplace_back(&Demo::Follow, this, r.get());
  bool all = false;
  const absl::Time deadline = start_ + o_.timeout;
  while (!all && absl::Now() < deadline) {
    bool decided = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all = std::all_of(rows_.begin(), rows_.end(), [](const auto& r) { return r->settled; });
      decided = std::all_of(rows_.begin(), rows_.end(), [](const auto& r) {
        return r->state == v1::FINISHED || r->state == v1::CANCELLED || r->state == v1::DEAD;
      });
    }
    if (decided) StartBisect();
    // Which node holds each running candidate (not part of the event stream).
    std::vector<std::pair<Row*, std::string>> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& r : rows_) {
        if (!r->settled && (r->state == v1::RUNNING || r->watched_id != r->id)) {
          running.push_back({r.get(), r->watched_id});
        }
      }
    }
    for (auto& [row, id] : running) {
      absl::StatusOr<v1::Evaluation> e = Get(id);
      std::lock_guard<std::mutex> lock(mu_);
      if (e.ok() && row->watched_id == id) row->node_id = e->node_id();
    }
    Show(all);
    if (!all) absl::SleepFor(absl::Seconds(1));
  }
  if (!all) {
    // Watchers block on streams of a scheduler that is about to stop.
    giving_up_ = true;
    for (auto& n : nodes_) n->Stop(absl::Seconds(1));
    scheduler_->Stop(absl::Seconds(1));
  }
  for (std::thread& t : watchers) t.join();
  return all;
}

std::string Metrics(const v1::Verdict& v) {
  std::vector<std::string> parts;
  for (const v1::MetricComparison& m : v.metrics()) {
    parts.push_back(absl::StrCat(m.metric(), " ", results::SpeedupText(m)));
  }
  return absl::StrJoin(parts, "; ");
}

int Demo::Verdicts() {
  out_ << "\nverdicts\n";
  out_ << absl::StrFormat("  %-24s %-16s %-26s %-8s %s\n", "candidate", "submitted as",
                          "decision", "merged", "expected");
  int mismatches = 0;
  for (const auto& r : rows_) {
    const ScenarioCandidate& c = *r->candidate;
    const v1::Evaluation& e = r->final;
    std::string miss = Mismatch(c, e);
    std::string expected = miss.empty() ? "ok" : "NO: " + miss;
    if (!miss.empty() && o_.allow_inconclusive) {
      const v1::Evaluation* remeasure = r->remeasure ? &*r->remeasure : nullptr;
      if (const std::string why = InconclusiveOnly(c, e, remeasure); !why.empty()) {
        ++inconclusive_;
        expected = "undecided (allowed): " + why;
        miss.clear();
      }
    }
    if (!miss.empty()) ++mismatches;
    out_ << absl::StrFormat(
        "  %-24s %-16s %-26s %-8s %s\n", c.name,
        absl::StrCat(c.submitter, "/", c.kind == v1::CI ? "ci" : "experiment"), DecisionText(e),
        e.merge().state() == v1::MERGED ? "yes" : "no", expected);
    if (e.has_verdict()) {
      const std::string m = Metrics(e.verdict());
      if (!m.empty()) out_ << "      " << m << "\n";
      for (const v1::Reason& reason : e.verdict().reasons()) {
        if (reason.code() == v1::VERIFIED) continue;
        out_ << "      - " << reason.message() << "\n";
      }
    }
  }
  return mismatches;
}

void Demo::HostState() {
  v1::HostSteadiness host;
  int evaluations = 0;
  for (const auto& r : rows_) {
    for (const v1::Evaluation* e : {&r->final, r->remeasure ? &*r->remeasure : nullptr}) {
      // (Evaluations that measured no pair read no probe.)
      if (e == nullptr || e->verdict().provenance().host().probe_reads() == 0) continue;
      const v1::HostSteadiness& h = e->verdict().provenance().host();
      if (host.probe_reads() == 0 || h.probe_fastest_ms() < host.probe_fastest_ms()) {
        host.set_probe_fastest_ms(h.probe_fastest_ms());
      }
      host.set_probe_slowest_ms(std::max(host.probe_slowest_ms(), h.probe_slowest_ms()));
      host.set_probe_reads(host.probe_reads() + h.probe_reads());
      host.set_pairs_measured_again(host.pairs_measured_again() + h.pairs_measured_again());
      host.set_pairs_kept_unsteady(host.pairs_kept_unsteady() + h.pairs_kept_unsteady());
      host.set_seconds_waited(host.seconds_waited() + h.seconds_waited());
      ++evaluations;
    }
  }
  out_ << "\nhost state\n";
  if (evaluations == 0) {
    out_ << "  machine probe: no pair was measured\n";
  } else {
    out_ << absl::StrFormat(
        "  machine probe %.1f-%.1f ms over %d reads in %d evaluations (a quiet host of the "
        "development VM reads about 5 ms, its slow phases 7-19 ms); %d pair(s) measured again, "
        "%d kept although the probe moved, %.0f s waited for the host to settle\n",
        host.probe_fastest_ms(), host.probe_slowest_ms(), host.probe_reads(), evaluations,
        host.pairs_measured_again(), host.pairs_kept_unsteady(), host.seconds_waited());
  }
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.admin);
  v1::ListNodesResponse resp;
  if (grpc::Status s = stub_->ListNodes(&ctx, v1::ListNodesRequest(), &resp); !s.ok()) {
    out_ << "  nodes: " << s.error_message() << "\n";
    return;
  }
  for (const v1::Node& n : resp.nodes()) {
    std::string line = absl::StrFormat("  %s %s, A/A calibration noise %.2f%%%s", n.name(),
                                       absl::AsciiStrToLower(v1::NodeState_Name(n.state())),
                                       100 * n.calibration_noise(), OverRepoLimit(n));
    const auto q = quarantines_.find(n.name());
    if (q != quarantines_.end()) {
      std::vector<std::string> noises;
      for (double x : q->second) noises.push_back(absl::StrFormat("%.2f%%", 100 * x));
      absl::StrAppendFormat(&line, "; quarantined %d time(s) before it calibrated calm (%s)",
                            q->second.size(), absl::StrJoin(noises, ", "));
    }
    out_ << line << "\n";
  }
}

void Demo::StartBisect() {
  if (!scenario_.bisection.has_value() || bisect_.joinable()) return;
  const ScenarioBisection& b = *scenario_.bisection;
  bisect_started_at_ = Elapsed(start_);
  platform::ProcessSpec& spec = bisect_spec_;
  spec.argv = {o_.densegate_binary, "bisect", "--server", address_, "--token", tokens_.ci,
               "--repo", repo_.dir, "--metric", b.metric, "--good", repo_.first_version_sha,
               "--bad", repo_.bisection_shas.back(), "--parallel", "2", "--json"};
  spec.stdout_path = o_.out_dir + "/bisect.json";
  spec.stderr_path = o_.out_dir + "/logs/bisect.log";
  spec.isolate_network = false;  // It talks to the scheduler on loopback.
  spec.wall_timeout = std::max(o_.timeout - (absl::Now() - start_), absl::Minutes(2));
  bisect_ = std::thread([this] {
    bisect_result_ = launcher_->Run(bisect_spec_);
    bisect_finished_at_ = Elapsed(start_);
  });
}

bool Demo::FinishBisect() {
  if (!scenario_.bisection.has_value()) return true;
  const ScenarioBisection& b = *scenario_.bisection;
  const std::string expected = repo_.bisection_shas[b.culprit - 1];
  out_ << absl::StrFormat(
      "\nbisection: %s, %d commits pushed off the first version without the gate; densegate "
      "bisect --metric %s --good %s --bad %s (started at %s, when every candidate was "
      "decided)\n",
      b.branch, b.commits.size(), b.metric, repo_.first_version_sha.substr(0, 12),
      repo_.bisection_shas.back().substr(0, 12), bisect_started_at_);
  out_.flush();
  if (bisect_.joinable()) bisect_.join();
  const platform::ProcessSpec& spec = bisect_spec_;
  const absl::StatusOr<platform::ProcessResult>& r = bisect_result_;
  // With --json it writes only errors here; the steps come from its JSON.
  for (absl::string_view line :
       absl::StrSplit(platform::ReadOutputFile(spec.stderr_path), '\n', absl::SkipEmpty())) {
    out_ << "  " << line << "\n";
  }
  if (!r.ok() || !r->ok()) {
    out_ << "  NO: densegate bisect " << (r.ok() ? r->Describe() : std::string(r.status().message()))
         << " (see " << spec.stderr_path << ")\n";
    return false;
  }
  const nlohmann::json result = nlohmann::json::parse(
      platform::ReadOutputFile(spec.stdout_path), nullptr, /*allow_exceptions=*/false);
  const std::string culprit =
      result.is_object() ? result.value("culprit", std::string()) : std::string();
  for (const nlohmann::json& step :
       result.is_object() ? result.value("steps", nlohmann::json::array()) : nlohmann::json()) {
    out_ << absl::StrFormat("  %s  %s  %s\n", step.value("commit", std::string()).substr(0, 12),
                            step.value("text", std::string()), step.value("result", std::string()));
  }
  const bool found = culprit == expected;
  out_ << absl::StrFormat("  culprit %s \"%s\" at %s: %s\n", culprit.substr(0, 12),
                          result.is_object() ? result.value("subject", std::string()) : "",
                          bisect_finished_at_,
                          found ? "ok" : "NO: expected " + expected.substr(0, 12));
  return found;
}

absl::Status Demo::WriteReport() {
  absl::StatusOr<std::unique_ptr<results::Store>> store = results::OpenStore(db_url_);
  if (!store.ok()) return store.status();
  results::ReportRequest request;
  request.repo = repo_.dir;
  absl::StatusOr<nlohmann::json> report = results::BuildReport(**store, request, absl::Now());
  if (!report.ok()) return report.status();
  for (const char* format : {"html", "md", "json"}) {
    const std::string path = absl::StrCat(o_.out_dir, "/report.", format);
    std::ofstream file(path);
    file << (std::string(format) == "html" ? results::RenderHtml(*report)
             : std::string(format) == "md" ? results::RenderMarkdown(*report)
                                           : report->dump(2) + "\n");
    if (!file) return absl::InternalError("cannot write " + path);
  }
  out_ << absl::StrFormat("\nreport: %s/report.html (also report.md, report.json)\n",
                          fs::absolute(o_.out_dir).lexically_normal().string());
  return absl::OkStatus();
}

int Demo::Run() {
  if (absl::Status s = Prepare(); !s.ok()) {
    out_ << "densegate demo: " << s.message() << "\n";
    return absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsFailedPrecondition(s)
               ? kExitUsage
               : kExitInfrastructure;
  }
  if (o_.prepare_only) return 0;
  for (absl::Status (Demo::*step)() : {&Demo::StartServices, &Demo::AwaitNodes, &Demo::SubmitAll}) {
    if (absl::Status s = (this->*step)(); !s.ok()) {
      out_ << "densegate demo: " << s.message() << "\n";
      return kExitInfrastructure;
    }
  }
  const bool all = WaitAndShow();
  if (!all) {
    if (bisect_.joinable()) bisect_.join();  // Its scheduler has stopped.
    out_ << "densegate demo: not every candidate was decided within "
         << absl::FormatDuration(o_.timeout) << "; logs in " << o_.out_dir << "/logs\n";
    return kExitInfrastructure;
  }
  const int mismatches = Verdicts();
  const bool bisected = FinishBisect();
  HostState();
  for (auto& n : nodes_) n->Stop(absl::Seconds(10));
  scheduler_->Stop(absl::Seconds(10));
  if (absl::Status s = WriteReport(); !s.ok()) {
    out_ << "densegate demo: report: " << s.message() << "\n";
    return kExitInfrastructure;
  }
  out_ << absl::StrFormat("%s: %d of %d candidates got the decision they should",
                          mismatches == 0 && bisected ? "PASS" : "FAIL",
                          rows_.size() - mismatches - inconclusive_, rows_.size());
  if (inconclusive_ > 0) {
    out_ << absl::StrFormat(", %d undecided (inconclusive, allowed by --allow_inconclusive)",
                            inconclusive_);
  }
  if (scenario_.bisection.has_value()) {
    out_ << (bisected ? ", the bisection found its culprit" : ", the bisection did NOT find its culprit");
  }
  out_ << ", in " << Elapsed(start_) << "\n";
  return mismatches == 0 && bisected ? 0 : kExitMismatch;
}

}  // namespace

int RunDemo(const DemoOptions& options, std::ostream& out) { return Demo(options, out).Run(); }

}  // namespace densegate::demo
