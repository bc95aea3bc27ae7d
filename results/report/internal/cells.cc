#include "results/report/internal/cells.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace densegate::results::internal {

using json = nlohmann::json;

const v1::MetricComparison* Headline(const v1::Verdict& v) {
  for (const auto& m : v.metrics()) {
    if (m.primary() && !m.inputs_identical()) return &m;
  }
  for (const auto& m : v.metrics()) {
    if (m.primary()) return &m;
  }
  return v.metrics().empty() ? nullptr : &v.metrics(0);
}

// The cells of the tables both renderers print, from the report's JSON.
std::vector<std::string> CandidateCells(const json& c) {
  std::string metric = "-", speedup = "-";
  if (c.contains("metric")) {
    metric = c["metric"]["name"];
    speedup = c["metric"]["text"];
  }
  std::vector<std::string> claims;
  for (const json& cl : c["claims"]) {
    claims.push_back(absl::StrFormat("%s>=%.2fx %s", cl["metric"].get<std::string>(),
                                     cl["claimed"].get<double>(),
                                     cl["verified"].get<bool>() ? "verified" : "not verified"));
  }
  return {c["decided_at"], c["submitter"], c["kind"], c["commit"], c["decision"], metric,
          speedup, claims.empty() ? "-" : absl::StrJoin(claims, "; "), c["merge"],
          c.contains("reason") ? c["reason"]["message"].get<std::string>() : ""};
}
const std::vector<std::string> kCandidateHeaders = {
    "decided", "submitter", "kind", "commit", "decision", "metric",
    "speedup [interval]", "claims", "merge", "reason"};

// "at its landing", or how far the split is from the nearest landing.
namespace {

std::string LandingCell(const json& p) {
  if (p["at_landing"].get<bool>()) return "at its landing";
  if (!p.contains("nearest_landing")) return "inside the only commit's samples";
  const long offset = p["landing_offset"].get<long>();
  return absl::StrFormat("%d sample%s %s the landing of %s", std::abs(offset),
                         std::abs(offset) == 1 ? "" : "s", offset < 0 ? "before" : "after",
                         p["nearest_landing"].get<std::string>());
}

}  // namespace

std::vector<std::string> ChangePointCells(const json& p) {
  return {p["metric"],
          p["commit"],
          LandingCell(p),
          absl::StrFormat("%d of %d", p["index"].get<int>(), p["samples"].get<int>()),
          absl::StrFormat("%g", p["mean_before"].get<double>()),
          absl::StrFormat("%g", p["mean_after"].get<double>()),
          absl::StrFormat("%.3f", p["p_value"].get<double>())};
}
const std::vector<std::string> kChangePointHeaders = {
    "metric", "commit", "where", "sample", "mean before", "mean after", "p"};
const char kNoChangePoints[] =
    "None found in the samples of the branch's successive tips (e-divisive, p <= 0.05, at least "
    "3 samples on each side).";

std::vector<std::string> NodeCells(const json& n) {
  return {n["name"], n["state"], absl::StrFormat("%.4f", n["calibration_noise"].get<double>()),
          n["gate_work"]};
}
const std::vector<std::string> kNodeHeaders = {"node", "state", "calibration noise (CV)",
                                               "gate work"};

std::vector<std::string> BisectCells(const json& s) {
  return {absl::StrCat(s["index"].get<int>()), s["commit"], s["evaluation"],
          s.contains("text") ? s["text"].get<std::string>() : "-", s["result"]};
}
const std::vector<std::string> kBisectHeaders = {"#", "commit", "evaluation",
                                                 "speedup vs good [interval]", "result"};

}  // namespace densegate::results::internal
