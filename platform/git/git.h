// The few git operations densegate needs (the harness's worktrees, the
// scheduler's merge queue, the demo's scratch repositories), run as child
// processes through a ProcessLauncher (trusted: they never execute
// candidate code).
//
// Thread-safety: each call is independent; concurrent calls on one
// repository follow git's own locking.
#ifndef DENSEGATE_PLATFORM_GIT_GIT_H_
#define DENSEGATE_PLATFORM_GIT_GIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/process/launcher.h"

namespace densegate::platform {

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

}  // namespace densegate::platform

#endif  // DENSEGATE_PLATFORM_GIT_GIT_H_
