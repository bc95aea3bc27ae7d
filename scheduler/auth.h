// Bearer-token authentication and per-role authorization for the gRPC
// services and the HTTP report.
//
// Tokens come from a tokens file (tokens.h: roles, SHA-256 hashes,
// principals). Clients send `authorization: Bearer TOKEN` metadata; the
// presented token's hash is looked up. The principal is what the audit log
// and the candidate's submitter record; it is never taken from a request. A
// node token's principal is the one node it may act as (Scheduler checks
// that against the node a call names).
//
// An authenticator read from a file reads it again when it changes (checked
// at most once per `recheck`), so revoking a token takes effect without a
// restart; a file that no longer parses keeps the tokens read before, and the
// error is printed. Without a tokens file the authenticator is open: every
// caller is `admin:local`, which the server allows only on a loopback
// address. A file with no tokens (all revoked) lets nobody in.
//
// Thread-safe. Copies share one table (and its reloads).
#ifndef DENSEGATE_SCHEDULER_AUTH_H_
#define DENSEGATE_SCHEDULER_AUTH_H_

#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/tokens.h"

namespace densegate::scheduler {

struct Principal {
  Role role = Role::kViewer;
  std::string name;  // e.g. "ci", "agent:campaign-7", a node's name
};

class Authenticator {
 public:
  // Open (no tokens).
  Authenticator() = default;
  // InvalidArgument names the line of a file that does not parse.
  static absl::StatusOr<Authenticator> FromFile(const std::string& path,
                                                absl::Duration recheck = absl::Seconds(1));
  static absl::StatusOr<Authenticator> FromText(const std::string& text);

  bool open() const { return state_ == nullptr; }

  // The caller's principal if its token is known and its role is one of
  // `allowed` (admin is always allowed); UNAUTHENTICATED or
  // PERMISSION_DENIED otherwise.
  grpc::Status Authorize(const grpc::ServerContext* context,
                         std::initializer_list<Role> allowed, Principal* principal) const;
  // The same for an `authorization` value ("Bearer TOKEN"; empty when the
  // caller sent none), e.g. from an HTTP request.
  absl::StatusOr<Principal> AuthorizeBearer(absl::string_view authorization,
                                            std::initializer_list<Role> allowed) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_AUTH_H_
