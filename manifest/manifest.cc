#include "manifest/manifest.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "manifest/internal/field_path.h"
#include "nlohmann/json.hpp"

namespace densegate {
namespace {

using internal::Indexed;
using internal::RelativePathProblem;

namespace pb = ::google::protobuf;
using ::densegate::v1::Manifest;

// --- Turning protobuf's JSON parser errors into field-path errors. ---

// "benchmarks[1].metrics" -> descriptor of the message at that path.
const pb::Descriptor* MessageAt(absl::string_view path) {
  const pb::Descriptor* d = Manifest::descriptor();
  if (path.empty()) return d;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    std::string name(part.substr(0, part.find('[')));
    const pb::FieldDescriptor* field = d->FindFieldByName(name);
    if (field == nullptr) field = d->FindFieldByCamelcaseName(name);
    if (field == nullptr || field->message_type() == nullptr) return nullptr;
    d = field->message_type();
  }
  return d;
}

std::string FieldNames(const pb::Descriptor* d) {
  std::vector<std::string> names;
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
  return absl::StrJoin(names, ", ");
}

std::string DescribeType(absl::string_view type) {
  constexpr absl::string_view kTypePrefix = "type.googleapis.com/";
  if (absl::ConsumePrefix(&type, kTypePrefix)) {
    const pb::EnumDescriptor* e =
        pb::DescriptorPool::generated_pool()->FindEnumTypeByName(
            std::string(type));
    if (e != nullptr) {
      std::vector<std::string> values;
      for (int i = 1; i < e->value_count(); ++i) values.push_back(e->value(i)->name());
      return absl::StrCat("one of ", absl::StrJoin(values, ", "));
    }
    return std::string(type);
  }
  if (type == "TYPE_DOUBLE" || type == "TYPE_FLOAT") return "a number";
  if (absl::StrContains(type, "INT")) return "an integer";
  if (type == "TYPE_STRING") return "a string";
  if (type == "TYPE_BOOL") return "true or false";
  return std::string(type);
}

ManifestError TranslateParseError(absl::string_view message) {
  static const std::regex* unknown_field =
      new std::regex(R"(^(?:\((.*)\) ?)?(\S+): Cannot find field\.?$)");
  static const std::regex* bad_value =
      new std::regex(R"(^\((.*)\): invalid value (.*) for type (\S+)$)");
  std::string text(message);
  std::smatch match;
  if (std::regex_match(text, match, *unknown_field)) {
    std::string parent = match[1];
    std::string field = parent.empty() ? std::string(match[2])
                                       : absl::StrCat(parent, ".", match[2].str());
    std::string hint;
    if (const pb::Descriptor* d = MessageAt(parent)) {
      hint = absl::StrCat("; fields of ", d->name(), ": ", FieldNames(d));
    }
    return {field, absl::StrCat("unknown field", hint)};
  }
  if (std::regex_match(text, match, *bad_value)) {
    return {match[1], absl::StrFormat("invalid value %s; expected %s",
                                      match[2].str(), DescribeType(match[3].str()))};
  }
  return {"", text};
}

}  // namespace

std::string ManifestError::ToString() const {
  return field.empty() ? message : absl::StrCat(field, ": ", message);
}

bool DirectoryTree::Exists(absl::string_view path) const {
  struct stat st;
  std::string full = absl::StrCat(root_, "/", path);
  return ::stat(full.c_str(), &st) == 0;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json,
                                       std::vector<ManifestError>* errors) {
  // nlohmann first: it reports syntax errors with line and column, which
  // protobuf's parser does not.
  try {
    nlohmann::json syntax_only = nlohmann::json::parse(json.begin(), json.end());
    (void)syntax_only;
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (size_t pos = what.find("] "); pos != std::string::npos) {
      what = what.substr(pos + 2);
    }
    errors->push_back({"", absl::StrCat("invalid JSON: ", what)});
    return absl::InvalidArgumentError(errors->back().ToString());
  }
  Manifest manifest;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = pb::util::JsonStringToMessage(
      pb::StringPiece(json.data(), json.size()), &manifest, options);
  if (!status.ok()) {
    errors->push_back(TranslateParseError(status.message().as_string()));
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
