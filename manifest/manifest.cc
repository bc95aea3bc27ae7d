#include "manifest/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "manifest/internal/field_path.h"

namespace densegate {
namespace {

using internal::Indexed;
using internal::RelativePathProblem;

namespace pb = ::google::protobuf;
using ::densegate::v1::Manifest;

}  // namespace

bool DirectoryTree::Exists(absl::string_view path) const {
  struct stat st;
  std::string full = absl::StrCat(root_, "/", path);
  return ::stat(full.c_str(), &st) == 0;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json,
                                       std::vector<ManifestError>* errors) {
  Manifest manifest;
  if (std::optional<FieldError> e = ParseJsonMessage(json, &manifest)) {
    errors->push_back(*std::move(e));
    return absl::InvalidArgumentError(errors->back().ToString());
  }
  return manifest;
}

absl::StatusOr<Manifest> LoadManifestFile(const std::string& path,
                                          std::vector<ManifestError>* errors) {
  std::ifstream in(path, std::ios::binary);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !in) {
    errors->push_back({"", absl::StrFormat("cannot read \"%s\": %s", path,
                                           std::strerror(errno))});
    return absl::NotFoundError(errors->back().ToString());
  }
  if (S_ISDIR(st.st_mode)) {
    errors->push_back({"", absl::StrFormat("\"%s\" is a directory; expected "
                                           "the manifest file (%s)",
                                           path, kManifestFileName)});
    return absl::InvalidArgumentError(errors->back().ToString());
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Manifest> manifest = ParseManifest(text.str(), errors);
  if (!manifest.ok()) return manifest.status();

  std::string root = ".";
  if (size_t slash = path.rfind('/'); slash != std::string::npos) {
    root = slash == 0 ? "/" : path.substr(0, slash);
  }
  *errors = ValidateManifest(*manifest, DirectoryTree(root));
  if (!errors->empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d error(s) in the manifest", path, errors->size()));
  }
  return manifest;
}

std::vector<ManifestError> ManifestWarnings(const v1::Manifest& m) {
  std::vector<ManifestError> warnings;
  for (int i = 0; i < m.benchmarks_size(); ++i) {
    const v1::BenchmarkSpec& b = m.benchmarks(i);
    const std::string f = Indexed("benchmarks", i);
    if (b.kind() == v1::JSON_COMMAND) {
      if (!b.has_outputs()) {
        warnings.push_back(
            {f + ".outputs",
             absl::StrFormat("%s's metrics rest on a candidate-built program alone: set "
                             "outputs (and {seed} in the command) so that the harness compares "
                             "what both arms generated",
                             b.name())});
      }
      continue;
    }
    for (int j = 0; j < b.metrics_size(); ++j) {
      if (!b.metrics(j).confirmed_by().empty()) continue;
      warnings.push_back(
          {Indexed(f + ".metrics", j) + ".confirmed_by",
           absl::StrFormat("%s rests on the candidate-built benchmark binary alone: name the "
                           "metric of a timed kernel check of the same op and configuration",
                           b.metrics(j).name())});
    }
  }
  return warnings;
}

std::vector<std::string> MeasuredMetrics(const v1::Manifest& m) {
  std::vector<std::string> names;
  for (const v1::BenchmarkSpec& b : m.benchmarks()) {
    for (const v1::MetricSpec& metric : b.metrics()) names.push_back(metric.name());
  }
  for (const v1::KernelCheck& c : m.kernel_checks()) {
    if (!c.metric().empty()) names.push_back(c.metric());
  }
  return names;
}

absl::Status CheckMetricScope(const v1::Manifest& m, const std::vector<std::string>& scope,
                              const std::vector<v1::Claim>& claims, v1::Policy policy) {
  if (scope.empty()) return absl::OkStatus();
  const std::vector<std::string> measured = MeasuredMetrics(m);
  auto in = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  for (const std::string& metric : scope) {
    if (!in(measured, metric)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the metric scope names %s, which the baseline's manifest does not measure (it "
          "measures %s)",
          metric.empty() ? "\"\"" : metric, absl::StrJoin(measured, ", ")));
    }
  }
  for (const v1::Claim& claim : claims) {
    if (!in(scope, claim.metric())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the claim on %s is outside the metric scope (%s)", claim.metric(),
                          absl::StrJoin(scope, ", ")));
    }
  }
  if (policy == v1::GAIN) {
    std::vector<std::string> primaries;
    for (const v1::BenchmarkSpec& b : m.benchmarks()) {
      for (const v1::MetricSpec& metric : b.metrics()) {
        if (metric.primary()) primaries.push_back(metric.name());
      }
    }
    for (const v1::KernelCheck& c : m.kernel_checks()) {
      if (!c.metric().empty()) primaries.push_back(c.metric());
    }
    if (std::none_of(scope.begin(), scope.end(),
                     [&](const std::string& s) { return in(primaries, s); })) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "policy gain needs a primary metric in the metric scope (%s); primary: %s",
          absl::StrJoin(scope, ", "), absl::StrJoin(primaries, ", ")));
    }
  }
  return absl::OkStatus();
}

std::string BenchmarkExecutable(const v1::BenchmarkSpec& b) {
  std::vector<absl::string_view> words =
      absl::StrSplit(b.command(), absl::ByAnyChar(" \t"), absl::SkipEmpty());
  return words.empty() ? "" : std::string(words.front());
}

std::optional<std::string> InputIdentityProblem(const v1::BenchmarkSpec& b) {
  // What the shell would act on: operators outside quotes, and
  // substitutions outside single quotes (a filter like
  // --benchmark_filter='a|b$' is one argument).
  const std::string& command = b.command();
  char quote = 0;
  for (size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
      continue;
    }
    if (c == '\\' && i + 1 < command.size()) {
      ++i;
      continue;
    }
    if (c == '"') {
      quote = quote == '"' ? 0 : '"';
      continue;
    }
    if (c == '\'' && quote == 0) {
      quote = '\'';
      continue;
    }
    std::string op;
    if (c == '`' || (c == '$' && i + 1 < command.size() &&
                     (command[i + 1] == '(' || command[i + 1] == '{'))) {
      op = c == '`' ? "`" : command.substr(i, 2);
    } else if (quote == 0 && absl::string_view("|;&<>\n").find(c) != absl::string_view::npos) {
      op = std::string(1, c);
    }
    if (!op.empty()) {
      return absl::StrFormat(
          "its inputs can only be compared for one program, and the command has \"%s\"; "
          "move the pipeline into a script and name what it reads in reads",
          op == "\n" ? "a newline" : op);
    }
  }
  const std::string executable = BenchmarkExecutable(b);
  if (executable.empty() || RelativePathProblem(executable) ||
      !absl::StrContains(executable, '/') || absl::StrContains(executable, '\'') ||
      absl::StrContains(executable, '"')) {
    return absl::StrFormat(
        "its inputs can only be compared when the first word is the executable's path in "
        "the checkout (e.g. bazel-bin/pkg/bench), not \"%s\"",
        executable);
  }
  return std::nullopt;
}

bool SkipsWhenIdentical(const v1::BenchmarkSpec& b) {
  return b.has_skip_when_identical() ? b.skip_when_identical().value() : !InputIdentityProblem(b);
}

}  // namespace densegate
