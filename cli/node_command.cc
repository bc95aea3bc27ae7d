// `densegate node`: a node worker pulling evaluations from the scheduler.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/build_info.h"
#include "cli/channel_flags.h"
#include "cli/command.h"
#include "harness/evaluator.h"
#include "harness/node/evaluator_job_runner.h"
#include "harness/node/node_worker.h"
#include "cli/sandbox_flags.h"
#include "harness/process/host_lock.h"

namespace densegate::cli {
namespace {

struct NodeArgs {
  harness::NodeWorkerOptions options;
  harness::EvaluatorOptions evaluator;
  std::string cpus;
  std::string ca = DefaultCaFile();
  std::string host_lock;
  int64_t precision_cache_mib = 1024;
  SandboxFlags sandbox;
};

int RunNode(NodeArgs& a) {
  if (a.options.token.empty()) {
    if (const char* t = std::getenv("DENSEGATE_TOKEN")) a.options.token = t;
  }
  for (absl::string_view c : absl::StrSplit(a.cpus, ',', absl::SkipEmpty())) {
    int id;
    if (!absl::SimpleAtoi(c, &id) || id < 0) {
      std::cerr << "densegate node: --cpus expects a list like 0,1, got \"" << a.cpus << "\"\n";
      return kExitUsage;
    }
    a.evaluator.cpus.push_back(id);
  }
  if (a.evaluator.workspace_root.empty()) {
    // One root per node: two nodes on one machine never share a slot.
    const char* home = std::getenv("HOME");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    a.evaluator.workspace_root =
        absl::StrCat(home ? home : "/tmp", "/.cache/densegate/nodes/",
                     a.options.name.empty() ? std::string(host) : a.options.name);
  }
  if (a.precision_cache_mib < 0) {
    std::cerr << "densegate node: --precision_cache_mib must be 0 or more\n";
    return kExitUsage;
  }
  a.evaluator.software_version = absl::StrCat(kVersion, "+", kGitCommit);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = ChannelCredentials(a.ca);
  if (!creds.ok()) {
    std::cerr << "densegate node: " << creds.status().message() << "\n";
    return kExitUsage;
  }
  a.options.credentials = *creds;
  std::unique_ptr<harness::HostLock> host_lock;
  if (!a.host_lock.empty()) {
    absl::StatusOr<std::unique_ptr<harness::HostLock>> opened = harness::HostLock::Open(a.host_lock);
    if (!opened.ok()) {
      std::cerr << "densegate node: " << opened.status().message() << "\n";
      return kExitUsage;
    }
    host_lock = *std::move(opened);
    a.evaluator.host_lock = host_lock.get();
  }
  absl::StatusOr<std::unique_ptr<platform::ProcessLauncher>> launcher =
      NewArmLauncher(a.sandbox, "node");
  if (!launcher.ok()) {
    std::cerr << "densegate node: " << launcher.status().message() << "\n";
    return kExitInfrastructure;
  }
  a.evaluator.sandbox_uid = a.sandbox.sandbox_uid;
  a.evaluator.candidate_uid = a.sandbox.candidate_uid;
  a.evaluator.arm_disk_quota_bytes = a.sandbox.arm_disk_quota_mib << 20;
  a.evaluator.arm_max_processes = a.sandbox.arm_max_processes;
  a.evaluator.isolation = Isolation(a.sandbox);
  harness::EvaluatorJobRunner runner(a.evaluator, a.precision_cache_mib << 20, launcher->get());
  harness::NodeWorker worker(a.options, &runner);
  absl::Status s = worker.Run();
  if (!s.ok()) {
    std::cerr << "densegate node: " << s.message() << "\n";
    return s.code() == absl::StatusCode::kUnauthenticated ||
                   s.code() == absl::StatusCode::kPermissionDenied
               ? kExitUsage
               : kExitInfrastructure;
  }
  return 0;
}

}  // namespace

void AddNodeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<NodeArgs>();
  if (const char* s = std::getenv("DENSEGATE_SERVER")) args->options.server = s;
  CLI::App* cmd = app.add_subcommand("node", "Run a node worker: pull evaluations and run them.");
  cmd->add_option("--server", args->options.server, "scheduler address ($DENSEGATE_SERVER)")
      ->capture_default_str();
  cmd->add_option("--token", args->options.token, "node token ($DENSEGATE_TOKEN)");
  cmd->add_option("--ca", args->ca, "CA bundle (PEM) to reach a TLS scheduler ($DENSEGATE_CA)");
  cmd->add_option("--name", args->options.name, "node name (default: host name)");
  cmd->add_option("--workspace", args->evaluator.workspace_root,
                  "worktrees and build caches (default ~/.cache/densegate/nodes/NAME)");
  cmd->add_option("--cpus", args->cpus, "pin measured processes to these CPUs, e.g. 0,1");
  cmd->add_option("--host_lock", args->host_lock,
                  "file the nodes sharing this machine lock so that each measurement runs "
                  "alone (every node on the machine passes the same path)");
  cmd->add_option("--precision_cache_mib", args->precision_cache_mib,
                  "memory for precision sweeps' baseline halves kept for later candidates "
                  "against the same baseline runner (0: none)")
      ->capture_default_str();
  AddSandboxFlags(cmd, &args->sandbox);
  cmd->add_option("--max_jobs", args->options.max_jobs, "exit after this many jobs (0: never)")
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = RunNode(*args); });
}

}  // namespace densegate::cli
