// ValidateManifest: what a parsed manifest means, checked field by field
// (see manifest.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "manifest/internal/field_path.h"
#include "manifest/manifest.h"

namespace densegate {
namespace {

namespace pb = ::google::protobuf;
using ::densegate::v1::BenchmarkKind;
using ::densegate::v1::Direction;
using ::densegate::v1::Manifest;
using ::densegate::v1::ResultFormat;
using internal::Indexed;
using internal::RelativePathProblem;

constexpr int kSupportedSchemaVersion = 1;
constexpr int kMaxTimeoutSeconds = 24 * 3600;
constexpr int64_t kMaxPrecisionLength = 1 << 20;
constexpr int kMaxPairsLimit = 10000;

// The largest shape value a manifest may hold. The ops and their own limits
// are the runner's: it describes (or refuses) each shape when the
// evaluation asks, and its message becomes the stage's.
constexpr int64_t kMaxShapeValue = int64_t{1} << 30;

const std::set<std::string>& GoogleBenchmarkFields() {
  static const auto* fields = new std::set<std::string>{
      "real_time", "cpu_time", "bytes_per_second", "items_per_second"};
  return *fields;
}

// Collects errors with the current field path.
class Checker {
 public:
  void Error(std::string field, std::string message) {
    errors_.push_back({std::move(field), std::move(message)});
  }
  std::vector<ManifestError> Take() { return std::move(errors_); }

  void NonEmpty(const std::string& field, const std::string& value,
                absl::string_view what) {
    if (value.empty()) Error(field, absl::StrCat("required: ", what));
  }
  void Timeout(const std::string& field, int32_t value) {
    if (value < 0 || value > kMaxTimeoutSeconds) {
      Error(field, absl::StrFormat(
                       "must be between 0 (default) and %d seconds, got %d",
                       kMaxTimeoutSeconds, value));
    }
  }
  // `value` must be finite and > 0.
  void PositiveFinite(const std::string& field, double value,
                      absl::string_view what) {
    if (!std::isfinite(value) || value <= 0) {
      Error(field, absl::StrFormat("%s must be a finite number > 0, got %g",
                                   what, value));
    }
  }

 private:
  std::vector<ManifestError> errors_;
};

// Suite and metric names appear in reports, file names and CLI flags.
bool IsValidName(const std::string& name) {
  static const std::regex* re = new std::regex("[a-z0-9][a-z0-9_.\\-]*");
  return std::regex_match(name, *re);
}

// Tracks names that must be unique across the whole manifest.
class UniqueNames {
 public:
  explicit UniqueNames(absl::string_view what) : what_(what) {}
  void Add(Checker& c, const std::string& field, const std::string& name) {
    if (name.empty()) return;  // Reported as missing elsewhere.
    if (!IsValidName(name)) {
      c.Error(field, absl::StrFormat(
                         "%s \"%s\" must be lowercase letters, digits, '_', "
                         "'.' or '-', starting with a letter or digit",
                         what_, name));
    }
    auto [it, inserted] = first_.emplace(name, field);
    if (!inserted) {
      c.Error(field, absl::StrFormat("duplicate %s \"%s\" (first defined at %s)",
                                     what_, name, it->second));
    }
  }

 private:
  std::string what_;
  std::map<std::string, std::string> first_;
};

// A lowercase identifier ([a-z0-9_]+): what names an op or a variant.
void CheckWord(Checker& c, const std::string& field, const std::string& word,
               const char* what) {
  const bool ok = !word.empty() && std::all_of(word.begin(), word.end(), [](char ch) {
    return std::islower(static_cast<unsigned char>(ch)) ||
           std::isdigit(static_cast<unsigned char>(ch)) || ch == '_';
  });
  if (!ok) {
    c.Error(field, absl::StrFormat("%s\"%s\": must be %s in lowercase letters, digits and _",
                                   word.empty() ? "required: " : "", word, what));
  }
}

// Shape keys are words with values in [1, kMaxShapeValue]; `reserved` (the
// key the harness sets itself, if any) may not appear.
void CheckShape(Checker& c, const std::string& field, const pb::Map<std::string, int64_t>& shape,
                const char* reserved = nullptr) {
  for (const auto& [key, value] : shape) {
    const std::string f = absl::StrCat(field, ".", key);
    CheckWord(c, f, key, "a shape parameter, e.g. heads");
    if (reserved != nullptr && key == reserved) {
      c.Error(f, "set by the harness to each context length; leave it out");
    } else if (value < 1 || value > kMaxShapeValue) {
      c.Error(f, absl::StrFormat("must be between 1 and %d, got %d", kMaxShapeValue, value));
    }
  }
}

// Returns false (and reports) when `path` does not stay inside the worktree.
bool CheckRelativePath(Checker& c, const std::string& field,
                       const std::string& path) {
  std::optional<std::string> problem = RelativePathProblem(path);
  if (problem) c.Error(field, *problem);
  return !problem;
}

void CheckBuild(Checker& c, const Manifest& m) {
  if (!m.has_build()) {
    c.Error("build", "required: the command that builds the workload");
    return;
  }
  c.NonEmpty("build.command", m.build().command(), "a shell command");
  c.Timeout("build.timeout_s", m.build().timeout_s());
}

void CheckCorrectness(Checker& c, const Manifest& m, UniqueNames& suites) {
  for (int i = 0; i < m.correctness_size(); ++i) {
    const auto& s = m.correctness(i);
    std::string f = Indexed("correctness", i);
    c.NonEmpty(f + ".name", s.name(), "a suite name");
    suites.Add(c, f + ".name", s.name());
    c.NonEmpty(f + ".command", s.command(), "a shell command");
    c.Timeout(f + ".timeout_s", s.timeout_s());
    if (s.results() == v1::JUNIT_XML) {
      c.NonEmpty(f + ".results_path", s.results_path(),
                 "where the JUnit XML files are written (results: JUNIT_XML)");
    } else if (!s.results_path().empty()) {
      c.Error(f + ".results_path",
              "only used with results: JUNIT_XML");
    }
    CheckRelativePath(c, f + ".results_path", s.results_path());
  }
}

void CheckKernelChecks(Checker& c, const Manifest& m, UniqueNames& suites,
                       UniqueNames& metrics) {
  for (int i = 0; i < m.kernel_checks_size(); ++i) {
    const auto& k = m.kernel_checks(i);
    std::string f = Indexed("kernel_checks", i);
    c.NonEmpty(f + ".name", k.name(), "a check name");
    suites.Add(c, f + ".name", k.name());
    // Any op the repository's runner implements: it describes its buffers,
    // or says what is wrong with the shape, when the evaluation runs.
    CheckWord(c, f + ".op", k.op(), "an op of the kernel runner, e.g. kda_decode");
    c.NonEmpty(f + ".runner", k.runner(), "path of the kernel runner binary");
    CheckRelativePath(c, f + ".runner", k.runner());
    CheckShape(c, f + ".shape", k.shape());
    c.PositiveFinite(f + ".max_rel_rms", k.max_rel_rms(), "the error bound");
    if (k.calls() < 0 || k.calls() > 100000) {
      c.Error(f + ".calls",
              absl::StrFormat("must be between 0 (default) and 100000, got %d",
                              k.calls()));
    }
    metrics.Add(c, f + ".metric", k.metric());
    if (!k.variant().empty()) CheckWord(c, f + ".variant", k.variant(), "a variant, e.g. fused");
  }
}

void CheckPrecision(Checker& c, const Manifest& m, UniqueNames& suites) {
  for (int i = 0; i < m.precision_size(); ++i) {
    const auto& p = m.precision(i);
    std::string f = Indexed("precision", i);
    c.NonEmpty(f + ".name", p.name(), "a suite name");
    suites.Add(c, f + ".name", p.name());
    CheckWord(c, f + ".op", p.op(), "an op of the kernel runner that takes shape.tokens");
    CheckShape(c, f + ".shape", p.shape(), "tokens");
    c.NonEmpty(f + ".runner", p.runner(), "path of the kernel runner binary");
    CheckRelativePath(c, f + ".runner", p.runner());
    if (p.lengths().empty()) {
      c.Error(f + ".lengths", "required: at least one context length");
    }
    for (int j = 0; j < p.lengths_size(); ++j) {
      int64_t len = p.lengths(j);
      if (len < 1 || len > kMaxPrecisionLength) {
        c.Error(Indexed(f + ".lengths", j),
                absl::StrFormat("must be between 1 and %d tokens, got %d",
                                kMaxPrecisionLength, len));
      } else if (j > 0 && len <= p.lengths(j - 1)) {
        c.Error(Indexed(f + ".lengths", j),
                absl::StrFormat("lengths must be strictly increasing: %d "
                                "follows %d",
                                len, p.lengths(j - 1)));
      }
    }
    c.PositiveFinite(f + ".max_rel_rms", p.max_rel_rms(), "the error bound");
    double growth = p.max_growth_vs_baseline();
    if (!std::isfinite(growth) || (growth != 0 && growth < 1)) {
      c.Error(f + ".max_growth_vs_baseline",
              absl::StrFormat("must be 0 (default 2.0) or >= 1, got %g",
                              growth));
    }
    for (const auto& [key, value] : p.params()) {
      if (!std::isfinite(value)) {
        c.Error(absl::StrCat(f, ".params.", key), "must be a finite number");
      }
    }
  }
}

void CheckOutputs(Checker& c, const std::string& f, const v1::BenchmarkSpec& b) {
  if (!b.has_outputs()) return;
  if (b.kind() != v1::JSON_COMMAND) {
    c.Error(f + ".outputs", "only used with kind JSON_COMMAND");
    return;
  }
  c.NonEmpty(f + ".outputs.source", b.outputs().source(),
             "a dotted path to the array of generated token ids per request");
  const double agreement = b.outputs().min_token_agreement();
  if (!std::isfinite(agreement) || agreement < 0 || agreement > 1) {
    c.Error(f + ".outputs.min_token_agreement",
            absl::StrFormat("must be in [0, 1] (0: no precision change accepted), got %g",
                            agreement));
  }
  if (!absl::StrContains(b.command(), kSeedPlaceholder)) {
    c.Error(f + ".command",
            absl::StrFormat("with outputs, must contain %s where the harness puts each "
                            "pair's seed (e.g. --seed=%s), so that no build knows the prompts",
                            kSeedPlaceholder, kSeedPlaceholder));
  }
}

// Skipping an unchanged benchmark compares what its command reads, so only
// a command that is one program named by its path in the checkout can be
// skipped: a pipe, a list or a substitution could run something the
// comparison never saw.
void CheckInputIdentity(Checker& c, const std::string& f, const v1::BenchmarkSpec& b) {
  if (b.has_skip_when_identical() && !b.skip_when_identical().value()) {
    if (!b.reads().empty()) {
      c.Error(f + ".reads", "not used when skip_when_identical is false");
    }
    return;
  }
  if (b.skip_when_identical().value()) {
    if (std::optional<std::string> problem = InputIdentityProblem(b)) {
      c.Error(f + ".command", "skip_when_identical is true, but " + *problem);
      return;
    }
  }
  for (int i = 0; i < b.reads_size(); ++i) {
    c.NonEmpty(Indexed(f + ".reads", i), b.reads(i), "a path in the checkout");
    CheckRelativePath(c, Indexed(f + ".reads", i), b.reads(i));
  }
}

void CheckBenchmarks(Checker& c, const Manifest& m, UniqueNames& suites,
                     UniqueNames& metrics, int* primary_count) {
  for (int i = 0; i < m.benchmarks_size(); ++i) {
    const auto& b = m.benchmarks(i);
    std::string f = Indexed("benchmarks", i);
    c.NonEmpty(f + ".name", b.name(), "a benchmark name");
    suites.Add(c, f + ".name", b.name());
    if (b.kind() == v1::BENCHMARK_KIND_UNSPECIFIED) {
      c.Error(f + ".kind", "required: GOOGLE_BENCHMARK or JSON_COMMAND");
    }
    c.NonEmpty(f + ".command", b.command(), "a shell command");
    c.Timeout(f + ".timeout_s", b.timeout_s());
    if (b.metrics().empty()) {
      c.Error(f + ".metrics", "required: at least one metric to compare");
    }
    for (int j = 0; j < b.metrics_size(); ++j) {
      const auto& metric = b.metrics(j);
      std::string mf = Indexed(f + ".metrics", j);
      c.NonEmpty(mf + ".name", metric.name(), "a metric name");
      metrics.Add(c, mf + ".name", metric.name());
      c.NonEmpty(mf + ".source", metric.source(),
                 b.kind() == v1::JSON_COMMAND
                     ? "a dotted path into the command's JSON output"
                     : "the benchmark's name in the JSON output");
      c.NonEmpty(mf + ".unit", metric.unit(), "a unit, e.g. ns or tok/s");
      if (metric.direction() == v1::DIRECTION_UNSPECIFIED) {
        c.Error(mf + ".direction",
                "required: LOWER_IS_BETTER or HIGHER_IS_BETTER");
      }
      if (b.kind() == v1::GOOGLE_BENCHMARK && !metric.field().empty() &&
          GoogleBenchmarkFields().count(metric.field()) == 0) {
        c.Error(mf + ".field",
                absl::StrFormat("unknown Google Benchmark field \"%s\"; "
                                "expected one of %s",
                                metric.field(),
                                absl::StrJoin(GoogleBenchmarkFields(), ", ")));
      }
      if (b.kind() == v1::JSON_COMMAND && !metric.field().empty()) {
        c.Error(mf + ".field",
                "only used with kind GOOGLE_BENCHMARK; put the path in source");
      }
      if (b.kind() == v1::JSON_COMMAND && metric.aggregate() != v1::REPETITION_MEDIAN) {
        c.Error(mf + ".aggregate",
                "only used with kind GOOGLE_BENCHMARK; a JSON command prints one value");
      }
      if (metric.primary()) ++*primary_count;
    }
    CheckInputIdentity(c, f, b);
    if (b.kind() != v1::JSON_COMMAND) {
      if (!b.counters().empty()) c.Error(f + ".counters", "only used with kind JSON_COMMAND");
      if (!b.trace_arg().empty()) c.Error(f + ".trace_arg", "only used with kind JSON_COMMAND");
    } else if (!b.trace_arg().empty() &&
               b.trace_arg().find("{path}") == std::string::npos) {
      c.Error(f + ".trace_arg",
              "must contain {path}, where the trace file goes (e.g. \"--trace={path}\")");
    }
    CheckOutputs(c, f, b);
  }
}

// confirmed_by must name a timed kernel check's metric: a metric the
// harness itself times on verified calls.
void CheckConfirmations(Checker& c, const Manifest& m) {
  std::set<std::string> timed;
  for (const v1::KernelCheck& k : m.kernel_checks()) {
    if (!k.metric().empty()) timed.insert(k.metric());
  }
  for (int i = 0; i < m.benchmarks_size(); ++i) {
    for (int j = 0; j < m.benchmarks(i).metrics_size(); ++j) {
      const std::string& by = m.benchmarks(i).metrics(j).confirmed_by();
      if (by.empty() || timed.count(by) > 0) continue;
      c.Error(Indexed(Indexed("benchmarks", i) + ".metrics", j) + ".confirmed_by",
              absl::StrFormat("\"%s\" is not the metric of a timed kernel check; expected "
                              "one of: %s",
                              by, timed.empty() ? "(none declared)" : absl::StrJoin(timed, ", ")));
    }
  }
}

void CheckGate(Checker& c, const Manifest& m) {
  const auto& g = m.gate();
  auto fraction = [&](const char* name, double value) {
    if (!std::isfinite(value) || value < 0 || value >= 1) {
      c.Error(absl::StrCat("gate.", name),
              absl::StrFormat("must be a fraction in [0, 1) (0 = default), "
                              "got %g",
                              value));
    }
  };
  fraction("min_effect", g.min_effect());
  fraction("regression_budget", g.regression_budget());
  fraction("max_calibration_noise", g.max_calibration_noise());
  if (!std::isfinite(g.confidence()) ||
      (g.confidence() != 0 && (g.confidence() <= 0.5 || g.confidence() >= 1))) {
    c.Error("gate.confidence",
            absl::StrFormat("must be in (0.5, 1) (0 = default 0.95), got %g",
                            g.confidence()));
  }
  if (g.min_pairs() < 0 || g.min_pairs() > kMaxPairsLimit) {
    c.Error("gate.min_pairs", absl::StrFormat("must be between 0 and %d, got %d",
                                              kMaxPairsLimit, g.min_pairs()));
  }
  if (g.max_pairs() < 0 || g.max_pairs() > kMaxPairsLimit) {
    c.Error("gate.max_pairs", absl::StrFormat("must be between 0 and %d, got %d",
                                              kMaxPairsLimit, g.max_pairs()));
  } else if (g.max_pairs() != 0 && g.max_pairs() < g.min_pairs()) {
    c.Error("gate.max_pairs",
            absl::StrFormat("must be >= min_pairs (%d), got %d", g.min_pairs(),
                            g.max_pairs()));
  }
  if (!std::isfinite(g.claim_tolerance()) || g.claim_tolerance() < 0 ||
      g.claim_tolerance() > 1) {
    c.Error("gate.claim_tolerance",
            absl::StrFormat("must be in (0, 1] (0 = default), got %g",
                            g.claim_tolerance()));
  }
  if (!std::isfinite(g.sanity_ceiling()) ||
      (g.sanity_ceiling() != 0 && g.sanity_ceiling() <= 1)) {
    c.Error("gate.sanity_ceiling",
            absl::StrFormat("must be > 1 (0 = default), got %g",
                            g.sanity_ceiling()));
  }
}

void CheckProtectedPaths(Checker& c, const Manifest& m, const RepoTree& repo) {
  std::map<std::string, int> seen;
  bool protects_manifest = false;
  for (int i = 0; i < m.protected_paths_size(); ++i) {
    std::string f = Indexed("protected_paths", i);
    std::string path(absl::StripSuffix(m.protected_paths(i), "/"));
    if (path.empty()) {
      c.Error(f, "must not be empty");
      continue;
    }
    if (!CheckRelativePath(c, f, path)) continue;
    if (auto [it, inserted] = seen.emplace(path, i); !inserted) {
      c.Error(f, absl::StrFormat("duplicate of protected_paths[%d]", it->second));
      continue;
    }
    if (!repo.Exists(path)) {
      c.Error(f, absl::StrFormat("\"%s\" does not exist in the repository; "
                                 "protect paths that exist",
                                 path));
    }
    if (path == kManifestFileName) protects_manifest = true;
  }
  if (!protects_manifest) {
    c.Error("protected_paths",
            absl::StrFormat("must include \"%s\": a candidate may not change "
                            "its own gate",
                            kManifestFileName));
  }
}

}  // namespace

std::vector<ManifestError> ValidateManifest(const Manifest& m,
                                            const RepoTree& repo) {
  Checker c;
  if (m.schema_version() != kSupportedSchemaVersion) {
    c.Error("schema_version",
            m.schema_version() == 0
                ? absl::StrFormat("required: %d", kSupportedSchemaVersion)
                : absl::StrFormat("unsupported version %d; this densegate "
                                  "reads version %d",
                                  m.schema_version(), kSupportedSchemaVersion));
  }
  c.NonEmpty("name", m.name(), "a name for the workload");
  CheckBuild(c, m);

  UniqueNames suites("suite name");
  UniqueNames metrics("metric name");
  int primary_count = 0;
  CheckCorrectness(c, m, suites);
  CheckKernelChecks(c, m, suites, metrics);
  CheckPrecision(c, m, suites);
  CheckBenchmarks(c, m, suites, metrics, &primary_count);
  CheckConfirmations(c, m);
  if (m.correctness().empty() && m.kernel_checks().empty() &&
      m.precision().empty() && m.benchmarks().empty()) {
    c.Error("", "nothing to evaluate: declare at least one of correctness, "
                "kernel_checks, precision or benchmarks");
  }
  if (!m.benchmarks().empty() && primary_count == 0) {
    c.Error("benchmarks",
            "no metric is marked primary: the gate decides on primary metrics");
  }
  CheckGate(c, m);
  CheckProtectedPaths(c, m, repo);
  return c.Take();
}

}  // namespace densegate
