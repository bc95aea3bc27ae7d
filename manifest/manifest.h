// Loading and validating a repository's manifest (`densegate.json`).
//
// The manifest is the `densegate.v1.Manifest` message written as JSON. Loading
// happens in two steps, and both report every problem they find with the
// field path it is about ("benchmarks[1].metrics[0].direction: ..."):
//   1. ParseManifest: JSON syntax (with line and column) and the schema
//      (unknown fields, wrong types, unknown enum values), through protobuf's
//      JSON parser.
//   2. ValidateManifest: the meaning (unknown ops, empty suites, bad lengths,
//      duplicate names, protected paths missing from the repository, ...).
// The harness always validates the manifest of the *baseline* commit, so a
// candidate cannot weaken its own gate.
//
// Thread-safety: free functions without shared state; RepoTree
// implementations must be safe to call from the thread that validates.
#ifndef DENSEGATE_MANIFEST_MANIFEST_H_
#define DENSEGATE_MANIFEST_MANIFEST_H_

#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "manifest/json_message.h"
#include "proto/densegate.pb.h"

namespace densegate {

// One problem found in a manifest (manifest/json_message.h).
using ManifestError = FieldError;

// Read-only view of the files of one repository revision, used to check that
// protected paths exist. Implementations: a directory on disk (below), and
// in the harness, a git tree at the baseline commit.
class RepoTree {
 public:
  virtual ~RepoTree() = default;
  // True if `path` (repository-relative, '/'-separated) names a file or a
  // directory in this revision.
  virtual bool Exists(absl::string_view path) const = 0;
};

// A RepoTree backed by a directory on the local filesystem.
class DirectoryTree : public RepoTree {
 public:
  explicit DirectoryTree(std::string root) : root_(std::move(root)) {}
  bool Exists(absl::string_view path) const override;

 private:
  std::string root_;
};

// The name the manifest has at a repository's root.
inline constexpr absl::string_view kManifestFileName = "densegate.json";

// A benchmark command's first word: when its inputs can be compared, its
// executable's path relative to the checkout.
std::string BenchmarkExecutable(const densegate::v1::BenchmarkSpec& b);

// Why the harness cannot tell whether `b` reads the same inputs in both
// arms (a pipeline, or a first word that is not a path in the checkout), or
// nullopt when it can.
std::optional<std::string> InputIdentityProblem(const densegate::v1::BenchmarkSpec& b);

// Whether `b` is skipped when its inputs are byte-identical in both arms:
// by default whenever they can be compared; "skip_when_identical": false
// opts out (see BenchmarkSpec.skip_when_identical).
bool SkipsWhenIdentical(const densegate::v1::BenchmarkSpec& b);

// Every metric the manifest's benchmark stage measures: each benchmark's
// metrics in order, then each timed kernel check's.
std::vector<std::string> MeasuredMetrics(const densegate::v1::Manifest& m);

// Whether an evaluation may be scoped to `scope` (v1::Candidate::
// metric_scope; empty: every metric): each scoped metric is one `m`
// measures, each claim is inside the scope, and under policy GAIN at least
// one scoped metric is primary (the gate needs one to see a gain).
// InvalidArgument naming the first problem.
absl::Status CheckMetricScope(const densegate::v1::Manifest& m,
                              const std::vector<std::string>& scope,
                              const std::vector<densegate::v1::Claim>& claims,
                              densegate::v1::Policy policy);

// Parses JSON text into a manifest. On failure returns the errors (at least
// one), each naming the field or the line and column.
absl::StatusOr<densegate::v1::Manifest> ParseManifest(
    absl::string_view json, std::vector<ManifestError>* errors);

// Checks the meaning of a parsed manifest against the repository it belongs
// to. Returns every error found; empty means valid.
std::vector<ManifestError> ValidateManifest(const densegate::v1::Manifest& m,
                                            const RepoTree& repo);

// What a valid manifest leaves open to a candidate that games its
// benchmarks: each GOOGLE_BENCHMARK metric without confirmed_by (a gain
// measured by the candidate's binary alone) and each JSON_COMMAND benchmark
// without outputs (its work is not compared). `densegate manifest check`
// prints them; they do not make the manifest invalid.
std::vector<ManifestError> ManifestWarnings(const densegate::v1::Manifest& m);

// Where OutputCheck benchmarks take each pair's seed in their command.
inline constexpr absl::string_view kSeedPlaceholder = "{seed}";

// Reads `path`, parses and validates it, with the repository root taken to
// be the directory holding the file. On any problem returns
// InvalidArgument (or NotFound for a missing file) and fills `errors`.
absl::StatusOr<densegate::v1::Manifest> LoadManifestFile(
    const std::string& path, std::vector<ManifestError>* errors);

}  // namespace densegate

#endif  // DENSEGATE_MANIFEST_MANIFEST_H_
