#include "agent/workspace.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace densegate::agent {

absl::StatusOr<std::string> Workspace::Git(std::vector<std::string> args) {
  // The agent's commits name it; the person running it is in the token.
  args.insert(args.begin(), {"-c", "user.name=densegate agent", "-c",
                             "user.email=agent@densegate.invalid", "-c", "commit.gpgsign=false"});
  return git_->Run(dir_, args);
}

absl::StatusOr<std::string> Workspace::FetchTip(const std::string& branch) {
  if (!std::filesystem::exists(dir_ + "/.git")) {
    std::error_code error;
    std::filesystem::create_directories(dir_, error);
    if (error) return absl::InternalError(absl::StrCat("cannot make ", dir_, ": ", error.message()));
    if (absl::StatusOr<std::string> init = Git({"init", "-q"}); !init.ok()) return init.status();
  }
  absl::StatusOr<std::string> fetched =
      Git({"fetch", "-q", "--no-tags", repo_, "+refs/heads/" + branch + ":refs/remotes/campaign/" + branch});
  if (!fetched.ok()) return fetched.status();
  absl::StatusOr<std::string> sha = Git({"rev-parse", "refs/remotes/campaign/" + branch});
  if (!sha.ok()) return sha.status();
  return std::string(absl::StripAsciiWhitespace(*sha));
}

absl::Status Workspace::Reset(const std::string& sha) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"checkout", "-q", "-f", "-B", "densegate-agent-work", sha},
        {"reset", "-q", "--hard", sha},
        {"clean", "-q", "-fdx"}}) {
    if (absl::StatusOr<std::string> r = Git(args); !r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<Workspace::Change> Workspace::Commit(const std::string& base,
                                                    const std::string& message) {
  if (absl::StatusOr<std::string> r = Git({"add", "-A"}); !r.ok()) return r.status();
  absl::StatusOr<std::string> staged = Git({"diff", "--cached", "--name-only"});
  if (!staged.ok()) return staged.status();
  if (!staged->empty()) {
    if (absl::StatusOr<std::string> r = Git({"commit", "-q", "-m", message}); !r.ok()) {
      return r.status();
    }
  }
  Change out;
  absl::StatusOr<std::string> head = Git({"rev-parse", "HEAD"});
  absl::StatusOr<std::string> stat = Git({"diff", "--shortstat", base, "HEAD"});
  if (!head.ok()) return head.status();
  if (!stat.ok()) return stat.status();
  out.sha = std::string(absl::StripAsciiWhitespace(*head));
  out.shortstat = std::string(absl::StripAsciiWhitespace(*stat));
  return out;
}

absl::Status Workspace::Push(const std::string& ref) {
  return Git({"push", "-q", "-f", repo_, "HEAD:" + ref}).status();
}

}  // namespace densegate::agent
