// The tokens file: who may call the scheduler, in which role.
//
// One token per line, `ROLE sha256:HEX PRINCIPAL`: ROLE is ci, agent, viewer,
// node, maintainer (a viewer who may approve or decline merges that await
// a person) or admin; HEX is the SHA-256 of the token (the token itself is never
// stored: whoever reads the file cannot call the scheduler with it);
// PRINCIPAL is what the audit log and a candidate's submitter record (default:
// the role), and for a node token the one node name it may register and act
// as. Blank lines and lines starting with '#' are ignored.
//
// `densegate token create|list|revoke` edit the file; the server reads it
// again when it changes, so a revoked token stops working without a restart.
//
// Thread-safety: free functions. The editing functions replace the file
// atomically (a reader sees the old or the new file) but two editors at once
// may lose one's change.
#ifndef DENSEGATE_SCHEDULER_TOKENS_H_
#define DENSEGATE_SCHEDULER_TOKENS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace densegate::scheduler {

// kMaintainer: a viewer who may also approve or decline what awaits a
// person's approval in the merge queue.
enum class Role { kCi, kAgent, kViewer, kNode, kMaintainer, kAdmin };

const char* RoleName(Role r);
std::optional<Role> ParseRole(absl::string_view name);

struct TokenEntry {
  Role role = Role::kViewer;
  std::string hash;       // 64 lowercase hex digits.
  std::string principal;  // e.g. "ci", "agent:campaign-7", a node's name.
};

// Lowercase hex SHA-256 of `token`.
std::string HashToken(absl::string_view token);

// A new random token ("dg_" and 64 hex digits: 256 bits from getrandom).
absl::StatusOr<std::string> NewToken();

// The entries of a tokens file's text. InvalidArgument names the line: an
// unknown role, a token in plain text (the message gives the line to write
// instead), a node token without its node's name, a repeated hash.
absl::StatusOr<std::vector<TokenEntry>> ParseTokens(absl::string_view text);
absl::StatusOr<std::vector<TokenEntry>> ReadTokens(const std::string& path);

// `ROLE sha256:HEX PRINCIPAL`.
std::string FormatToken(const TokenEntry& entry);

// Adds a token for `role` and `principal` (empty: the role's name) to the
// file, creating it (mode 0600) when missing, and returns the token: the only
// time it is shown.
absl::StatusOr<std::string> CreateToken(const std::string& path, Role role,
                                        std::string principal);

// Removes every token whose principal is `which`, or whose hash starts with
// `which` (at least 8 hex digits, with or without "sha256:"). Returns how many
// went; NotFound when none matched.
absl::StatusOr<int> RevokeTokens(const std::string& path, absl::string_view which);

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_TOKENS_H_
