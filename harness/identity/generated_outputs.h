// CompareGeneratedOutputs: whether a serving benchmark's candidate arm
// generated what its baseline arm generated on the same prompts (the
// harness draws them from a fresh seed per pair; OutputCheck in the
// manifest). A candidate that skips work only when it is benchmarked (a
// layer left out under serve_bench, say) is faster there and generates
// other tokens; one that is really faster generates the same ones.
//
// Agreement is position by position: the fraction of the baseline's
// generated tokens that the candidate generated at the same position of the
// same request. Greedy decoding makes every token after a first difference
// depend on it, so agreement is close to the mean fraction of each sequence
// before its first difference. A candidate without a declared precision
// change must agree exactly (1.0, same lengths) in every pair; one with a
// declared change (e.g. an FP8 KV cache) at least `min_agreement` over all
// pairs together (Pool): one pair's dozen sequences say little about a
// change whose first differences fall anywhere.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_HARNESS_IDENTITY_GENERATED_OUTPUTS_H_
#define DENSEGATE_HARNESS_IDENTITY_GENERATED_OUTPUTS_H_

#include <cstdint>
#include <string>

#include "harness/parse/benchmark_output.h"

namespace densegate::harness {

struct OutputComparison {
  bool identical = false;
  // Matching positions over the baseline's generated tokens (1 when the
  // baseline generated none).
  double agreement = 1;
  int64_t matched = 0;
  int64_t tokens = 0;
  // When not identical, the first difference, e.g. "request 3, token 7: 812
  // vs 45" or "request 2 failed in the candidate arm".
  std::string first_difference;
};

OutputComparison CompareGeneratedOutputs(const GeneratedTokens& baseline,
                                         const GeneratedTokens& candidate);

// `total` with `pair` added: tokens and matches summed, the first
// difference kept.
void Pool(const OutputComparison& pair, OutputComparison* total);

// Whether `c` passes: exactly identical without a declared precision change,
// else agreement >= min_agreement (a min_agreement of 0 accepts no change).
// On failure `why` says what was required and what was found.
bool OutputsAcceptable(const OutputComparison& c, bool precision_change, double min_agreement,
                       std::string* why);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_IDENTITY_GENERATED_OUTPUTS_H_
