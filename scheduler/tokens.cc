#include "scheduler/tokens.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace densegate::scheduler {

namespace {

constexpr absl::string_view kHashPrefix = "sha256:";

bool IsHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read the tokens file " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` beside `path` and renames it over: readers see the old file
// or the new one, never half of one.
absl::Status ReplaceFile(const std::string& path, const std::string& text) {
  const std::string temp = path + ".new";
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot write %s: %s", temp, std::strerror(errno)));
  }
  // An existing file keeps its owner and mode (e.g. readable by the server's
  // group); a new one is its creator's alone.
  struct stat old;
  if (stat(path.c_str(), &old) == 0) {
    (void)fchown(fd, old.st_uid, old.st_gid);
    (void)fchmod(fd, old.st_mode & 07777);
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool written = done == text.size() && fsync(fd) == 0;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    unlink(temp.c_str());
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

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
    case Role::kMaintainer:
      return "maintainer";
    case Role::kAdmin:
      return "admin";
  }
  return "viewer";
}

std::optional<Role> ParseRole(absl::string_view name) {
  for (Role r :
       {Role::kCi, Role::kAgent, Role::kViewer, Role::kNode, Role::kMaintainer, Role::kAdmin}) {
    if (name == RoleName(r)) return r;
  }
  return std::nullopt;
}

std::string HashToken(absl::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(token.data(), token.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    return "";  // Matches no entry: every stored hash has 64 digits.
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), size));
}

absl::StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return absl::StrCat(
      "dg_", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), got)));
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokens(absl::string_view text) {
  std::vector<TokenEntry> entries;
  std::set<std::string> hashes;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() < 2 || f.size() > 3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: expected \"ROLE sha256:HEX [PRINCIPAL]\"", line_no));
    }
    std::optional<Role> role = ParseRole(f[0]);
    if (!role.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: unknown role \"%s\" (ci, agent, viewer, node, admin)", line_no,
          f[0]));
    }
    TokenEntry entry;
    entry.role = *role;
    entry.principal = f.size() == 3 ? f[2] : f[0];
    absl::string_view hash = f[1];
    if (!absl::ConsumePrefix(&hash, kHashPrefix)) {
      entry.hash = HashToken(f[1]);
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: the token is stored in plain text; write its hash instead: "
          "\"%s\" (densegate token create makes new ones)",
          line_no, FormatToken(entry)));
    }
    if (hash.size() != 64 || !IsHex(hash)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: the hash is not 64 lowercase hex digits", line_no));
    }
    if (entry.role == Role::kNode && f.size() != 3) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokens file line %d: a node token names the node it is for "
          "(\"node sha256:HEX NODE_NAME\")",
          line_no));
    }
    entry.hash = std::string(hash);
    if (!hashes.insert(entry.hash).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("tokens file line %d: the same token twice", line_no));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::vector<TokenEntry>> ReadTokens(const std::string& path) {
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokens(*text);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", entries.status().message()));
  }
  return entries;
}

std::string FormatToken(const TokenEntry& entry) {
  return absl::StrCat(RoleName(entry.role), " ", kHashPrefix, entry.hash, " ", entry.principal);
}

absl::StatusOr<std::string> CreateToken(const std::string& path, Role role,
                                        std::string principal) {
  if (principal.empty()) {
    if (role == Role::kNode) {
      return absl::InvalidArgumentError("a node token is for one node: give the node's name");
    }
    principal = RoleName(role);
  }
  if (absl::StrContains(principal, ' ') || absl::StrContains(principal, '\n')) {
    return absl::InvalidArgumentError("a principal has no spaces");
  }
  std::string text;
  if (access(path.c_str(), F_OK) == 0) {
    absl::StatusOr<std::string> old = ReadText(path);
    if (!old.ok()) return old.status();
    // A file the server could not read is not made worse.
    if (absl::StatusOr<std::vector<TokenEntry>> parsed = ParseTokens(*old); !parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
    }
    text = *std::move(old);
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  absl::StatusOr<std::string> token = NewToken();
  if (!token.ok()) return token.status();
  TokenEntry entry{role, HashToken(*token), principal};
  absl::StrAppend(&text, FormatToken(entry), "\n");
  if (absl::Status s = ReplaceFile(path, text); !s.ok()) return s;
  return token;
}

absl::StatusOr<int> RevokeTokens(const std::string& path, absl::string_view which) {
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  if (absl::StatusOr<std::vector<TokenEntry>> parsed = ParseTokens(*text); !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  absl::string_view prefix = which;
  absl::ConsumePrefix(&prefix, kHashPrefix);
  const bool by_hash = prefix.size() >= 8 && IsHex(prefix);
  std::string kept;
  int removed = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (!stripped.empty() && stripped[0] != '#') {
      // The file parsed: each such line is `ROLE sha256:HEX [PRINCIPAL]`.
      std::vector<absl::string_view> f = absl::StrSplit(stripped, ' ', absl::SkipWhitespace());
      absl::string_view hash = f[1].substr(kHashPrefix.size());
      absl::string_view principal = f.size() == 3 ? f[2] : f[0];
      if (principal == which || (by_hash && absl::StartsWith(hash, prefix))) {
        ++removed;
        continue;
      }
    }
    absl::StrAppend(&kept, line, "\n");
  }
  if (removed == 0) {
    return absl::NotFoundError(
        absl::StrFormat("no token of %s has the principal or hash \"%s\"", path, which));
  }
  // StrSplit gave one empty piece after the last newline.
  if (absl::EndsWith(kept, "\n\n")) kept.pop_back();
  if (absl::Status s = ReplaceFile(path, kept); !s.ok()) return s;
  return removed;
}

}  // namespace densegate::scheduler
