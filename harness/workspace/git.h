// The few git operations the harness needs, run as child processes of the
// harness (trusted: they never execute candidate code).
//
// Thread-safety: each call is independent; concurrent calls on one
// repository follow git's own locking.
#ifndef DENSEGATE_HARNESS_WORKSPACE_GIT_H_
#define DENSEGATE_HARNESS_WORKSPACE_GIT_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "harness/process/launcher.h"
#include "proto/manifest.h"

namespace densegate::harness {

class Git {
 public:
  // `launcher` is not owned and must outlive this object.
  explicit Git(ProcessLauncher* launcher) : launcher_(launcher) {}

  // Runs `git -C dir args...`; returns stdout. A failure names the command
  // and quotes git's stderr.
  absl::StatusOr<std::string> Run(absl::string_view dir,
                                  const std::vector<std::string>& args) const;
  // Full sha of `ref` as a commit. NotFound when it does not resolve.
  absl::StatusOr<std::string> ResolveCommit(absl::string_view repo,
                                            absl::string_view ref) const;
  // Content of `path` at `commit`. NotFound when the file is not there.
  absl::StatusOr<std::string> ShowFile(absl::string_view repo,
                                       absl::string_view commit,
                                       absl::string_view path) const;
  // Paths that differ between two commits (added, modified, deleted, and
  // both sides of a rename).
  absl::StatusOr<std::vector<std::string>> ChangedPaths(
      absl::string_view repo, absl::string_view from, absl::string_view to) const;
  // Every file at `commit`.
  absl::StatusOr<std::vector<std::string>> ListFiles(absl::string_view repo,
                                                     absl::string_view commit) const;

 private:
  ProcessLauncher* launcher_;
};

// A repository revision as a RepoTree (for manifest validation): files and
// the directories that hold them.
class GitTree : public RepoTree {
 public:
  explicit GitTree(const std::vector<std::string>& files);
  bool Exists(absl::string_view path) const override;

 private:
  std::set<std::string, std::less<>> paths_;
};

// Whether `path` is `protected_path` or lies under it (a directory).
bool IsUnderPath(absl::string_view path, absl::string_view protected_path);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_WORKSPACE_GIT_H_
