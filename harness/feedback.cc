#include "harness/feedback.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "results/feedback/bundle.h"

namespace densegate::harness {
namespace {

using json = nlohmann::json;

std::string StageName(v1::StageKind k) { return absl::AsciiStrToLower(v1::StageKind_Name(k)); }

std::string StatusName(v1::StageStatus s) {
  std::string name = v1::StageStatus_Name(s);
  return absl::AsciiStrToLower(name.substr(name.find('_') + 1));  // STAGE_PASSED -> passed
}

std::string DirectionName(v1::Direction d) {
  return d == v1::HIGHER_IS_BETTER ? "higher_is_better" : "lower_is_better";
}

// "kda_decode.fused_b32" -> "kda_decode": the component a metric measures.
std::string Component(const std::string& metric) { return metric.substr(0, metric.find('.')); }

// Logs and summaries carry whatever the candidate printed: bytes that are
// not UTF-8 become U+FFFD instead of failing the bundle.
void WriteJson(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

// Time counters end in their unit: "kda_ms", "queue_ns".
bool IsTimeCounter(const std::string& name) {
  return absl::EndsWith(name, "_ns") || absl::EndsWith(name, "_us") ||
         absl::EndsWith(name, "_ms");
}

// The three counters of `ranked` ((how much it moved, name)) that moved
// most, with both arms' medians.
json Top3(const CounterMedians& c, std::vector<std::pair<double, std::string>>* ranked) {
  std::sort(ranked->rbegin(), ranked->rend());
  json out = json::array();
  for (size_t i = 0; i < ranked->size() && i < 3; ++i) {
    const std::string& name = (*ranked)[i].second;
    const auto [base, cand] = c.counters.at(name);
    out.push_back({{"counter", name},
                   {"baseline", base},
                   {"candidate", cand},
                   {"ratio", base > 0 ? json(cand / base) : json(nullptr)}});
  }
  return out;
}

// The time counters of `c` that moved most, largest relative change first.
json Attribution(const CounterMedians& c) {
  double largest = 0;
  for (const auto& [name, medians] : c.counters) {
    if (IsTimeCounter(name)) largest = std::max({largest, medians.first, medians.second});
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, medians] : c.counters) {
    const auto [base, cand] = medians;
    if (!IsTimeCounter(name) || std::max(base, cand) < 0.01 * largest) continue;
    // A counter that appears from nothing ranks first.
    double moved = base > 0 && cand > 0 ? std::fabs(std::log(cand / base)) : HUGE_VAL;
    ranked.push_back({moved, name});
  }
  return Top3(c, &ranked);
}

// The other counters (volumes: steps, batch sizes, bytes) that moved by 5%
// or more, most first: they often say why the time moved.
json VolumeChanges(const CounterMedians& c) {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [name, medians] : c.counters) {
    const auto [base, cand] = medians;
    if (IsTimeCounter(name) || !(base > 0) || !(cand > 0)) continue;
    const double moved = std::fabs(std::log(cand / base));
    if (moved >= std::log(1.05)) ranked.push_back({moved, name});
  }
  return Top3(c, &ranked);
}

// Lines that say what went wrong, as compilers, test frameworks,
// sanitizers and runtimes print them.
bool IsErrorLine(absl::string_view line) {
  static constexpr absl::string_view kMarkers[] = {
      "error:",  "Error:",      "ERROR",        "FAILED",           "Failure",
      "fatal",   "Fatal",       "FATAL",        "Check failed",     "Assertion",
      "panic",   "Traceback",   "terminate called", "Segmentation fault", "Sanitizer",
      "what():", "Exception",   "exception:"};
  for (absl::string_view m : kMarkers) {
    if (absl::StrContains(line, m)) return true;
  }
  return false;
}

// The log files (names under logs/) a stage's processes write.
std::vector<std::string> StageLogPrefixes(v1::StageKind kind) {
  switch (kind) {
    case v1::BUILD:
      return {"build-"};
    case v1::CORRECTNESS:
      return {"correctness-", "check-"};
    case v1::PRECISION:
      return {"precision-"};
    case v1::MICROBENCHMARK:
    case v1::END_TO_END:
      return {"bench-", "timed-", "trace-"};
    default:
      return {};
  }
}

}  // namespace

std::vector<LogErrorLine> FirstErrorLines(const std::string& log_dir, v1::StageKind kind,
                                          int max_lines) {
  std::vector<std::string> files;
  std::error_code ec;
  std::filesystem::directory_iterator it(log_dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const std::string& prefix : StageLogPrefixes(kind)) {
      if (absl::StartsWith(name, prefix) && it->is_regular_file(ec)) files.push_back(name);
    }
  }
  // Standard error first: that is where the errors are; then by name.
  std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
    return std::make_pair(!absl::EndsWith(a, ".err"), a) < std::make_pair(!absl::EndsWith(b, ".err"), b);
  });
  std::vector<LogErrorLine> out;
  for (const std::string& file : files) {
    // The first 8 MiB of each log, line by line, each line cut to 300
    // characters as it is read: a candidate's log may be one endless line.
    std::ifstream in(log_dir + "/" + file, std::ios::binary);
    std::string line;
    bool cut = false;
    int n = 1;
    auto end_line = [&] {
      // A line said again (Bazel prints its summary twice) is said once.
      const std::string text = cut ? line + "..." : line;
      const bool again = std::any_of(out.begin(), out.end(),
                                     [&](const LogErrorLine& e) { return e.text == text; });
      if (!again && IsErrorLine(line)) out.push_back({file, n, text});
      line.clear();
      cut = false;
      ++n;
    };
    char buffer[64 * 1024];
    for (int64_t read = 0; read < (int64_t{8} << 20) && static_cast<int>(out.size()) < max_lines;) {
      in.read(buffer, sizeof buffer);
      const std::streamsize got = in.gcount();
      if (got <= 0) break;
      read += got;
      for (std::streamsize i = 0; i < got && static_cast<int>(out.size()) < max_lines; ++i) {
        if (buffer[i] == '\n') {
          end_line();
        } else if (line.size() < 300) {
          line += buffer[i];
        } else {
          cut = true;
        }
      }
    }
    if (!line.empty() && static_cast<int>(out.size()) < max_lines) end_line();
    if (static_cast<int>(out.size()) >= max_lines) break;
  }
  return out;
}

namespace {

// Each stage with its time, its log as a path in the bundle, and for a
// stage that failed the first error lines of its logs: stages.json, and
// the summary's "stages".
json StagesJson(const std::string& dir, const std::vector<v1::Stage>& stages) {
  json out = json::array();
  const std::string log_dir = dir + "/logs";
  for (const v1::Stage& s : stages) {
    std::string log = s.log_uri();
    if (absl::StartsWith(log, log_dir + "/")) log = log.substr(dir.size() + 1);
    json stage = {{"name", StageName(s.kind())},
                  {"status", StatusName(s.status())},
                  {"seconds", s.seconds()},
                  {"summary", s.summary()},
                  {"log", log},
                  {"tests", s.tests_size()}};
    if (s.status() == v1::STAGE_FAILED || s.status() == v1::STAGE_ERROR) {
      json errors = json::array();
      for (const LogErrorLine& e : FirstErrorLines(log_dir, s.kind(), 5)) {
        errors.push_back({{"file", "logs/" + e.file}, {"line", e.line}, {"text", e.text}});
      }
      stage["first_errors"] = std::move(errors);
    }
    out.push_back(std::move(stage));
  }
  return out;
}

}  // namespace

json VerdictJson(const v1::Verdict& v) {
  json out;
  out["decision"] = absl::AsciiStrToLower(v1::Decision_Name(v.decision()));
  out["policy"] = v.policy() == v1::NO_REGRESSION ? "no-regression" : "gain";
  out["reasons"] = json::array();
  for (const auto& r : v.reasons()) out["reasons"].push_back(r.message());
  out["stages"] = json::array();
  for (const auto& s : v.stages()) {
    out["stages"].push_back({{"name", StageName(s.kind())},
                             {"status", StatusName(s.status())},
                             {"seconds", s.seconds()}});
  }
  out["metrics"] = json::array();
  for (const auto& m : v.metrics()) {
    out["metrics"].push_back({{"name", m.metric()},
                              {"unit", m.unit()},
                              {"direction", DirectionName(m.direction())},
                              {"baseline", m.baseline()},
                              {"candidate", m.candidate()},
                              {"speedup", m.speedup()},
                              {"ci_low", m.ci_low()},
                              {"ci_high", m.ci_high()},
                              {"n_pairs", m.n_pairs()}});
  }
  out["claims"] = json::array();
  for (const auto& c : v.claims()) {
    out["claims"].push_back(
        {{"metric", c.metric()}, {"claimed", c.claimed()}, {"verified", c.verified()}});
  }
  out["evaluation_id"] = v.evaluation_id();
  out["candidate_id"] = v.candidate_id();
  return out;
}

json FeedbackJson(const v1::Verdict& v, const std::vector<CounterMedians>& counters) {
  json out;
  out["schema_version"] = results::kFeedbackSchemaVersion;
  out["evaluation_id"] = v.evaluation_id();
  out["candidate_id"] = v.candidate_id();
  out["decision"] = absl::AsciiStrToLower(v1::Decision_Name(v.decision()));
  std::vector<const v1::MetricComparison*> moved, unchanged;
  for (const auto& m : v.metrics()) {
    bool beyond_noise = m.ci_low() > 1 || m.ci_high() < 1;
    (beyond_noise ? moved : unchanged).push_back(&m);
  }
  std::sort(moved.begin(), moved.end(), [](auto* a, auto* b) {
    return std::fabs(std::log(a->speedup())) > std::fabs(std::log(b->speedup()));
  });
  // metric -> what its benchmark's counters say about it.
  std::map<std::string, json> attribution, volumes;
  for (const CounterMedians& c : counters) {
    json time = Attribution(c), volume = VolumeChanges(c);
    for (const std::string& metric : c.metrics) {
      if (!time.empty()) attribution[metric] = time;
      if (!volume.empty()) volumes[metric] = volume;
    }
  }
  auto component = [&](const std::string& metric) {
    auto it = attribution.find(metric);
    if (it == attribution.end()) return Component(metric);
    // "runtime.output_tok_s" with transfer_ms leading -> "runtime/transfer".
    std::string counter = it->second[0]["counter"];
    return Component(metric) + "/" + counter.substr(0, counter.rfind('_'));
  };
  out["moved"] = json::array();
  for (const auto* m : moved) {
    out["moved"].push_back(
        {{"metric", m->metric()},
         {"component", component(m->metric())},
         {"stage", StageName(m->stage())},
         {"change", m->speedup() >= 1 ? "faster" : "slower"},
         {"speedup", m->speedup()},
         {"interval", {m->ci_low(), m->ci_high()}},
         {"n_pairs", m->n_pairs()},
         {"baseline", m->baseline()},
         {"candidate", m->candidate()},
         {"unit", m->unit()}});
    if (attribution.count(m->metric())) {
      out["moved"].back()["attributed_to"] = attribution[m->metric()];
    }
    if (volumes.count(m->metric())) out["moved"].back()["volumes_moved"] = volumes[m->metric()];
  }
  out["within_noise"] = json::array();
  for (const auto* m : unchanged) {
    out["within_noise"].push_back({{"metric", m->metric()},
                                   {"speedup", m->speedup()},
                                   {"interval", {m->ci_low(), m->ci_high()}}});
  }
  out["why"] = json::array();
  for (const auto& r : v.reasons()) {
    out["why"].push_back({{"code", absl::AsciiStrToLower(v1::ReasonCode_Name(r.code()))},
                          {"stage", StageName(r.stage())},
                          {"message", r.message()}});
  }
  std::string headline;
  if (!moved.empty()) {
    headline = absl::StrFormat("%s: %.3fx [%.3f, %.3f], attributed to %s", moved[0]->metric(),
                               moved[0]->speedup(), moved[0]->ci_low(), moved[0]->ci_high(),
                               component(moved[0]->metric()));
  } else if (!v.reasons().empty()) {
    headline = v.reasons(0).message();
  } else {
    headline = "no metric moved beyond noise";
  }
  out["headline"] = headline;
  return out;
}

void WriteFeedbackBundle(const std::string& dir, const v1::Verdict* verdict,
                         const std::vector<v1::Stage>& stages,
                         const std::vector<v1::Sample>& samples,
                         const std::vector<CounterMedians>& counters,
                         const absl::Status& infrastructure_error,
                         const std::string& evaluation_id) {
  if (dir.empty()) return;
  if (!counters.empty()) {
    json by_benchmark = json::object();
    for (const CounterMedians& c : counters) {
      json& b = by_benchmark[c.benchmark];
      b["metrics"] = c.metrics;
      for (const auto& [name, medians] : c.counters) {
        b["counters"][name] = {{"baseline", medians.first}, {"candidate", medians.second}};
      }
    }
    WriteJson(dir + "/counters.json", by_benchmark);
  }
  const json stage_list = StagesJson(dir, stages);
  WriteJson(dir + "/stages.json", stage_list);
  json sample_list = json::array();
  for (const auto& s : samples) {
    sample_list.push_back({{"metric", s.metric()},
                           {"arm", absl::AsciiStrToLower(v1::Arm_Name(s.arm()))},
                           {"pair", s.pair_index()},
                           {"value", s.value()},
                           {"unit", s.unit()},
                           {"process_wall_seconds", s.process_wall_seconds()},
                           {"process_cpu_seconds", s.process_cpu_seconds()}});
  }
  WriteJson(dir + "/samples.json", sample_list);
  json summary;
  if (verdict != nullptr) {
    WriteJson(dir + "/verdict.json", VerdictJson(*verdict));
    summary = FeedbackJson(*verdict, counters);
  } else {
    json error = {{"decision", "error"},
                  {"infrastructure_error", std::string(infrastructure_error.message())}};
    WriteJson(dir + "/verdict.json", error);
    summary = error;
    summary["schema_version"] = results::kFeedbackSchemaVersion;
    summary["evaluation_id"] = evaluation_id;
    summary["headline"] = absl::StrCat("not evaluated: ", infrastructure_error.message());
  }
  summary["stages"] = stage_list;
  WriteJson(dir + "/" + results::kFeedbackSummaryFile, summary);
}

void WritePrecisionCurve(const std::string& dir, const std::string& suite,
                         const json& curve) {
  if (dir.empty()) return;
  std::error_code ignored;
  std::filesystem::create_directories(dir + "/precision", ignored);
  WriteJson(dir + "/precision/" + suite + ".json", curve);
}

}  // namespace densegate::harness
