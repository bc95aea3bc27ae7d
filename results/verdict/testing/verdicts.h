// Verdicts as an honest node reports them, for jobs whose decision rests on
// no samples, for tests and benchmarks of the scheduler (which decides again
// from the samples and quarantines a node whose verdict disagrees): REJECT
// from a failed correctness stage, ACCEPT because the one metric's inputs
// were identical in both arms (not measured).
//
// Thread-safety: pure function.
#ifndef DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_
#define DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_

#include <string>

#include "proto/densegate.pb.h"

namespace densegate::results::testing {

// `decision`: ACCEPT or REJECT.
v1::Verdict VerdictWithoutSamples(const std::string& evaluation_id, v1::Policy policy,
                                  v1::Decision decision);

}  // namespace densegate::results::testing

#endif  // DENSEGATE_RESULTS_VERDICT_TESTING_VERDICTS_H_
