// A repository revision as the manifest validator sees it (RepoTree), from
// the file list git gives, and the protected-path match the preflight
// stage uses.
//
// Thread-safety: GitTree is immutable once built.
#ifndef DENSEGATE_HARNESS_WORKSPACE_GIT_TREE_H_
#define DENSEGATE_HARNESS_WORKSPACE_GIT_TREE_H_

#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "manifest/manifest.h"

namespace densegate::harness {

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

#endif  // DENSEGATE_HARNESS_WORKSPACE_GIT_TREE_H_
