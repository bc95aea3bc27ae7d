// Knob search: successive halving with two rungs over a search space the
// repository declares (v1::KnobSearch). Rung one screens every point with
// an evaluation scoped to the goal's metric that cannot land; rung two
// evaluates the best screened points in full toward the branch, best
// first, until one lands.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/proposer.h"
#include "nlohmann/json.hpp"

namespace densegate::agent {
namespace {

struct Knob {
  std::string name;  // Dotted: nested keys of the configuration file.
  std::vector<nlohmann::json> values;
};

struct Space {
  std::string file;
  std::vector<Knob> knobs;
};

using Point = std::vector<nlohmann::json>;  // One value per knob.

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<Space> ReadSpace(const std::string& worktree, const std::string& path) {
  absl::StatusOr<std::string> text = ReadText(worktree + "/" + path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("knob_search.space: the tip has no ", path));
  }
  Space space;
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    space.file = j.at("file").get<std::string>();
    for (const nlohmann::json& k : j.at("knobs")) {
      Knob knob{k.at("name").get<std::string>(), {}};
      for (const nlohmann::json& v : k.at("values")) knob.values.push_back(v);
      if (knob.name.empty() || knob.values.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": each knob needs a name and at least one value"));
      }
      space.knobs.push_back(std::move(knob));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", e.what(), " (expected {\"file\": ..., \"knobs\": [{\"name\": ..., "
        "\"values\": [...]}]})"));
  }
  size_t size = 1;
  for (const Knob& k : space.knobs) size *= std::min<size_t>(k.values.size(), 100000);
  if (size > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " points; at most 10000 (narrow the knobs' values)"));
  }
  if (space.file.empty() || space.file.front() == '/' ||
      space.file.find("..") != std::string::npos || space.knobs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": needs a file inside the repository and at least one knob"));
  }
  return space;
}

// Every point, the first knob varying slowest; the first `max_points`
// (0: all).
std::vector<Point> Points(const Space& space, int max_points) {
  std::vector<Point> points = {{}};
  for (const Knob& k : space.knobs) {
    std::vector<Point> next;
    for (const Point& p : points) {
      for (const nlohmann::json& v : k.values) {
        Point q = p;
        q.push_back(v);
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  if (max_points > 0 && static_cast<int>(points.size()) > max_points) points.resize(max_points);
  return points;
}

std::string Describe(const Space& space, const Point& p) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < p.size(); ++i) parts.push_back(space.knobs[i].name + "=" + p[i].dump());
  return absl::StrJoin(parts, ", ");
}

std::string PointKey(const Space& space, const Point& p) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < p.size(); ++i) {
    parts.push_back(space.knobs[i].name + "=" +
                    (p[i].is_string() ? p[i].get<std::string>() : p[i].dump()));
  }
  return KeyPart(absl::StrJoin(parts, "-"));
}

// Sets the point's knobs in the configuration file; false when it already
// holds them.
absl::StatusOr<bool> Apply(const std::string& worktree, const Space& space, const Point& p) {
  const std::string path = worktree + "/" + space.file;
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(space.file, ": ", e.what()));
  }
  const nlohmann::json before = config;
  for (size_t i = 0; i < p.size(); ++i) {
    nlohmann::json* at = &config;
    for (absl::string_view part : absl::StrSplit(space.knobs[i].name, '.')) {
      if (!at->is_object()) *at = nlohmann::json::object();
      at = &(*at)[std::string(part)];
    }
    *at = p[i];
  }
  if (config == before) return false;
  std::ofstream(path) << config.dump(2) << "\n";
  return true;
}

class KnobSearch : public Proposer {
 public:
  explicit KnobSearch(v1::KnobSearch spec) : spec_(std::move(spec)) {}

  std::string Name() const override { return "knob search over " + spec_.space(); }

  absl::StatusOr<Proposal> Next(const ProposalContext& ctx) override {
    absl::StatusOr<Space> space = ReadSpace(ctx.worktree, spec_.space());
    if (!space.ok()) return space.status();
    const std::vector<Point> points = Points(*space, spec_.max_points());
    const std::vector<Experiment>& history = *ctx.history;
    const std::string& metric = ctx.campaign->goal().metric();
    // Rung one: screen each point once.
    for (const Point& p : points) {
      const std::string key = "screen-" + PointKey(*space, p);
      if (HasKey(history, key) || skipped_.count(key)) continue;
      absl::StatusOr<bool> changed = Apply(ctx.worktree, *space, p);
      if (!changed.ok()) return changed.status();
      if (!*changed) {
        skipped_.insert(key);
        return Proposal{.kind = Proposal::Kind::kSkipped,
                        .key = key,
                        .note = "the tip already sets " + Describe(*space, p)};
      }
      return Proposal{.key = key,
                      .hypothesis = absl::StrCat("knobs ", Describe(*space, p), " in ",
                                                 space->file, " (screen on ", metric, ")"),
                      .screen = true};
    }
    // Rung two: the best screened points, in full, best first, until one
    // lands.
    struct Screened {
      const Point* point;
      double speedup;
      std::string interval;
    };
    std::vector<Screened> ranked;
    for (const Point& p : points) {
      const std::string key = PointKey(*space, p);
      for (const Experiment& e : history) {
        if (e.key == "final-" + key && e.evaluation.merge().state() == v1::MERGED) {
          return Proposal{.kind = Proposal::Kind::kDone,
                          .note = "landed " + Describe(*space, p)};
        }
        if (e.key != "screen-" + key) continue;
        const v1::MetricComparison* m = GoalComparison(e.evaluation, metric);
        if (m == nullptr || e.evaluation.verdict().decision() == v1::REJECT) continue;
        ranked.push_back({&p, m->speedup(),
                          absl::StrFormat("%.3fx [%.3f, %.3f]", m->speedup(), m->ci_low(),
                                          m->ci_high())});
      }
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Screened& a, const Screened& b) { return a.speedup > b.speedup; });
    const int finalists = std::max(1, spec_.finalists());
    for (int i = 0; i < finalists && i < static_cast<int>(ranked.size()); ++i) {
      if (!(ranked[i].speedup > 1)) break;
      const std::string key = "final-" + PointKey(*space, *ranked[i].point);
      if (HasKey(history, key) || skipped_.count(key)) continue;
      absl::StatusOr<bool> changed = Apply(ctx.worktree, *space, *ranked[i].point);
      if (!changed.ok()) return changed.status();
      if (!*changed) {
        skipped_.insert(key);
        continue;
      }
      return Proposal{.key = key,
                      .hypothesis = absl::StrCat("knobs ", Describe(*space, *ranked[i].point),
                                                 " in ", space->file, ": screened at ",
                                                 ranked[i].interval, " on ", metric)};
    }
    return Proposal{.kind = Proposal::Kind::kDone,
                    .note = ranked.empty() || !(ranked[0].speedup > 1)
                                ? "no screened point was faster"
                                : "no finalist landed"};
  }

 private:
  v1::KnobSearch spec_;
  std::set<std::string> skipped_;
};

}  // namespace

std::unique_ptr<Proposer> NewKnobSearch(const v1::KnobSearch& spec, ProposerTools) {
  // It edits a JSON file; it needs neither git nor processes.
  return std::make_unique<KnobSearch>(spec);
}

}  // namespace densegate::agent
