// The demo's scenario: the workload's first version and the candidate
// commits submitted against it, each with the decision it must get. Read from
// examples/scenario.json; the patches it names live beside it.
//
// Thread-safety: plain values.
#ifndef DENSEGATE_DEMO_SCENARIO_H_
#define DENSEGATE_DEMO_SCENARIO_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/densegate.pb.h"

namespace densegate::demo {

struct ScenarioCandidate {
  std::string name;     // Also the candidate's branch in the scratch repo.
  std::string patch;    // Absolute path of the diff, applied to the first version.
  std::string message;  // Commit message.
  // Whose token submits it: "ci" (may target the branch) or "agent".
  std::string submitter;
  v1::CandidateKind kind = v1::EXPERIMENT;
  std::string hypothesis;
  std::vector<v1::Claim> claims;
  // A declared change of numerics (v1::Candidate::precision_change).
  std::string precision_change;
  bool merge = false;  // Targets the scenario's branch (ci only).
  // What must happen. An expected ACCEPT also needs every claim verified.
  v1::Decision expect_decision = v1::ACCEPT;
  v1::ReasonCode expect_reason = v1::REASON_CODE_UNSPECIFIED;  // For rejects.
  bool expect_merged = false;
  bool expect_gain = false;  // Counted as a verified gain.
};

// Commits pushed to a branch off the first version without the gate; the
// demo bisects them for `metric` and expects `culprit` to be found.
struct ScenarioBisection {
  std::string branch;
  std::string metric;
  struct Commit {
    std::string patch;  // Absolute path, applied on top of the previous commit.
    std::string message;
  };
  std::vector<Commit> commits;
  int culprit = 0;  // 1-based index into commits.
};

struct Scenario {
  std::string first_version_patch;  // Absolute path.
  std::string first_version_message;
  std::string target_branch;
  std::vector<ScenarioCandidate> candidates;
  std::optional<ScenarioBisection> bisection;
};

// Parses `path`; patch paths are resolved against its directory and must
// exist. InvalidArgument names the field that is wrong.
absl::StatusOr<Scenario> LoadScenario(const std::string& path);

}  // namespace densegate::demo

#endif  // DENSEGATE_DEMO_SCENARIO_H_
