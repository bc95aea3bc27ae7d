// SchedulerServer: `densegate serve` as a library. Opens the store, builds
// the Scheduler, serves both gRPC services plus the standard health service
// on one address (port 0 picks a free port), optionally the HTTP pages
// (/metrics for Prometheus, /report for people), and runs a reaper that
// expires leases whose heartbeats stopped and advances the merge queue.
//
// Thread-safe: Start once, then Shutdown from any thread.
#ifndef DENSEGATE_SCHEDULER_SERVER_H_
#define DENSEGATE_SCHEDULER_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "results/store/store.h"
#include "scheduler/http_server.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

struct ServerOptions {
  // host:port; port 0 picks one.
  std::string address = "127.0.0.1:7433";
  // Tokens file; empty: open access (loopback addresses only).
  std::string tokens_file;
  SchedulerOptions scheduler;
  // PEM files; both set: the gRPC port speaks TLS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // host:port for the HTTP pages; empty: off. GET /metrics (Prometheus
  // text format, open) and GET /report?format=html|md|json&repo=&branch=
  // (viewer token as "Authorization: Bearer T" or ?token=T).
  std::string http_address;
  absl::Duration reap_interval = absl::Seconds(2);
};

// The scheduler's gRPC server settings (message size, polling threads),
// also what dispatch_bench's RPC floor is measured with.
void ApplyServerSettings(grpc::ServerBuilder& builder);

class SchedulerServer {
 public:
  // Serves `store` (opened by the caller, e.g. from --db).
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(
      const ServerOptions& options, std::unique_ptr<results::Store> store);
  ~SchedulerServer();

  int port() const { return port_; }
  // The HTTP pages' port; 0 when off.
  int http_port() const { return http_ ? http_->port() : 0; }
  // Stops accepting calls, ends long polls and watches, waits for handlers
  // (up to `grace`), then stops. Leases held by nodes stay valid in the
  // store: the nodes finish them against the next scheduler, or they expire.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  void Wait();

 private:
  SchedulerServer() = default;

  std::unique_ptr<results::Store> store_;
  std::unique_ptr<platform::ProcessLauncher> launcher_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::thread reaper_;
  absl::Notification stop_;
  int port_ = 0;
};

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_SERVER_H_
