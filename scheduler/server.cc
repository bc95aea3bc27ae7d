#include "scheduler/server.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "grpcpp/health_check_service_interface.h"

namespace densegate::scheduler {

namespace {

bool IsLoopback(const std::string& address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:");
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  if (path.empty()) return absl::InvalidArgumentError(std::string(flag) + " is required for TLS");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(std::string(flag) + ": cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(std::string(flag) + ": " + path + " is not PEM");
  }
  return s.str();
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
  s->launcher_ = platform::NewSandboxLauncher();
  s->scheduler_ = std::make_unique<Scheduler>(s->store_.get(), std::move(auth), s->launcher_.get(),
                                              options.scheduler);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "--tls_cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "--tls_key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &s->port_);
  builder.RegisterService(s->scheduler_->client_service());
  builder.RegisterService(s->scheduler_->node_service());
  ApplyServerSettings(builder);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError("cannot listen on " + options.address);
  }
  if (!options.http_address.empty()) {
    Scheduler* sched = s->scheduler_.get();
    std::map<std::string, HttpHandler> routes;
    routes["/metrics"] = [sched](const HttpRequest&) {
      return HttpResponse{200, "text/plain; version=0.0.4", sched->RenderMetrics()};
    };
    routes["/report"] = [sched](const HttpRequest& req) { return sched->ReportPage(req); };
    routes["/feedback"] = [sched](const HttpRequest& req) { return sched->FeedbackPage(req); };
    absl::StatusOr<std::unique_ptr<HttpServer>> http =
        HttpServer::Start(options.http_address, std::move(routes));
    if (!http.ok()) return http.status();
    s->http_ = std::move(*http);
  }
  const absl::Duration every = options.reap_interval;
  SchedulerServer* raw = s.get();
  s->reaper_ = std::thread([raw, every] {
    while (!raw->stop_.WaitForNotificationWithTimeout(every)) {
      raw->scheduler_->ReclaimExpiredLeases();
      raw->scheduler_->AdvanceMerges();
    }
  });
  return s;
}

void ApplyServerSettings(grpc::ServerBuilder& builder) {
  builder.SetMaxReceiveMessageSize(16 << 20);
  // Enough polling threads kept for a burst of node calls: the default (one)
  // makes gRPC start and stop threads under load (measured: about 12% more
  // dispatches/s with 8 nodes, docs/measurements/dispatch.md).
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 4);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 16);
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
