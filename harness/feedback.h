// The dense feedback bundle an evaluation leaves behind, and the verdict's
// compact JSON form that `densegate eval --json` prints.
//
// Bundle layout (the directory given with --out):
//   verdict.json    the compact verdict (VerdictJson)
//   feedback.json   what an agent reads first: which metrics moved beyond
//                   noise, by how much, ranked, attributed to a component,
//                   and why the decision is what it is
//   samples.json    every raw sample, in measurement order
//   stages.json     each stage with status, duration, summary, log file
//   precision/      one JSON per precision suite: the baseline's and the
//                   candidate's error curves against fp64, bound, outcome
//   logs/           stdout and stderr of every process the harness ran
//
// Thread-safety: free functions.
#ifndef DENSEGATE_HARNESS_FEEDBACK_H_
#define DENSEGATE_HARNESS_FEEDBACK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.pb.h"

namespace densegate::harness {

// decision, reasons, policy, stages [{name, status, seconds}], metrics
// [{name, unit, direction, baseline, candidate, speedup, ci_low, ci_high,
// n_pairs}], claims [{metric, claimed, verified}].
nlohmann::json VerdictJson(const v1::Verdict& verdict);

// The ranked summary of feedback.json.
nlohmann::json FeedbackJson(const v1::Verdict& verdict);

// Writes the bundle into `dir` (nothing when empty). `verdict` is null when
// the evaluation ended in an infrastructure error, which is recorded instead.
void WriteFeedbackBundle(const std::string& dir, const v1::Verdict* verdict,
                         const std::vector<v1::Stage>& stages,
                         const std::vector<v1::Sample>& samples,
                         const absl::Status& infrastructure_error);

// Writes precision/<suite>.json into `dir` (nothing when empty).
void WritePrecisionCurve(const std::string& dir, const std::string& suite,
                         const nlohmann::json& curve);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_FEEDBACK_H_
