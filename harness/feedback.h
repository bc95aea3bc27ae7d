// The dense feedback bundle an evaluation leaves behind, and the verdict's
// compact JSON form that `densegate eval --json` prints.
//
// Bundle layout (the directory given with --out):
//   verdict.json    the compact verdict (VerdictJson)
//   feedback.json   what an agent reads first (schema: docs/feedback.md):
//                   which metrics moved beyond noise, by how much, ranked,
//                   attributed to a component, why the decision is what it
//                   is, and each stage with the first errors of its logs
//   samples.json    every raw sample, in measurement order
//   stages.json     each stage with status, duration, summary, log file
//   precision/      one JSON per precision suite: the baseline's and the
//                   candidate's error curves against fp64, bound, outcome
//   counters.json   per benchmark with declared counters (the runtime's time
//                   per stage), the median of each counter per arm
//   traces/         <benchmark>-<arm>.json: a trace (Chrome trace-event JSON,
//                   opens in Perfetto) of one unmeasured run per arm
//   logs/           stdout and stderr of every process the harness ran; the
//                   benchmarks' JSON is logs/bench-<name>-<arm>-<pair>.out
//
// Thread-safety: free functions.
#ifndef DENSEGATE_HARNESS_FEEDBACK_H_
#define DENSEGATE_HARNESS_FEEDBACK_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.pb.h"

namespace densegate::harness {

// A benchmark's own counters (BenchmarkSpec.counters), the median per arm
// over its measured runs.
struct CounterMedians {
  std::string benchmark;
  // The metrics the benchmark reports, which the counters explain.
  std::vector<std::string> metrics;
  // Counter name -> {baseline median, candidate median}.
  std::map<std::string, std::pair<double, double>> counters;
};

// decision, reasons, policy, stages [{name, status, seconds}], metrics
// [{name, unit, direction, baseline, candidate, speedup, ci_low, ci_high,
// n_pairs}], claims [{metric, claimed, verified}].
nlohmann::json VerdictJson(const v1::Verdict& verdict);

// The ranked summary of feedback.json. A moved metric whose benchmark has
// counters is attributed to the time counters (names ending in _ns, _us or
// _ms; one unit per benchmark) that changed most
// relative to their baseline, among those holding at least 1% of the
// largest time counter (so that noise in a tiny counter does not lead),
// with the other counters (volumes) that moved by 5% or more.
nlohmann::json FeedbackJson(const v1::Verdict& verdict,
                            const std::vector<CounterMedians>& counters = {});

// A line of a stage's logs that reports an error.
struct LogErrorLine {
  std::string file;  // Name under the log directory.
  int line = 0;      // From 1.
  std::string text;  // At most 300 characters.
};

// The first `max_lines` error lines (compiler and test-framework errors,
// failed checks, sanitizer reports, uncaught exceptions) of the logs that
// stage `kind` wrote into `log_dir`: standard error before standard output,
// then by file name; the first 8 MiB of each file; a line said again once.
std::vector<LogErrorLine> FirstErrorLines(const std::string& log_dir, v1::StageKind kind,
                                          int max_lines);

// Writes the bundle into `dir` (nothing when empty). `verdict` is null when
// the evaluation ended in an infrastructure error, which is recorded instead
// (with `evaluation_id`, which a verdict names itself).
void WriteFeedbackBundle(const std::string& dir, const v1::Verdict* verdict,
                         const std::vector<v1::Stage>& stages,
                         const std::vector<v1::Sample>& samples,
                         const std::vector<CounterMedians>& counters,
                         const absl::Status& infrastructure_error,
                         const std::string& evaluation_id = "");

// Writes precision/<suite>.json into `dir` (nothing when empty).
void WritePrecisionCurve(const std::string& dir, const std::string& suite,
                         const nlohmann::json& curve);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_FEEDBACK_H_
