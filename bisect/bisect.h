// Bisection: which commit between a good and a bad one slowed a metric.
//
// Each round submits up to `parallel` commits of the remaining range, each
// evaluated against the good commit (CI kind, so it runs before
// experiments; policy no-regression; scoped to the metric, so the
// manifest's other benchmarks neither run nor decide the step), and narrows
// the range to the first commit the gate rejected for a regression of the
// metric. A step the gate leaves undecided stops the bisection: neither end
// of the range can take it. The steps are named (campaign, hypothesis) so
// that the report can rebuild the bisection from the store
// (results/report/report.h).
//
// FindCulprit() talks to the scheduler only through StepEvaluator:
// `densegate bisect` implements it with the gRPC API, tests with a fake.
// Not thread-safe: it calls the evaluator and the listener on its caller's
// thread.
#ifndef DENSEGATE_BISECT_BISECT_H_
#define DENSEGATE_BISECT_BISECT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/densegate.pb.h"
#include "results/report/report.h"

namespace densegate::bisect {

// Submits and follows the evaluations of a bisection's steps.
class StepEvaluator {
 public:
  virtual ~StepEvaluator() = default;
  // Queues the request; returns the evaluation's id.
  virtual absl::StatusOr<std::string> Submit(const v1::SubmitRequest& request) = 0;
  // Waits until the evaluation ended (FINISHED, CANCELLED or DEAD); one
  // that noise left inconclusive is followed to its second part.
  virtual absl::StatusOr<v1::Evaluation> Await(const std::string& id) = 0;
};

struct Range {
  std::string repo;
  std::string metric;
  std::string good;                  // Full SHA of the good commit.
  std::vector<std::string> commits;  // After good up to bad, oldest first.
  int parallel = 2;                  // Commits evaluated per round, >= 1.
};

struct Step {
  std::string commit;
  v1::Evaluation evaluation;
  results::BisectResult result = results::BisectResult::kUndecided;
};

struct Outcome {
  std::vector<Step> steps;  // In the order they were decided.
  // The first regressed commit after the last clean one; empty when a step
  // was undecided (then it is steps.back()).
  std::string culprit;
};

// Told of each round before its steps are awaited, and of each step once
// decided.
struct Listener {
  std::function<void(int round, int commits)> round;
  std::function<void(const Step& step)> step;
};

// Up to `k` commit indices strictly between `lo` (known good; -1 is the
// good commit itself) and `hi` (known bad), evenly spread.
std::vector<int> Splits(int lo, int hi, int k);

// InvalidArgument for an empty range, a missing metric or parallel < 1;
// the evaluator's errors pass through.
absl::StatusOr<Outcome> FindCulprit(const Range& range, StepEvaluator& evaluator,
                            const Listener& listener = {});

}  // namespace densegate::bisect

#endif  // DENSEGATE_BISECT_BISECT_H_
