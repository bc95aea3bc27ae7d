#include "harness/parse/benchmark_output.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "pugixml.hpp"

namespace densegate::harness {
namespace {

using json = nlohmann::json;

absl::StatusOr<json> ParseJson(absl::string_view text, const char* what) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: output is not valid JSON (%d bytes, starts with \"%s\")", what,
                        text.size(), text.substr(0, 40)));
  }
  return doc;
}

double TimeUnitToNs(const std::string& unit) {
  if (unit == "s") return 1e9;
  if (unit == "ms") return 1e6;
  if (unit == "us") return 1e3;
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

absl::StatusOr<std::vector<BenchmarkRun>> ParseGoogleBenchmarkJson(absl::string_view text) {
  absl::StatusOr<json> doc = ParseJson(text, "Google Benchmark");
  if (!doc.ok()) return doc.status();
  if (!doc->is_object() || !doc->contains("benchmarks") || !(*doc)["benchmarks"].is_array()) {
    return absl::InvalidArgumentError(
        "Google Benchmark: expected an object with a \"benchmarks\" array "
        "(run with --benchmark_format=json)");
  }
  std::vector<BenchmarkRun> runs;
  for (const json& b : (*doc)["benchmarks"]) {
    if (b.value("run_type", "iteration") != "iteration") continue;
    if (!b.contains("name") || !b.contains("real_time") || !b.contains("iterations")) {
      return absl::InvalidArgumentError(
          "Google Benchmark: a benchmark entry lacks name, real_time or iterations");
    }
    BenchmarkRun run;
    run.name = b["name"].get<std::string>();
    if (b.contains("error_occurred") && b["error_occurred"].get<bool>()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "benchmark %s reported an error: %s", run.name, b.value("error_message", "")));
    }
    double scale = TimeUnitToNs(b.value("time_unit", "ns"));
    run.iterations = b["iterations"].get<int64_t>();
    run.real_time_ns = b["real_time"].get<double>() * scale;
    run.cpu_time_ns = b.value("cpu_time", 0.0) * scale;
    for (const auto& [key, value] : b.items()) {
      if (value.is_number() && key != "iterations" && key != "real_time" &&
          key != "cpu_time" && key != "repetitions" && key != "repetition_index" &&
          key != "threads" && key != "family_index" && key != "per_family_instance_index") {
        run.counters[key] = value.get<double>();
      }
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

absl::StatusOr<double> GoogleBenchmarkMetric(const std::vector<BenchmarkRun>& runs,
                                             const v1::MetricSpec& metric) {
  std::string field = metric.field().empty() ? "real_time" : metric.field();
  std::vector<double> values;
  std::vector<std::string> names;
  for (const BenchmarkRun& r : runs) {
    names.push_back(r.name);
    if (r.name != metric.source()) continue;
    if (field == "real_time") {
      values.push_back(r.real_time_ns);
    } else if (field == "cpu_time") {
      values.push_back(r.cpu_time_ns);
    } else if (auto it = r.counters.find(field); it != r.counters.end()) {
      values.push_back(it->second);
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "metric %s: benchmark %s has no field \"%s\"", metric.name(), r.name, field));
    }
  }
  if (values.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "metric %s: no benchmark named \"%s\" in the output (found: %s)", metric.name(),
        metric.source(), names.empty() ? "none" : absl::StrJoin(names, ", ")));
  }
  double v = Median(values);
  if (metric.aggregate() == v1::REPETITION_BEST) {
    v = metric.direction() == v1::HIGHER_IS_BETTER
            ? *std::max_element(values.begin(), values.end())
            : *std::min_element(values.begin(), values.end());
  }
  if (!std::isfinite(v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metric %s: value %g is not a positive number", metric.name(), v));
  }
  return v;
}

double ClaimedTimedSeconds(const std::vector<BenchmarkRun>& runs) {
  double total = 0;
  for (const BenchmarkRun& r : runs) total += r.real_time_ns * 1e-9 * r.iterations;
  return total;
}

namespace {

absl::StatusOr<json> JsonAt(absl::string_view text, absl::string_view path) {
  absl::StatusOr<json> doc = ParseJson(text, "benchmark command");
  if (!doc.ok()) return doc.status();
  const json* node = &*doc;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    std::string key(part);
    if (!node->is_object() || !node->contains(key)) {
      return absl::NotFoundError(
          absl::StrFormat("no \"%s\" in the command's JSON output (looking for %s)", key, path));
    }
    node = &(*node)[key];
  }
  return *node;
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> JsonNumbersAt(absl::string_view text,
                                                            absl::string_view path) {
  absl::StatusOr<json> node = JsonAt(text, path);
  if (!node.ok()) return node.status();
  if (!node->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s in the command's JSON output is not an object", path));
  }
  std::map<std::string, double> numbers;
  for (const auto& [key, value] : node->items()) {
    if (value.is_number()) numbers[key] = value.get<double>();
  }
  return numbers;
}

absl::StatusOr<double> JsonNumberAt(absl::string_view text, absl::string_view path) {
  absl::StatusOr<json> found = JsonAt(text, path);
  if (!found.ok()) return found.status();
  const json* node = &*found;
  if (!node->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s in the command's JSON output is %s, not a number", path,
                        node->dump()));
  }
  return node->get<double>();
}

absl::StatusOr<GeneratedTokens> JsonTokenSequencesAt(absl::string_view text,
                                                     absl::string_view path) {
  absl::StatusOr<json> found = JsonAt(text, path);
  if (!found.ok()) return found.status();
  if (!found->is_array()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s in the command's JSON output is not an array of token sequences", path));
  }
  GeneratedTokens out;
  for (size_t i = 0; i < found->size(); ++i) {
    const json& entry = (*found)[i];
    if (entry.is_null()) {
      out.emplace_back(std::nullopt);
      continue;
    }
    bool integers = entry.is_array();
    for (const json& token : integers ? entry : json::array()) {
      integers &= token.is_number_integer();
    }
    if (!integers) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d] in the command's JSON output is neither an array of token ids nor null", path,
          i));
    }
    out.emplace_back(entry.get<std::vector<int64_t>>());
  }
  return out;
}

absl::StatusOr<std::vector<v1::TestCaseResult>> ParseJUnitXml(absl::string_view xml) {
  pugi::xml_document doc;
  pugi::xml_parse_result parsed = doc.load_buffer(xml.data(), xml.size());
  if (!parsed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JUnit XML: %s at byte %d", parsed.description(), parsed.offset));
  }
  std::vector<v1::TestCaseResult> out;
  for (const pugi::xpath_node& node : doc.select_nodes("//testcase")) {
    pugi::xml_node tc = node.node();
    v1::TestCaseResult r;
    std::string suite = tc.attribute("classname").as_string();
    if (suite.empty()) suite = tc.parent().attribute("name").as_string();
    r.set_suite(suite);
    r.set_name(tc.attribute("name").as_string());
    r.set_seconds(tc.attribute("time").as_double());
    pugi::xml_node failure = tc.child("failure");
    if (!failure) failure = tc.child("error");
    r.set_passed(!failure);
    if (failure) {
      std::string message = failure.attribute("message").as_string();
      if (message.empty()) message = failure.text().as_string();
      r.set_message(message.substr(0, 2000));
    }
    out.push_back(std::move(r));
  }
  if (out.empty() && !doc.child("testsuites") && !doc.child("testsuite")) {
    return absl::InvalidArgumentError("JUnit XML: no <testsuites> or <testsuite> root");
  }
  return out;
}

}  // namespace densegate::harness
