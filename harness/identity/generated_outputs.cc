#include "harness/identity/generated_outputs.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace densegate::harness {

OutputComparison CompareGeneratedOutputs(const GeneratedTokens& baseline,
                                         const GeneratedTokens& candidate) {
  OutputComparison c;
  int64_t matched = 0;
  auto note = [&](std::string what) {
    if (c.first_difference.empty()) c.first_difference = std::move(what);
  };
  if (baseline.size() != candidate.size()) {
    note(absl::StrFormat("%d requests in the baseline arm's outputs, %d in the candidate's",
                         baseline.size(), candidate.size()));
  }
  for (size_t r = 0; r < baseline.size(); ++r) {
    if (!baseline[r].has_value()) continue;  // Nothing to agree with.
    const std::vector<int64_t>& want = *baseline[r];
    c.tokens += want.size();
    if (r >= candidate.size() || !candidate[r].has_value()) {
      note(absl::StrFormat("request %d failed in the candidate arm", r));
      continue;
    }
    const std::vector<int64_t>& got = *candidate[r];
    const size_t common = std::min(want.size(), got.size());
    for (size_t t = 0; t < common; ++t) {
      if (want[t] == got[t]) {
        ++matched;
      } else {
        note(absl::StrFormat("request %d, token %d: %d in the baseline arm, %d in the "
                             "candidate's",
                             r, t, want[t], got[t]));
      }
    }
    if (want.size() != got.size()) {
      note(absl::StrFormat("request %d: %d tokens in the baseline arm, %d in the candidate's", r,
                           want.size(), got.size()));
    }
  }
  c.matched = matched;
  c.agreement = c.tokens == 0 ? 1.0 : static_cast<double>(matched) / c.tokens;
  c.identical = c.first_difference.empty();
  return c;
}

void Pool(const OutputComparison& pair, OutputComparison* total) {
  total->matched += pair.matched;
  total->tokens += pair.tokens;
  total->agreement =
      total->tokens == 0 ? 1.0 : static_cast<double>(total->matched) / total->tokens;
  if (total->first_difference.empty()) total->first_difference = pair.first_difference;
  total->identical = total->first_difference.empty();
}

bool OutputsAcceptable(const OutputComparison& c, bool precision_change, double min_agreement,
                       std::string* why) {
  if (c.identical) return true;
  if (!precision_change) {
    *why = absl::StrFormat(
        "generated other tokens than the baseline on the same prompts (%.1f%% of %d agree; "
        "first difference: %s) without a declared precision change",
        100 * c.agreement, c.tokens, c.first_difference);
    return false;
  }
  if (min_agreement > 0 && c.agreement >= min_agreement) return true;
  *why = min_agreement > 0
             ? absl::StrFormat("under its declared precision change, %.1f%% of %d generated "
                               "tokens agree with the baseline's, below the manifest's %.1f%% "
                               "(first difference: %s)",
                               100 * c.agreement, c.tokens, 100 * min_agreement,
                               c.first_difference)
             : absl::StrFormat("generated other tokens than the baseline (%.1f%% of %d agree; "
                               "first difference: %s), and the manifest accepts no precision "
                               "change on this benchmark (min_token_agreement 0)",
                               100 * c.agreement, c.tokens, c.first_difference);
  return false;
}

}  // namespace densegate::harness
