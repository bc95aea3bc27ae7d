#include "bisect/bisect.h"

#include <algorithm>
#include <cstdint>

namespace densegate::bisect {

std::vector<int> Splits(int lo, int hi, int k) {
  std::vector<int> out;
  k = std::min(k, hi - lo - 1);
  for (int i = 1; i <= k; ++i) {
    const int idx = lo + static_cast<int>(static_cast<int64_t>(i) * (hi - lo) / (k + 1));
    if (idx > lo && idx < hi && (out.empty() || idx > out.back())) out.push_back(idx);
  }
  return out;
}

absl::StatusOr<Outcome> FindCulprit(const Range& range, StepEvaluator& evaluator,
                            const Listener& listener) {
  if (range.commits.empty() || range.metric.empty() || range.good.empty() ||
      range.parallel < 1) {
    return absl::InvalidArgumentError(
        "a bisection needs a metric, a good commit, at least one commit after it and "
        "parallel >= 1");
  }
  const int count = static_cast<int>(range.commits.size());
  Outcome outcome;
  // lo: the last commit known clean (-1: the good one); hi: the first known
  // regressed (the bad end is assumed so).
  int lo = -1, hi = count - 1;
  for (int round = 1; hi - lo > 1; ++round) {
    const std::vector<int> splits = Splits(lo, hi, range.parallel);
    std::vector<std::string> ids;
    for (int idx : splits) {
      v1::SubmitRequest req;
      req.set_repo(range.repo);
      req.set_baseline_ref(range.good);
      req.set_candidate_ref(range.commits[idx]);
      req.set_kind(v1::CI);
      req.set_policy(v1::NO_REGRESSION);
      req.add_metric_scope(range.metric);
      req.set_hypothesis(results::BisectHypothesis(idx + 1, count));
      req.set_campaign(results::BisectCampaign(range.metric, range.good, range.commits.back()));
      absl::StatusOr<std::string> id = evaluator.Submit(req);
      if (!id.ok()) return id.status();
      ids.push_back(*std::move(id));
    }
    if (listener.round) listener.round(round, static_cast<int>(splits.size()));
    int first_bad = -1, last_good = lo;
    for (size_t i = 0; i < splits.size(); ++i) {
      absl::StatusOr<v1::Evaluation> e = evaluator.Await(ids[i]);
      if (!e.ok()) return e.status();
      Step step{range.commits[splits[i]], *std::move(e), results::BisectResult::kUndecided};
      if (step.evaluation.state() == v1::FINISHED) {
        step.result = results::ClassifyBisectStep(step.evaluation.verdict(), range.metric);
      }
      outcome.steps.push_back(step);
      if (listener.step) listener.step(outcome.steps.back());
      if (step.result == results::BisectResult::kUndecided) return outcome;
      // Steps are awaited in range order: commits before the first
      // regressed one that came out clean move the good end forward.
      if (first_bad >= 0) continue;
      if (step.result == results::BisectResult::kRegressed) {
        first_bad = splits[i];
      } else {
        last_good = splits[i];
      }
    }
    lo = last_good;
    if (first_bad >= 0) hi = first_bad;
  }
  outcome.culprit = range.commits[hi];
  return outcome;
}

}  // namespace densegate::bisect
