#include "demo/scenario.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace densegate::demo {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s", path, field, what));
}

absl::StatusOr<std::string> String(const json& j, const std::string& key, const std::string& path,
                                   const std::string& where, bool required = true) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return Bad(path, where + key, "missing");
    return std::string();
  }
  if (!it->is_string()) return Bad(path, where + key, "must be a string");
  return it->get<std::string>();
}

absl::StatusOr<std::string> PatchPath(const json& j, const std::string& path,
                                      const std::string& where) {
  absl::StatusOr<std::string> rel = String(j, "patch", path, where);
  if (!rel.ok()) return rel.status();
  std::filesystem::path p = std::filesystem::path(path).parent_path() / *rel;
  if (!std::filesystem::is_regular_file(p)) {
    return Bad(path, where + "patch", "no such file " + p.string());
  }
  return p.string();
}

absl::StatusOr<ScenarioBisection> ParseBisection(const json& j, const std::string& path) {
  const std::string where = "bisection.";
  if (!j.is_object()) return Bad(path, "bisection", "not an object");
  ScenarioBisection b;
  absl::StatusOr<std::string> v = String(j, "branch", path, where);
  if (!v.ok()) return v.status();
  b.branch = *v;
  if (v = String(j, "metric", path, where); !v.ok()) return v.status();
  b.metric = *v;
  if (!j.contains("commits") || !j["commits"].is_array() || j["commits"].size() < 2) {
    return Bad(path, where + "commits", "must be an array of at least two commits");
  }
  for (size_t i = 0; i < j["commits"].size(); ++i) {
    const std::string at = absl::StrFormat("%scommits[%d].", where, i);
    ScenarioBisection::Commit c;
    if (v = PatchPath(j["commits"][i], path, at); !v.ok()) return v.status();
    c.patch = *v;
    if (v = String(j["commits"][i], "message", path, at); !v.ok()) return v.status();
    c.message = *v;
    b.commits.push_back(std::move(c));
  }
  // The last commit is the bad end, taken as regressed without measuring.
  b.culprit = j.value("culprit", 0);
  if (b.culprit < 1 || b.culprit > static_cast<int>(b.commits.size())) {
    return Bad(path, where + "culprit",
               absl::StrFormat("a 1-based index into commits (1 to %d)", b.commits.size()));
  }
  return b;
}

}  // namespace

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot read the scenario %s", path));
  std::stringstream text;
  text << in.rdbuf();
  json root = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a JSON object", path));
  }
  Scenario s;
  if (!root.contains("first_version") || !root["first_version"].is_object()) {
    return Bad(path, "first_version", "missing or not an object");
  }
  absl::StatusOr<std::string> v = PatchPath(root["first_version"], path, "first_version.");
  if (!v.ok()) return v.status();
  s.first_version_patch = *v;
  if (v = String(root["first_version"], "message", path, "first_version."); !v.ok()) {
    return v.status();
  }
  s.first_version_message = *v;
  if (v = String(root, "target_branch", path, ""); !v.ok()) return v.status();
  s.target_branch = *v;
  if (!root.contains("candidates") || !root["candidates"].is_array() ||
      root["candidates"].empty()) {
    return Bad(path, "candidates", "must be a non-empty array");
  }
  for (size_t i = 0; i < root["candidates"].size(); ++i) {
    const json& c = root["candidates"][i];
    const std::string where = absl::StrFormat("candidates[%d].", i);
    if (!c.is_object()) return Bad(path, where, "not an object");
    ScenarioCandidate sc;
    if (v = String(c, "name", path, where); !v.ok()) return v.status();
    sc.name = *v;
    if (sc.name.empty() || sc.name.find_first_of(" ~^:?*[\\") != std::string::npos) {
      return Bad(path, where + "name", "must be usable as a branch name");
    }
    if (v = PatchPath(c, path, where); !v.ok()) return v.status();
    sc.patch = *v;
    if (v = String(c, "message", path, where); !v.ok()) return v.status();
    sc.message = *v;
    if (v = String(c, "submitter", path, where); !v.ok()) return v.status();
    sc.submitter = *v;
    if (sc.submitter != "ci" && sc.submitter != "agent") {
      return Bad(path, where + "submitter", "expected ci or agent");
    }
    if (v = String(c, "kind", path, where); !v.ok()) return v.status();
    if (*v != "ci" && *v != "experiment") return Bad(path, where + "kind", "expected ci or experiment");
    sc.kind = *v == "ci" ? v1::CI : v1::EXPERIMENT;
    if (v = String(c, "hypothesis", path, where, false); !v.ok()) return v.status();
    sc.hypothesis = *v;
    if (v = String(c, "precision_change", path, where, false); !v.ok()) return v.status();
    sc.precision_change = *v;
    for (const json& claim : c.value("claims", json::array())) {
      if (!claim.is_object() || !claim.contains("metric") || !claim["metric"].is_string() ||
          !claim.contains("min_speedup") || !claim["min_speedup"].is_number()) {
        return Bad(path, where + "claims", "each claim is {\"metric\": ..., \"min_speedup\": X}");
      }
      v1::Claim cl;
      cl.set_metric(claim["metric"].get<std::string>());
      cl.set_min_speedup(claim["min_speedup"].get<double>());
      sc.claims.push_back(cl);
    }
    sc.merge = c.value("merge", false);
    if (sc.merge && sc.submitter != "ci") {
      return Bad(path, where + "merge", "only the ci submitter may target a branch");
    }
    if (!c.contains("expect") || !c["expect"].is_object()) return Bad(path, where + "expect", "missing");
    const json& e = c["expect"];
    if (v = String(e, "decision", path, where + "expect."); !v.ok()) return v.status();
    if (!v1::Decision_Parse(*v, &sc.expect_decision) ||
        sc.expect_decision == v1::DECISION_UNSPECIFIED) {
      return Bad(path, where + "expect.decision", "expected ACCEPT, REJECT or INCONCLUSIVE");
    }
    if (v = String(e, "reason", path, where + "expect.", false); !v.ok()) return v.status();
    if (!v->empty() && !v1::ReasonCode_Parse(*v, &sc.expect_reason)) {
      return Bad(path, where + "expect.reason", "not a ReasonCode: " + *v);
    }
    sc.expect_merged = e.value("merged", false);
    sc.expect_gain = e.value("gain", false);
    if (sc.expect_merged && !sc.merge) {
      return Bad(path, where + "expect.merged", "a candidate that does not target the branch");
    }
    s.candidates.push_back(std::move(sc));
  }
  if (root.contains("bisection")) {
    absl::StatusOr<ScenarioBisection> b = ParseBisection(root["bisection"], path);
    if (!b.ok()) return b.status();
    s.bisection = *std::move(b);
  }
  return s;
}

}  // namespace densegate::demo
