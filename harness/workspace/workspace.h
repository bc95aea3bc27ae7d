// Per-slot checkouts of a baseline and a candidate commit.
//
// A node evaluates one job at a time per slot. Each slot keeps, per
// repository, two git worktrees (baseline/ and candidate/) at fixed paths
// under the workspace root, so the baseline's incremental build state keyed
// by the path (Bazel's output base) survives from one evaluation to the
// next; between runs they are reset to the new commits and cleaned of
// untracked and ignored files. The repository itself is fetched into one bare mirror per
// repository.
//
// Each arm (ArmArea) has, beside its worktree, a HOME emptied at every
// Prepare whose .cache links to the arm's cache directory (Bazel's output
// base lives there, at the path the HOME's .bazelrc names), and, at .cache/densegate, the node's trusted build cache
// (Bazel's disk cache). Only baseline builds write the trusted cache: the
// baseline's cache directory persists and holds it writable; the
// candidate's is emptied at every Prepare too (nothing a candidate writes
// reaches a later evaluation), then gets a copy of the baseline's output
// base (SeedCandidate), and holds the trusted cache read-only, so a candidate build reuses what
// trusted builds cached but writes no entry a baseline build reads. When the node runs as root, each arm's areas are
// owned by its sandbox user (ArmUsers) and git never reads the worktree's
// own .git file (a candidate could point it elsewhere): it is rewritten
// first.
//
// Thread-safety: one Workspace per slot; not for concurrent use.
#ifndef DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_
#define DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/git/git.h"

namespace densegate::harness {

// Host users the arms' sandboxes run as; 0: leave ownership alone.
struct ArmUsers {
  uint32_t baseline = 0;
  uint32_t candidate = 0;
};

// What one arm's commands may see besides the system and their /tmp.
struct ArmArea {
  std::string home;   // HOME: empty at each Prepare, but for .cache.
  std::string cache;  // HOME/.cache links here; the baseline's persists.
  // Worktree, home, cache and, for the baseline, the trusted cache.
  std::vector<std::string> writable;
  // For the candidate, the trusted cache.
  std::vector<std::string> read_only;
};

struct Checkout {
  std::string repo;       // As given: a local path or a URL.
  std::string mirror;     // Bare mirror the worktrees belong to.
  std::string baseline_sha;
  std::string candidate_sha;
  std::string baseline_dir;
  std::string candidate_dir;
  ArmArea baseline;
  ArmArea candidate;
};

class Workspace {
 public:
  // `root` is created if missing. `git` is not owned.
  Workspace(std::string root, int slot, const platform::Git* git, ArmUsers users = {})
      : root_(std::move(root)), slot_(slot), git_(git), users_(users) {}

  // Fetches both commits and checks them out, clean. Local repositories
  // resolve refs (HEAD~1, branches) in the repository itself; URLs in the
  // mirror after fetching its branches and tags. NotFound for a ref that
  // does not resolve; FailedPrecondition for git failures (disk full, not a
  // repository), with git's message.
  absl::StatusOr<Checkout> Prepare(const std::string& repo,
                                   const std::string& baseline_ref,
                                   const std::string& candidate_ref);

  // Makes the candidate's Bazel output base a copy of the baseline's as it
  // is now (without its server's state), replacing whatever was there. Call
  // after the baseline's build and before the candidate's first command:
  // what the candidate did not change is then neither fetched from the
  // cache nor analysed from nothing, and what it writes there is gone at the
  // next Prepare. Nothing to copy before the baseline's first build.
  absl::Status SeedCandidate(const Checkout& checkout);

  // Removes what the run left in both worktrees (untracked and ignored
  // files), keeping the worktrees for the next candidate. Call only when no
  // process of the arms runs any more.
  absl::Status Clean(const Checkout& checkout);

  // The node's trusted build cache under `root` (only baseline builds write
  // it; nodes whose baselines run as one user may share it through a link).
  static std::string TrustedCache(const std::string& root) { return root + "/shared-cache"; }

 private:
  absl::StatusOr<std::string> Mirror(const std::string& repo);
  absl::Status CheckoutAt(const std::string& mirror, const std::string& dir,
                          const std::string& sha);
  // Runs git in a worktree after restoring its .git file from the mirror.
  absl::StatusOr<std::string> GitInWorktree(const std::string& mirror, const std::string& dir,
                                            const std::vector<std::string>& args);
  absl::StatusOr<ArmArea> PrepareArm(const std::string& slot, const std::string& arm,
                                     const std::string& worktree, uint32_t uid);

  std::string root_;
  int slot_;
  const platform::Git* git_;
  ArmUsers users_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_WORKSPACE_WORKSPACE_H_
