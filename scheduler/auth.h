// Bearer-token authentication and per-role authorization for the gRPC
// services.
//
// A tokens file has one token per line: `ROLE TOKEN [PRINCIPAL]`, where ROLE
// is ci, agent, viewer, node or admin; blank lines and lines starting with
// '#' are ignored. Clients send `authorization: Bearer TOKEN` metadata. The
// principal (default: the role) is what the audit log and the candidate's
// submitter record; it is never taken from a request.
//
// Without a tokens file the authenticator is open: every caller is
// `admin:local`. The server only allows that on a loopback address.
//
// Thread-safe after construction (read-only).
#ifndef DENSEGATE_SCHEDULER_AUTH_H_
#define DENSEGATE_SCHEDULER_AUTH_H_

#include <initializer_list>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace densegate::scheduler {

enum class Role { kCi, kAgent, kViewer, kNode, kAdmin };

const char* RoleName(Role r);

struct Principal {
  Role role = Role::kViewer;
  std::string name;  // e.g. "ci", "agent:campaign-7"
};

class Authenticator {
 public:
  // Open (no tokens).
  Authenticator() = default;
  // Parses a tokens file; InvalidArgument names the line.
  static absl::StatusOr<Authenticator> FromFile(const std::string& path);
  static absl::StatusOr<Authenticator> FromText(const std::string& text);

  bool open() const { return tokens_.empty(); }

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
  std::map<std::string, Principal> tokens_;
};

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_AUTH_H_
