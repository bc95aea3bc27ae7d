// A minimal HTTP/1.1 endpoint serving Prometheus' text exposition format at
// GET /metrics (anything else: 404). One thread, one request per connection:
// enough for a scraper every few seconds, and no dependency beyond POSIX
// sockets. Bind it to loopback unless a proxy adds TLS and auth.
//
// Thread-safe: Start once; the body callback runs on the server thread.
#ifndef DENSEGATE_SCHEDULER_METRICS_HTTP_H_
#define DENSEGATE_SCHEDULER_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace densegate::scheduler {

class MetricsHttpServer {
 public:
  // `address` is host:port (port 0 picks one); `body` renders the metrics.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, std::function<std::string()> body);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void Serve();

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::function<std::string()> body_;
  std::thread thread_;
};

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_METRICS_HTTP_H_
