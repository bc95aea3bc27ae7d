// `densegate serve`: the scheduler (gRPC) on one address, over the store.
#include <csignal>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/synchronization/notification.h"
#include "cli/command.h"
#include "cli/store_flag.h"
#include "scheduler/server.h"

namespace densegate::cli {
namespace {

struct ServeArgs {
  std::string address = "127.0.0.1:7433";
  std::string db;
  std::string tokens;
  std::string port_file;
  std::string http_address;
  std::string tls_cert, tls_key;
  int lease_s = 60;
  int heartbeat_s = 10;
  int max_attempts = 3;
  double max_noise = 0.05;
  double second_part_share = 0.1;
  int calibration_period_s = 6 * 3600;
  int feedback_max_mib = static_cast<int>(results::FeedbackPolicy().max_bytes >> 20);
  int feedback_keep_per_branch = results::FeedbackPolicy().keep_per_branch;
  std::vector<std::string> agent_branches;
  std::vector<std::string> approval_branches;
  int max_concurrent_claims = results::StoreOptions().max_concurrent_claims;
};

absl::Notification* g_stop = nullptr;

void OnSignal(int) {
  if (g_stop != nullptr && !g_stop->HasBeenNotified()) g_stop->Notify();
}

int Serve(const ServeArgs& a) {
  absl::StatusOr<std::unique_ptr<results::Store>> store =
      OpenStoreFromFlag(a.db, {.migrate = true, .max_concurrent_claims = a.max_concurrent_claims});
  if (!store.ok()) {
    std::cerr << "densegate serve: " << store.status().message() << "\n";
    return kExitUsage;
  }
  scheduler::ServerOptions o;
  o.address = a.address;
  o.tokens_file = a.tokens;
  o.http_address = a.http_address;
  o.tls_cert_file = a.tls_cert;
  o.tls_key_file = a.tls_key;
  o.scheduler.lease_duration = absl::Seconds(a.lease_s);
  o.scheduler.heartbeat_interval_s = a.heartbeat_s;
  o.scheduler.max_attempts = a.max_attempts;
  o.scheduler.max_calibration_noise = a.max_noise;
  o.scheduler.second_part_share = a.second_part_share;
  o.scheduler.calibration_period = absl::Seconds(a.calibration_period_s);
  o.scheduler.feedback.max_bytes = int64_t{a.feedback_max_mib} << 20;
  o.scheduler.feedback.keep_per_branch = a.feedback_keep_per_branch;
  o.scheduler.agent_branches = a.agent_branches;
  o.scheduler.approval_branches = a.approval_branches;
  absl::StatusOr<std::unique_ptr<scheduler::SchedulerServer>> server =
      scheduler::SchedulerServer::Start(o, std::move(*store));
  if (!server.ok()) {
    std::cerr << "densegate serve: " << server.status().message() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                        : kExitInfrastructure;
  }
  std::cerr << "densegate serve: listening on port " << (*server)->port() << " (store "
            << a.db << ")\n";
  if (!a.port_file.empty()) {
    // Written whole, then renamed: a reader never sees a partial number.
    std::string tmp = a.port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n" << (*server)->http_port() << "\n";
    std::rename(tmp.c_str(), a.port_file.c_str());
  }
  absl::Notification stop;
  g_stop = &stop;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  stop.WaitForNotification();
  std::cerr << "densegate serve: shutting down\n";
  (*server)->Shutdown();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the scheduler: gRPC API for CI, agents and nodes.");
  cmd->add_option("--address", args->address, "host:port to listen on (port 0: any free port)")
      ->capture_default_str();
  AddDbFlag(cmd, &args->db);
  cmd->add_option("--tokens", args->tokens,
                  "tokens file (`densegate token create` adds to it; read again when it "
                  "changes); without it only loopback addresses are allowed and every "
                  "caller is admin");
  cmd->add_option("--port_file", args->port_file,
                  "write the bound gRPC port (and on a second line the HTTP port) here");
  cmd->add_option("--tls_cert", args->tls_cert, "server certificate (PEM): serve TLS only");
  cmd->add_option("--tls_key", args->tls_key, "server private key (PEM)");
  cmd->add_option("--http_address", args->http_address,
                  "host:port serving GET /metrics (Prometheus text format) and GET /report "
                  "(HTML, ?format=md|json, viewer token); off when empty");
  cmd->add_option("--lease_s", args->lease_s, "lease lifetime without heartbeats")
      ->capture_default_str();
  cmd->add_option("--heartbeat_s", args->heartbeat_s, "node heartbeat interval")
      ->capture_default_str();
  cmd->add_option("--max_attempts", args->max_attempts,
                  "infrastructure failures before an evaluation is DEAD")
      ->capture_default_str();
  cmd->add_option("--max_calibration_noise", args->max_noise,
                  "nodes whose A/A noise (CV) exceeds this are quarantined")
      ->capture_default_str();
  cmd->add_option("--second_part_share", args->second_part_share,
                  "share of each repository's error budget kept for one second part of an "
                  "evaluation that noise leaves inconclusive, on a calm node (0: none; "
                  "below 0.375, what the first look does not spend)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.37));
  cmd->add_option("--calibration_period_s", args->calibration_period_s,
                  "an active node measures its noise again this often")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--feedback_max_mib", args->feedback_max_mib,
                  "largest feedback bundle a node may upload (nodes leave out traces, then "
                  "the largest logs, to fit)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--agent_branches", args->agent_branches,
                  "branches agent tokens may aim experiments at (policy gain, through the merge "
                  "queue); none by default")
      ->delimiter(',');
  cmd->add_option("--approval_branches", args->approval_branches,
                  "branches where an accepted experiment waits for a person's approval "
                  "(densegate approve / decline, roles maintainer or admin) before it lands")
      ->delimiter(',');
  cmd->add_option("--feedback_keep_per_branch", args->feedback_keep_per_branch,
                  "per repository and target branch, the newest bundles that keep their "
                  "files; older ones keep feedback.json only (0: keep all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max_concurrent_claims", args->max_concurrent_claims,
                  "PostgreSQL: claim statements this scheduler has in flight at once, each "
                  "serving every node that waits for it, queued on one connection (0: no "
                  "limit, no batches); replicas on one database add up (scheduler/README.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->callback([args, exit_code] { *exit_code = Serve(*args); });
}

}  // namespace densegate::cli
