// A minimal HTTP/1.1 server for the scheduler's pages: GET only, one
// request per connection, one thread, a fixed table of paths (e.g. /metrics
// in Prometheus' text format, /report). Enough for a scraper every few
// seconds and a manager's browser, with no dependency beyond POSIX sockets.
// Bind it to loopback unless a proxy adds TLS.
//
// Thread-safe: Start once; handlers run on the server thread.
#ifndef DENSEGATE_SCHEDULER_HTTP_SERVER_H_
#define DENSEGATE_SCHEDULER_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace densegate::scheduler {

struct HttpRequest {
  std::string path;                          // "/report"
  std::map<std::string, std::string> query;  // Percent-decoded.
  std::string authorization;                 // The header's value, or "".

  // The query's value for `key`, or "".
  std::string Query(const std::string& key) const {
    auto it = query.find(key);
    return it == query.end() ? std::string() : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  // `address` is host:port (port 0 picks one); `routes` maps a path to its
  // handler (anything else: 404; other methods: 405).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& address, std::map<std::string, HttpHandler> routes);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  void Serve();
  HttpResponse Handle(const std::string& request) const;

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::map<std::string, HttpHandler> routes_;
  std::thread thread_;
};

// "a%20b+c" -> "a b c".
std::string PercentDecode(const std::string& text);

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_HTTP_SERVER_H_
