#include "scheduler/auth.h"

#include <sys/stat.h>

#include <iostream>
#include <map>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace densegate::scheduler {

namespace {

// What tells a changed file: a replaced one (rename) has another inode, an
// edited one another size or modification time.
using FileIdentity = std::tuple<ino_t, off_t, int64_t, int64_t>;

std::optional<FileIdentity> Identify(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
}

std::map<std::string, Principal> Table(const std::vector<TokenEntry>& entries) {
  std::map<std::string, Principal> table;
  for (const TokenEntry& e : entries) table[e.hash] = Principal{e.role, e.principal};
  return table;
}

}  // namespace

struct Authenticator::State {
  std::string path;  // Empty: tokens from text, never reread.
  absl::Duration recheck;
  absl::Mutex mu;
  std::map<std::string, Principal> tokens ABSL_GUARDED_BY(mu);
  std::optional<FileIdentity> identity ABSL_GUARDED_BY(mu);
  absl::Time checked ABSL_GUARDED_BY(mu);

  // The principal of a token's hash, after reading the file again if it
  // changed since it was last read.
  std::optional<Principal> Find(const std::string& hash) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock l(&mu);
    const absl::Time now = absl::Now();
    if (!path.empty() && now - checked >= recheck) {
      checked = now;
      std::optional<FileIdentity> current = Identify(path);
      if (current.has_value() && current != identity) {
        identity = current;
        absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokens(path);
        if (entries.ok()) {
          tokens = Table(*entries);
          std::cerr << "tokens: read " << entries->size() << " tokens from " << path << "\n";
        } else {
          std::cerr << "tokens: " << entries.status().message()
                    << "; the tokens read before stay in use\n";
        }
      }
    }
    auto it = tokens.find(hash);
    if (it == tokens.end()) return std::nullopt;
    return it->second;
  }
};

absl::StatusOr<Authenticator> Authenticator::FromText(const std::string& text) {
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokens(text);
  if (!entries.ok()) return entries.status();
  Authenticator a;
  a.state_ = std::make_shared<State>();
  absl::MutexLock l(&a.state_->mu);
  a.state_->tokens = Table(*entries);
  return a;
}

absl::StatusOr<Authenticator> Authenticator::FromFile(const std::string& path,
                                                      absl::Duration recheck) {
  std::optional<FileIdentity> identity = Identify(path);
  absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokens(path);
  if (!entries.ok()) return entries.status();
  Authenticator a;
  a.state_ = std::make_shared<State>();
  a.state_->path = path;
  a.state_->recheck = recheck;
  absl::MutexLock l(&a.state_->mu);
  a.state_->tokens = Table(*entries);
  a.state_->identity = identity;
  a.state_->checked = absl::Now();
  return a;
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
  std::optional<Principal> principal = state_->Find(HashToken(authorization));
  if (!principal.has_value()) return absl::UnauthenticatedError("unknown or revoked token");
  if (principal->role == Role::kAdmin) return *principal;
  for (Role r : allowed) {
    if (r == principal->role) return *principal;
  }
  return absl::PermissionDeniedError(
      absl::StrFormat("role %s may not call this", RoleName(principal->role)));
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
