// Per-slot checkouts of a baseline and a candidate commit.
//
// A node evaluates one job at a time per slot. Each slot keeps, per
// repository, two git worktrees (baseline/ and candidate/) at fixed paths
// under the workspace root, so a build tool's incremental state keyed by the
// path (Bazel's output base) survives from one candidate to the next; between
// runs they are reset
// to the new commits and cleaned of untracked and ignored files. The
// repository itself is fetched into one bare mirror per repository. Every
// process of the slot gets the slot's persistent HOME, whose
// ~/.cache/densegate links to a cache shared by all slots (Bazel's disk
// cache).
//
// Thread-safety: one Workspace per slot; not for concurrent use.
#ifndef DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_
#define DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_

#include <string>

#include "absl/status/statusor.h"
#include "harness/workspace/git.h"

namespace densegate::harness {

struct Checkout {
  std::string repo;       // As given: a local path or a URL.
  std::string mirror;     // Bare mirror the worktrees belong to.
  std::string baseline_sha;
  std::string candidate_sha;
  std::string baseline_dir;
  std::string candidate_dir;
  // HOME for every process of the slot.
  std::string home;
};

class Workspace {
 public:
  // `root` is created if missing. `git` is not owned.
  Workspace(std::string root, int slot, const Git* git)
      : root_(std::move(root)), slot_(slot), git_(git) {}

  // Fetches both commits and checks them out, clean. Local repositories
  // resolve refs (HEAD~1, branches) in the repository itself; URLs in the
  // mirror after fetching its branches and tags. NotFound for a ref that
  // does not resolve; FailedPrecondition for git failures (disk full, not a
  // repository), with git's message.
  absl::StatusOr<Checkout> Prepare(const std::string& repo,
                                   const std::string& baseline_ref,
                                   const std::string& candidate_ref);

  // Removes what the run left in both worktrees (untracked and ignored
  // files), keeping the worktrees for the next candidate.
  absl::Status Clean(const Checkout& checkout);

 private:
  absl::StatusOr<std::string> Mirror(const std::string& repo);
  absl::Status CheckoutAt(const std::string& mirror, const std::string& dir,
                          const std::string& sha);

  std::string root_;
  int slot_;
  const Git* git_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_
