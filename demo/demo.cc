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
#include "platform/process/service_process.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "proto/densegate.grpc.pb.h"
#include "manifest/manifest.h"
#include "results/report/report.h"
#include "results/store/store.h"
#include "scheduler/tokens.h"
#include "demo/internal/demo_run.h"

namespace densegate::demo {
namespace internal {

namespace fs = std::filesystem;

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
  absl::StatusOr<std::unique_ptr<platform::ServiceProcess>> s = platform::ServiceProcess::Start(
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
  absl::StatusOr<std::unique_ptr<platform::ServiceProcess>> n = platform::ServiceProcess::Start(
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


absl::Status Demo::WriteReport() {
  absl::StatusOr<std::unique_ptr<results::Store>> store = results::OpenStore(db_url_);
  if (!store.ok()) return store.status();
  results::ReportRequest request;
  request.repo = repo_.dir;
  absl::StatusOr<results::Report> report = results::BuildReport(**store, request, absl::Now());
  if (!report.ok()) return report.status();
  for (const char* format : {"html", "md", "json"}) {
    const std::string path = absl::StrCat(o_.out_dir, "/report.", format);
    std::ofstream file(path);
    file << results::RenderReportFile(*report, format);
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

}  // namespace internal

int RunDemo(const DemoOptions& options, std::ostream& out) { return internal::Demo(options, out).Run(); }

}  // namespace densegate::demo
