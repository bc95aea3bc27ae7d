// The campaign loop: `densegate agent run`. Each iteration asks the current
// proposer for an experiment, commits it on a fresh branch off the target
// branch's tip, submits it (an EXPERIMENT under policy GAIN, with its
// hypothesis and claims, aimed at the branch unless it is a screen), waits
// for its verdict and, when accepted, for the merge queue to land it or
// fail, reads its feedback, and goes on from the new tip. It stops when the
// goal is reached (the product of the landed experiments' measured
// speedups of the goal's metric), the budget is spent, or every proposer
// is done; then the start and the tip are measured against each other once
// more, so that the campaign's gain is a measurement, not a product of
// estimates.
//
// Everything a run knows is in the scheduler's store: the campaign spec and
// its evaluations. A run killed anywhere resumes (`--resume ID`) by reading
// them back, awaiting unfinished experiments, and never submits a key that
// has an evaluation already.
//
// Thread-safety: one run per campaign at a time, on its caller's thread.
#ifndef DENSEGATE_AGENT_CAMPAIGN_RUNNER_H_
#define DENSEGATE_AGENT_CAMPAIGN_RUNNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/experiment_service.h"
#include "agent/proposer.h"
#include "nlohmann/json.hpp"

namespace densegate::agent {

// The branch an experiment is pushed to.
std::string ExperimentRef(const std::string& campaign, const std::string& key);

// The campaign's experiments from its evaluations, oldest first: one per
// key (its latest evaluation), merge re-measures and second parts left to
// the evaluation they belong to.
std::vector<Experiment> HistoryOf(const std::string& campaign,
                                  const std::vector<v1::Evaluation>& evaluations);

// The history as `densegate agent log --json` prints it and external
// proposers read it.
nlohmann::json HistoryJson(const v1::Campaign& campaign, const std::vector<Experiment>& history);

// The history for a person: per experiment its hypothesis, change, claims,
// measured interval on the goal's metric, decision and why.
std::string HistoryText(const v1::Campaign& campaign, const std::vector<Experiment>& history);

struct CampaignRun {
  std::string workdir;  // The agent's clone (Workspace).
  ProposerTools tools;
  // Progress lines, as they happen.
  std::function<void(const std::string&)> log = [](const std::string&) {};
  absl::Duration poll = absl::Seconds(1);
};

struct CampaignOutcome {
  std::vector<Experiment> history;
  std::string stopped;  // Why the loop ended.
  // Product of the landed experiments' speedups of the goal's metric.
  double landed_speedup = 1;
  // The start against the final tip (absent when nothing landed).
  std::optional<v1::Evaluation> total;
  bool goal_reached = false;  // By the total measurement.
};

absl::StatusOr<CampaignOutcome> RunCampaign(const v1::Campaign& campaign,
                                            ExperimentService* service, const CampaignRun& run);

}  // namespace densegate::agent

#endif  // DENSEGATE_AGENT_CAMPAIGN_RUNNER_H_
