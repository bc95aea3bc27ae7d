// Reading what benchmarks and test runners print: Google Benchmark JSON,
// one-object JSON from end-to-end tools, and JUnit XML (which `bazel test`
// also writes). Every parser names what it expected and what it found.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_HARNESS_PARSE_BENCHMARK_OUTPUT_H_
#define DENSEGATE_HARNESS_PARSE_BENCHMARK_OUTPUT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

// One entry of Google Benchmark's "benchmarks" array (iteration runs only;
// aggregates such as _mean are skipped). Times are in nanoseconds.
struct BenchmarkRun {
  std::string name;
  int64_t iterations = 0;
  double real_time_ns = 0;
  double cpu_time_ns = 0;
  // Counters: bytes_per_second, items_per_second and user counters.
  std::map<std::string, double> counters;
};

// InvalidArgument when `json` is not Google Benchmark's JSON output;
// FailedPrecondition when a benchmark reported an error (SkipWithError, e.g.
// its own check of the result it timed failed).
absl::StatusOr<std::vector<BenchmarkRun>> ParseGoogleBenchmarkJson(absl::string_view json);

// The value of `metric` (source = benchmark name, field = real_time,
// cpu_time, bytes_per_second, items_per_second or a counter; default
// real_time) in `runs`. With repetitions, the median over them, or the best
// one (lowest or highest by the metric's direction) when the metric's
// aggregate is REPETITION_BEST.
absl::StatusOr<double> GoogleBenchmarkMetric(const std::vector<BenchmarkRun>& runs,
                                             const v1::MetricSpec& metric);

// Seconds of timed work the runs claim: sum of real_time x iterations. The
// harness checks it against how long the process actually lived.
double ClaimedTimedSeconds(const std::vector<BenchmarkRun>& runs);

// The number at a dotted `path` ("latency.tpot.median") in a JSON object.
absl::StatusOr<double> JsonNumberAt(absl::string_view json, absl::string_view path);

// The numeric members of the object at dotted `path` in a command's JSON
// output (other members are skipped). NotFound / InvalidArgument like
// JsonNumberAt.
absl::StatusOr<std::map<std::string, double>> JsonNumbersAt(absl::string_view json,
                                                            absl::string_view path);

// What a serving command generated (OutputCheck.source): at dotted `path`,
// an array with one entry per request, the generated token ids (an array of
// integers) or null for a request that failed (std::nullopt). NotFound /
// InvalidArgument like JsonNumberAt, naming the first bad entry.
using GeneratedTokens = std::vector<std::optional<std::vector<int64_t>>>;
absl::StatusOr<GeneratedTokens> JsonTokenSequencesAt(absl::string_view json,
                                                     absl::string_view path);

// Test cases of a JUnit XML document (<testsuites> or <testsuite> root).
absl::StatusOr<std::vector<v1::TestCaseResult>> ParseJUnitXml(absl::string_view xml);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_PARSE_BENCHMARK_OUTPUT_H_
