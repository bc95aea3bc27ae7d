// Workspace: the agent's own clone of a campaign's repository, where each
// experiment is made on a fresh checkout of the branch's tip, committed and
// pushed to the repository as `densegate/agent/CAMPAIGN/KEY` for the
// scheduler to evaluate. The agent never pushes to the campaign's branch:
// only the merge queue lands changes there.
//
// Thread-safety: one campaign run uses it, on one thread.
#ifndef DENSEGATE_AGENT_WORKSPACE_H_
#define DENSEGATE_AGENT_WORKSPACE_H_

#include <string>

#include "absl/status/statusor.h"
#include "platform/git/git.h"

namespace densegate::agent {

class Workspace {
 public:
  // `git` is not owned. `dir` (and its parents) is created on first use,
  // holding what it fetched from `repo`.
  Workspace(std::string dir, std::string repo, const platform::Git* git)
      : dir_(std::move(dir)), repo_(std::move(repo)), git_(git) {}

  const std::string& dir() const { return dir_; }

  // Fetches `branch` from the repository; its tip's full sha.
  absl::StatusOr<std::string> FetchTip(const std::string& branch);
  // A clean checkout of `sha` (fetched before) on the work branch.
  absl::Status Reset(const std::string& sha);
  // Commits what the worktree holds changed (a proposer may have committed
  // already); the commit, and `git diff --shortstat` from `base`, which is
  // empty when nothing changed.
  struct Change {
    std::string sha;
    std::string shortstat;
  };
  absl::StatusOr<Change> Commit(const std::string& base, const std::string& message);
  // Pushes HEAD to the repository as `ref` (refs/heads/...), replacing it.
  absl::Status Push(const std::string& ref);

 private:
  absl::StatusOr<std::string> Git(std::vector<std::string> args);

  std::string dir_, repo_;
  const platform::Git* git_;
};

}  // namespace densegate::agent

#endif  // DENSEGATE_AGENT_WORKSPACE_H_
