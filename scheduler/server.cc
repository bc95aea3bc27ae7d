#include "scheduler/server.h"

#include "absl/strings/match.h"
#include "grpcpp/health_check_service_interface.h"

namespace densegate::scheduler {

namespace {

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:");
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    const ServerOptions& options, std::unique_ptr<results::Store> store) {
  Authenticator auth;
  if (!options.tokens_file.empty()) {
    absl::StatusOr<Authenticator> a = Authenticator::FromFile(options.tokens_file);
    if (!a.ok()) return a.status();
    auth = std::move(*a);
  } else if (!IsLoopback(options.address)) {
    return absl::InvalidArgumentError(
        "--address " + options.address +
        " is not loopback: give --tokens so that callers are authenticated");
  }
  std::unique_ptr<SchedulerServer> s(new SchedulerServer);
  s->store_ = std::move(store);
  s->launcher_ = harness::NewSandboxLauncher();
  s->scheduler_ = std::make_unique<Scheduler>(s->store_.get(), std::move(auth), s->launcher_.get(),
                                              options.scheduler);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &s->port_);
  builder.RegisterService(s->scheduler_->client_service());
  builder.RegisterService(s->scheduler_->node_service());
  builder.SetMaxReceiveMessageSize(16 << 20);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError("cannot listen on " + options.address);
  }
  if (!options.metrics_address.empty()) {
    Scheduler* sched = s->scheduler_.get();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> m = MetricsHttpServer::Start(
        options.metrics_address, [sched] { return sched->RenderMetrics(); });
    if (!m.ok()) return m.status();
    s->metrics_ = std::move(*m);
  }
  const absl::Duration every = options.reap_interval;
  SchedulerServer* raw = s.get();
  s->reaper_ = std::thread([raw, every] {
    while (!raw->stop_.WaitForNotificationWithTimeout(every)) {
      raw->scheduler_->ReclaimExpiredLeases();
    }
  });
  return s;
}

void SchedulerServer::Shutdown(absl::Duration grace) {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  scheduler_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
  if (reaper_.joinable()) reaper_.join();
}

void SchedulerServer::Wait() { server_->Wait(); }

SchedulerServer::~SchedulerServer() {
  if (reaper_.joinable()) Shutdown(absl::Seconds(1));
}

}  // namespace densegate::scheduler
