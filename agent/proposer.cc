#include "agent/proposer.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace densegate::agent {

std::unique_ptr<Proposer> NewProposer(const v1::Proposer& spec, ProposerTools tools) {
  switch (spec.kind_case()) {
    case v1::Proposer::kKnobSearch:
      return NewKnobSearch(spec.knob_search(), tools);
    case v1::Proposer::kPatchCatalog:
      return NewPatchCatalog(spec.patch_catalog(), tools);
    case v1::Proposer::kExternalCommand:
      return NewExternalCommand(spec.external_command(), tools);
    case v1::Proposer::KIND_NOT_SET:
      break;
  }
  return nullptr;  // ValidateCampaign refuses it first.
}

std::string KeyPart(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const char c = absl::ascii_tolower(static_cast<unsigned char>(ch));
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                    c == '_' || c == '=' || c == '-';
    out.push_back(ok ? c : '_');
    if (out.size() == 80) break;
  }
  // Git refuses ".." and a component ending in ".".
  while (out.find("..") != std::string::npos) out.replace(out.find(".."), 2, "._");
  if (!out.empty() && out.back() == '.') out.back() = '_';
  return out;
}

bool HasKey(const std::vector<Experiment>& history, std::string_view key) {
  return std::any_of(history.begin(), history.end(),
                     [&](const Experiment& e) { return e.key == key; });
}

const v1::MetricComparison* GoalComparison(const v1::Evaluation& e, std::string_view metric) {
  for (const v1::MetricComparison& m : e.verdict().metrics()) {
    if (m.metric() == metric) return &m;
  }
  return nullptr;
}

}  // namespace densegate::agent
