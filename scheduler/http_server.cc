#include "scheduler/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace densegate::scheduler {

std::string PercentDecode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    int hex = 0;
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::SimpleHexAtoi(text.substr(i + 1, 2), &hex)) {
      out.push_back(static_cast<char>(hex));
      i += 2;
    } else {
      out.push_back(text[i] == '+' ? ' ' : text[i]);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& address, std::map<std::string, HttpHandler> routes) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError("HTTP address must be HOST:PORT, got " + address);
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return absl::InvalidArgumentError("HTTP host must be an IPv4 address, got " + host);
  }
  std::unique_ptr<HttpServer> s(new HttpServer);
  s->fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s->fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s->fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(s->fd_, 16) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ",
                                               std::strerror(errno)));
  }
  socklen_t len = sizeof sa;
  getsockname(s->fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  s->port_ = ntohs(sa.sin_port);
  s->routes_ = std::move(routes);
  s->thread_ = std::thread([raw = s.get()] { raw->Serve(); });
  return s;
}

HttpServer::~HttpServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
}

HttpResponse HttpServer::Handle(const std::string& request) const {
  // "GET /path?query HTTP/1.1\r\nHeader: value\r\n..."
  std::vector<std::string> lines = absl::StrSplit(request, "\r\n");
  std::vector<std::string> first = absl::StrSplit(lines.empty() ? "" : lines[0], ' ');
  if (first.size() != 3) return {400, "text/plain; charset=utf-8", "bad request\n"};
  if (first[0] != "GET") return {405, "text/plain; charset=utf-8", "only GET\n"};
  HttpRequest req;
  const size_t question = first[1].find('?');
  req.path = first[1].substr(0, question);
  if (question != std::string::npos) {
    for (absl::string_view pair : absl::StrSplit(first[1].substr(question + 1), '&')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      req.query[PercentDecode(kv.first)] = PercentDecode(kv.second);
    }
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (absl::StartsWithIgnoreCase(line, "authorization:")) {
      line.remove_prefix(std::string_view("authorization:").size());
      req.authorization = std::string(absl::StripAsciiWhitespace(line));
    }
  }
  auto route = routes_.find(req.path);
  if (route == routes_.end()) return {404, "text/plain; charset=utf-8", "not found\n"};
  return route->second(req);
}

void HttpServer::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{2, 0};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string request;
    char buf[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      ssize_t n = read(c, buf, sizeof buf);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    const HttpResponse r = Handle(request);
    const char* reason = r.status == 200   ? "OK"
                         : r.status == 400 ? "Bad Request"
                         : r.status == 401 ? "Unauthorized"
                         : r.status == 403 ? "Forbidden"
                         : r.status == 404 ? "Not Found"
                         : r.status == 405 ? "Method Not Allowed"
                         : r.status == 410 ? "Gone"
                                           : "Internal Server Error";
    const std::string response =
        absl::StrCat("HTTP/1.1 ", r.status, " ", reason, "\r\nContent-Type: ", r.content_type,
                     "\r\nContent-Length: ", r.body.size(),
                     // A page says what it is; nothing is sniffed into HTML.
                     "\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
                     r.body);
    size_t done = 0;
    while (done < response.size()) {
      ssize_t n = write(c, response.data() + done, response.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(c);
  }
}

}  // namespace densegate::scheduler
