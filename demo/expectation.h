// Whether a demo candidate got what the scenario says it should: its
// decision and reason, verified claims, its merge and whether it counts as a
// gain. Kept apart from the demo's processes so that the rules can be tested
// on hand-made evaluations.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_DEMO_EXPECTATION_H_
#define DENSEGATE_DEMO_EXPECTATION_H_

#include <string>

#include "demo/scenario.h"
#include "proto/densegate.pb.h"

namespace densegate::demo {

// Empty when `evaluation` is what `candidate` expects; otherwise why not,
// e.g. "expected accept" or "expected a merge: merge_failed <message>".
std::string Mismatch(const ScenarioCandidate& candidate, const v1::Evaluation& evaluation);

// Non-empty (saying what happened) when a miss is only an undecided
// measurement: the candidate should be accepted and its evaluation ended
// inconclusive for want of pairs (every reason UNDECIDED, no claim's
// interval below the claim), or it got everything it should but the merge,
// refused because the re-measure against the moved tip (`remeasure`, null
// when none ran) ended inconclusive that way. Empty for any other miss: a
// wrong accept or reject, an inconclusive held for review (a speedup above
// the plausible ceiling), a claim in doubt or not verified, an evaluation
// that did not finish.
std::string InconclusiveOnly(const ScenarioCandidate& candidate,
                             const v1::Evaluation& evaluation,
                             const v1::Evaluation* remeasure);

}  // namespace densegate::demo

#endif  // DENSEGATE_DEMO_EXPECTATION_H_
