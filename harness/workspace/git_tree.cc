#include "harness/workspace/git_tree.h"

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace densegate::harness {

GitTree::GitTree(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    paths_.insert(f);
    for (size_t slash = f.find('/'); slash != std::string::npos;
         slash = f.find('/', slash + 1)) {
      paths_.insert(f.substr(0, slash));
    }
  }
}

bool GitTree::Exists(absl::string_view path) const {
  return paths_.find(absl::StripSuffix(path, "/")) != paths_.end();
}

bool IsUnderPath(absl::string_view path, absl::string_view protected_path) {
  protected_path = absl::StripSuffix(protected_path, "/");
  return path == protected_path ||
         (absl::StartsWith(path, protected_path) && path.size() > protected_path.size() &&
          path[protected_path.size()] == '/');
}

}  // namespace densegate::harness
