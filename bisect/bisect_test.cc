#include "bisect/bisect.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::bisect {
namespace {

using ::testing::ElementsAre;

constexpr char kMetric[] = "kda_decode.default_b1";

// A scheduler whose verdicts come from a known culprit: commits before it
// are accepted, it and those after are rejected for a regression of the
// metric, and the commits in `undecided` end inconclusive.
class FakeEvaluator : public StepEvaluator {
 public:
  FakeEvaluator(std::vector<std::string> commits, int culprit)
      : commits_(std::move(commits)), culprit_(culprit) {}

  absl::StatusOr<std::string> Submit(const v1::SubmitRequest& request) override {
    if (!submit_error.ok()) return submit_error;
    requests.push_back(request);
    const std::string id = absl::StrCat("ev-", requests.size());
    commit_of_[id] = request.candidate_ref();
    return id;
  }

  absl::StatusOr<v1::Evaluation> Await(const std::string& id) override {
    const std::string& commit = commit_of_.at(id);
    const int index = static_cast<int>(
        std::find(commits_.begin(), commits_.end(), commit) - commits_.begin());
    v1::Evaluation e;
    e.set_id(id);
    e.set_state(v1::FINISHED);
    v1::Verdict* v = e.mutable_verdict();
    v1::MetricComparison* m = v->add_metrics();
    m->set_metric(kMetric);
    m->set_n_pairs(6);
    if (undecided.count(commit)) {
      v->set_decision(v1::INCONCLUSIVE);
      m->set_speedup(0.99);
    } else if (index >= culprit_) {
      v->set_decision(v1::REJECT);
      m->set_speedup(0.5);
      v1::Reason* r = v->add_reasons();
      r->set_code(v1::REGRESSION);
      r->set_metric(kMetric);
    } else {
      v->set_decision(v1::ACCEPT);
      m->set_speedup(1.0);
    }
    return e;
  }

  std::vector<v1::SubmitRequest> requests;
  std::set<std::string> undecided;
  absl::Status submit_error;

 private:
  std::vector<std::string> commits_;
  int culprit_;
  std::map<std::string, std::string> commit_of_;
};

Range SevenCommits(int parallel) {
  Range r;
  r.repo = "/repo";
  r.metric = kMetric;
  r.good = "g000000000000000";
  for (int i = 1; i <= 7; ++i) r.commits.push_back(absl::StrCat("c", i, "00000000000000"));
  r.parallel = parallel;
  return r;
}

TEST(BisectTest, FindsTheCulpritWhereverItIsAndHoweverManyStepsRunAtOnce) {
  for (int parallel : {1, 2, 3, 7}) {
    for (int culprit = 0; culprit < 7; ++culprit) {
      const Range range = SevenCommits(parallel);
      FakeEvaluator evaluator(range.commits, culprit);
      absl::StatusOr<Outcome> outcome = FindCulprit(range, evaluator);
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      EXPECT_EQ(outcome->culprit, range.commits[culprit])
          << "parallel " << parallel << ", culprit " << culprit;
      // The bad end is never evaluated; no commit twice.
      std::set<std::string> seen;
      for (const v1::SubmitRequest& r : evaluator.requests) {
        EXPECT_NE(r.candidate_ref(), range.commits.back());
        EXPECT_TRUE(seen.insert(r.candidate_ref()).second) << r.candidate_ref();
      }
      EXPECT_EQ(outcome->steps.size(), evaluator.requests.size());
    }
  }
}

TEST(BisectTest, EachStepIsAScopedNoRegressionCiEvaluationAgainstTheGoodCommit) {
  const Range range = SevenCommits(2);
  FakeEvaluator evaluator(range.commits, 4);
  ASSERT_TRUE(FindCulprit(range, evaluator).ok());
  ASSERT_FALSE(evaluator.requests.empty());
  const v1::SubmitRequest& first = evaluator.requests.front();
  EXPECT_EQ(first.repo(), "/repo");
  EXPECT_EQ(first.baseline_ref(), range.good);
  EXPECT_EQ(first.kind(), v1::CI);
  EXPECT_EQ(first.policy(), v1::NO_REGRESSION);
  EXPECT_THAT(first.metric_scope(), ElementsAre(kMetric));
  EXPECT_TRUE(first.target_branch().empty());
  // Named so that the report can rebuild the bisection (1-based index).
  EXPECT_EQ(first.campaign(),
            results::BisectCampaign(kMetric, range.good, range.commits.back()));
  const int index = static_cast<int>(
      std::find(range.commits.begin(), range.commits.end(), first.candidate_ref()) -
      range.commits.begin());
  EXPECT_EQ(first.hypothesis(), results::BisectHypothesis(index + 1, 7));
}

TEST(BisectTest, AnUndecidedStepStopsTheBisectionWithoutACulprit) {
  const Range range = SevenCommits(1);
  FakeEvaluator evaluator(range.commits, 5);
  // One at a time, the first split of 7 commits is the third (index 2).
  ASSERT_THAT(Splits(-1, 6, 1), ElementsAre(2));
  evaluator.undecided.insert(range.commits[2]);
  std::vector<int> rounds;
  std::vector<std::string> told;
  Listener listener;
  listener.round = [&](int round, int commits) { rounds.push_back(commits); };
  listener.step = [&](const Step& step) { told.push_back(step.commit); };
  absl::StatusOr<Outcome> outcome = FindCulprit(range, evaluator, listener);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(outcome->culprit.empty());
  ASSERT_EQ(outcome->steps.size(), 1u);
  EXPECT_EQ(outcome->steps.back().result, results::BisectResult::kUndecided);
  EXPECT_EQ(evaluator.requests.size(), 1u);  // Nothing submitted after it.
  EXPECT_THAT(rounds, ElementsAre(1));
  EXPECT_THAT(told, ElementsAre(range.commits[2]));
}

TEST(BisectTest, SplitsSpreadEvenlyInsideTheOpenRange) {
  EXPECT_THAT(Splits(-1, 6, 1), ElementsAre(2));
  EXPECT_THAT(Splits(-1, 6, 2), ElementsAre(1, 3));
  EXPECT_THAT(Splits(-1, 6, 10), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(Splits(2, 4, 3), ElementsAre(3));
  EXPECT_TRUE(Splits(2, 3, 3).empty());
}

TEST(BisectTest, RefusesAnIncompleteRangeAndPassesEvaluatorErrorsOn) {
  Range range = SevenCommits(2);
  FakeEvaluator evaluator(range.commits, 3);
  Range no_commits = range;
  no_commits.commits.clear();
  EXPECT_EQ(FindCulprit(no_commits, evaluator).status().code(), absl::StatusCode::kInvalidArgument);
  Range no_parallel = range;
  no_parallel.parallel = 0;
  EXPECT_EQ(FindCulprit(no_parallel, evaluator).status().code(), absl::StatusCode::kInvalidArgument);
  evaluator.submit_error = absl::PermissionDeniedError("agent tokens may not bisect");
  EXPECT_EQ(FindCulprit(range, evaluator).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(BisectTest, ASingleCommitIsTheCulpritWithoutAStep) {
  Range range = SevenCommits(2);
  range.commits.resize(1);
  FakeEvaluator evaluator(range.commits, 0);
  absl::StatusOr<Outcome> outcome = FindCulprit(range, evaluator);
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->culprit, range.commits[0]);
  EXPECT_TRUE(evaluator.requests.empty());
}

}  // namespace
}  // namespace densegate::bisect
