// Field paths and repository-relative paths, shared by the manifest's
// parsing and its validation. Private to manifest/.
#ifndef DENSEGATE_MANIFEST_INTERNAL_FIELD_PATH_H_
#define DENSEGATE_MANIFEST_INTERNAL_FIELD_PATH_H_

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace densegate::internal {

// "benchmarks" and 2 -> "benchmarks[2]".
inline std::string Indexed(absl::string_view base, int i) {
  return absl::StrCat(base, "[", i, "]");
}

// Why `path` (a runner, results, protected or executable path) would not
// stay inside the worktree, or nullopt when it does (an empty one does).
inline std::optional<std::string> RelativePathProblem(const std::string& path) {
  if (path.empty()) return std::nullopt;
  if (path.front() == '/') {
    return absl::StrFormat("\"%s\" must be relative to the repository root", path);
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::StrFormat("\"%s\" must not leave the repository ('..')", path);
    }
  }
  return std::nullopt;
}

}  // namespace densegate::internal

#endif  // DENSEGATE_MANIFEST_INTERNAL_FIELD_PATH_H_
