// Patch catalog: a folder of patches, each with its hypothesis, claims and
// expected gain (v1::PatchCatalog), tried in order of expected gain, each
// applied three-way onto the branch's current tip.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/proposer.h"
#include "nlohmann/json.hpp"

namespace densegate::agent {
namespace {

struct Entry {
  std::string file;
  std::string hypothesis;
  std::vector<v1::Claim> claims;
  double expected_gain = 1;
};

absl::StatusOr<std::vector<Entry>> ReadCatalog(const std::string& dir) {
  const std::string path = dir + "/catalog.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("patch_catalog.dir: cannot read ", path));
  std::vector<Entry> entries;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const nlohmann::json& p : j.at("patches")) {
      Entry e;
      e.file = p.at("file").get<std::string>();
      e.hypothesis = p.at("hypothesis").get<std::string>();
      e.expected_gain = p.value("expected_gain", 1.0);
      for (const nlohmann::json& c : p.value("claims", nlohmann::json::array())) {
        v1::Claim claim;
        claim.set_metric(c.at("metric").get<std::string>());
        claim.set_min_speedup(c.at("min_speedup").get<double>());
        e.claims.push_back(claim);
      }
      if (e.file.empty() || e.hypothesis.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": each patch needs a file and a hypothesis"));
      }
      entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", e.what(), " (expected {\"patches\": [{\"file\": ..., \"hypothesis\": ..., "
        "\"claims\": [...], \"expected_gain\": ...}]})"));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.expected_gain > b.expected_gain;
  });
  return entries;
}

std::string Stem(const std::string& file) {
  std::string name = file.substr(file.rfind('/') + 1);
  if (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

class PatchCatalog : public Proposer {
 public:
  PatchCatalog(v1::PatchCatalog spec, ProposerTools tools)
      : spec_(std::move(spec)), tools_(tools) {}

  std::string Name() const override { return "patch catalog " + spec_.dir(); }

  absl::StatusOr<Proposal> Next(const ProposalContext& ctx) override {
    absl::StatusOr<std::vector<Entry>> entries = ReadCatalog(spec_.dir());
    if (!entries.ok()) return entries.status();
    for (const Entry& e : *entries) {
      const std::string key = "patch-" + KeyPart(Stem(e.file));
      if (HasKey(*ctx.history, key) || tried_.count(key)) continue;
      tried_.insert(key);
      const std::string patch = e.file.front() == '/' ? e.file : spec_.dir() + "/" + e.file;
      absl::StatusOr<std::string> applied =
          tools_.git->Run(ctx.worktree, {"apply", "--3way", "--whitespace=nowarn", patch});
      if (!applied.ok()) {
        std::string why(applied.status().message());
        return Proposal{.kind = Proposal::Kind::kSkipped,
                        .key = key,
                        .note = absl::StrCat(e.file, " does not apply onto ", ctx.tip.substr(0, 12),
                                             ": ", why.substr(0, 300))};
      }
      return Proposal{.key = key, .hypothesis = e.hypothesis, .claims = e.claims};
    }
    return Proposal{.kind = Proposal::Kind::kDone, .note = "every patch of the catalog tried"};
  }

 private:
  v1::PatchCatalog spec_;
  ProposerTools tools_;
  std::set<std::string> tried_;  // This run's, the ones skipped included.
};

}  // namespace

std::unique_ptr<Proposer> NewPatchCatalog(const v1::PatchCatalog& spec, ProposerTools tools) {
  return std::make_unique<PatchCatalog>(spec, tools);
}

}  // namespace densegate::agent
