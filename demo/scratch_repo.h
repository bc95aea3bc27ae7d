// The demo's target repository: a fresh git repository holding this
// project's own workload (kernels/, runtime/, third_party/, WORKSPACE) with
// the demo manifest, at the scenario's first version on the branch, and one
// branch per candidate (its patch applied to the first version), and the
// scenario's bisection branch (its commits in order).
//
// Thread-compatible: one call builds one repository.
#ifndef DENSEGATE_DEMO_SCRATCH_REPO_H_
#define DENSEGATE_DEMO_SCRATCH_REPO_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "demo/scenario.h"
#include "platform/git/git.h"

namespace densegate::demo {

struct ScratchRepoOptions {
  // A git checkout of densegate: the workload files are its tracked files
  // (with local edits) under kernels/, runtime/, third_party/ and WORKSPACE.
  std::string source_root;
  // Holds densegate.json (the manifest), bazelrc and quick.json.
  std::string workload_dir;
  // Created, or emptied first when it exists.
  std::string dir;
  // Merges workload_dir/quick.json (fewer pairs, a smaller serving run) into
  // the manifest; its "benchmarks" entries patch the benchmark of that name.
  bool quick = false;
};

struct ScratchRepo {
  std::string dir;
  std::string first_version_sha;
  std::map<std::string, std::string> candidate_sha;  // By candidate name.
  // The scenario's bisection branch, oldest commit first.
  std::vector<std::string> bisection_shas;
};

// FailedPrecondition naming the patch when one no longer applies.
absl::StatusOr<ScratchRepo> CreateScratchRepo(const ScratchRepoOptions& options,
                                              const Scenario& scenario, const platform::Git& git);

}  // namespace densegate::demo

#endif  // DENSEGATE_DEMO_SCRATCH_REPO_H_
