#include "scheduler/auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace densegate::scheduler {

const char* RoleName(Role r) {
  switch (r) {
    case Role::kCi:
      return "ci";
    case Role::kAgent:
      return "agent";
    case Role::kViewer:
      return "viewer";
    case Role::kNode:
      return "node";
    case Role::kAdmin:
      return "admin";
  }
  return "viewer";
}

absl::StatusOr<Authenticator> Authenticator::FromText(const std::string& text) {
  Authenticator a;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() < 2 || f.size() > 3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: expected \"ROLE TOKEN [PRINCIPAL]\"", line_no));
    }
    Principal p;
    bool known = false;
    for (Role r : {Role::kCi, Role::kAgent, Role::kViewer, Role::kNode, Role::kAdmin}) {
      if (f[0] == RoleName(r)) {
        p.role = r;
        known = true;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: unknown role \"%s\" (ci, agent, viewer, node, admin)", line_no,
          f[0]));
    }
    if (f[1].size() < 8) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tokens file line %d: token shorter than 8 characters", line_no));
    }
    p.name = f.size() == 3 ? f[2] : f[0];
    if (!a.tokens_.emplace(f[1], p).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tokens file line %d: duplicate token", line_no));
    }
  }
  return a;
}

absl::StatusOr<Authenticator> Authenticator::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read the tokens file " + path);
  std::stringstream s;
  s << in.rdbuf();
  return FromText(s.str());
}

absl::StatusOr<Principal> Authenticator::AuthorizeBearer(
    absl::string_view authorization, std::initializer_list<Role> allowed) const {
  if (open()) return Principal{Role::kAdmin, "admin:local"};
  if (authorization.empty()) {
    return absl::UnauthenticatedError("missing \"authorization: Bearer TOKEN\"");
  }
  if (!absl::ConsumePrefix(&authorization, "Bearer ")) {
    return absl::UnauthenticatedError("authorization is not a Bearer token");
  }
  auto token = tokens_.find(std::string(authorization));
  if (token == tokens_.end()) return absl::UnauthenticatedError("unknown token");
  const Principal& principal = token->second;
  if (principal.role == Role::kAdmin) return principal;
  for (Role r : allowed) {
    if (r == principal.role) return principal;
  }
  return absl::PermissionDeniedError(
      absl::StrFormat("role %s may not call this", RoleName(principal.role)));
}

grpc::Status Authenticator::Authorize(const grpc::ServerContext* context,
                                      std::initializer_list<Role> allowed,
                                      Principal* principal) const {
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  absl::StatusOr<Principal> who = AuthorizeBearer(
      it == md.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size()),
      allowed);
  if (!who.ok()) {
    return grpc::Status(static_cast<grpc::StatusCode>(who.status().code()),
                        std::string(who.status().message()));
  }
  *principal = *who;
  return grpc::Status::OK;
}

}  // namespace densegate::scheduler
