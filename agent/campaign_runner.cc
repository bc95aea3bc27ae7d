#include "agent/campaign_runner.h"

#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "agent/workspace.h"

namespace densegate::agent {
namespace {

constexpr char kChangeLine[] = "\n\nchange: ";
constexpr char kTotalPrefix[] = "total-";

std::string RefPrefix(const std::string& campaign) {
  return absl::StrCat("densegate/agent/", campaign, "/");
}

bool IsTotal(const Experiment& e) { return absl::StartsWith(e.key, kTotalPrefix); }

std::string DecisionName(const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) return v1::EvaluationState_Name(e.state());
  return v1::Decision_Name(e.verdict().decision());
}

std::string Measured(const v1::Evaluation& e, const std::string& metric) {
  const v1::MetricComparison* m = GoalComparison(e, metric);
  if (m == nullptr) return absl::StrCat(metric, " not measured");
  if (m->inputs_identical()) return absl::StrCat(metric, " unchanged (identical inputs)");
  return absl::StrFormat("%s %.3fx [%.3f, %.3f] over %d pairs", metric, m->speedup(),
                         m->ci_low(), m->ci_high(), m->n_pairs());
}

std::string MergeText(const v1::Evaluation& e) {
  switch (e.merge().state()) {
    case v1::MERGED:
      return "merged as " + e.merge().merged_sha().substr(0, 12);
    case v1::MERGE_FAILED:
      return "merge failed: " + e.merge().message();
    default:
      return "";
  }
}

std::string OutcomeLine(const Experiment& x, const std::string& metric) {
  std::string line = absl::StrCat(x.key, " (", x.evaluation.id(), "): ", DecisionName(x.evaluation),
                                  ", ", Measured(x.evaluation, metric));
  if (x.confirmation) {
    absl::StrAppend(&line, "; confirmed afresh: ", DecisionName(*x.confirmation), ", ",
                    Measured(*x.confirmation, metric));
  }
  if (std::string merge = MergeText(x.evaluation); !merge.empty()) absl::StrAppend(&line, ", ", merge);
  return line;
}

double NodeHours(const std::vector<v1::Evaluation>& all) {
  double seconds = 0;
  for (const v1::Evaluation& e : all) {
    for (const v1::Stage& s : e.verdict().stages()) seconds += s.seconds();
  }
  return seconds / 3600;
}

// The product of the landed experiments' speedups, each as its fresh
// confirmation measured it (the accepting verdict is the selected one).
double LandedSpeedup(const std::vector<Experiment>& history, const std::string& metric) {
  double product = 1;
  for (const Experiment& x : history) {
    if (x.evaluation.merge().state() != v1::MERGED) continue;
    const v1::Evaluation& measured = x.confirmation ? *x.confirmation : x.evaluation;
    if (const v1::MetricComparison* m = GoalComparison(measured, metric)) {
      product *= m->speedup();
    }
  }
  return product;
}

// The confirmation the merge queue ran for `e`, if any.
std::optional<v1::Evaluation> ConfirmationOf(const v1::Evaluation& e,
                                             const std::map<std::string, const v1::Evaluation*>& by_id) {
  const std::string& id = e.merge().remeasure_evaluation_id();
  auto it = by_id.find(id);
  if (id.empty() || it == by_id.end()) return std::nullopt;
  return *it->second;
}

// The merge queue's confirmation (or re-measure) of an accepted
// experiment, once its merge ended.
absl::StatusOr<std::optional<v1::Evaluation>> Confirmation(ExperimentService* service,
                                                           const v1::Evaluation& e) {
  if (e.merge().remeasure_evaluation_id().empty()) return std::optional<v1::Evaluation>();
  absl::StatusOr<v1::Evaluation> c = service->Get(e.merge().remeasure_evaluation_id());
  if (!c.ok()) return c.status();
  return std::optional<v1::Evaluation>(*std::move(c));
}

}  // namespace

std::string ExperimentRef(const std::string& campaign, const std::string& key) {
  return RefPrefix(campaign) + key;
}

std::vector<Experiment> HistoryOf(const std::string& campaign,
                                  const std::vector<v1::Evaluation>& evaluations) {
  std::map<std::string, const v1::Evaluation*> by_id;
  for (const v1::Evaluation& e : evaluations) by_id[e.id()] = &e;
  const std::string prefix = RefPrefix(campaign);
  std::vector<Experiment> out;
  for (const v1::Evaluation& e : evaluations) {
    const v1::Candidate& c = e.candidate();
    if (!c.remeasure_of().empty() || !c.continues().empty() || !c.confirms().empty()) continue;
    if (!absl::StartsWith(c.candidate_ref(), prefix)) continue;
    const std::string key = c.candidate_ref().substr(prefix.size());
    // A second part's verdict is the one that counts.
    const v1::Evaluation* last = &e;
    while (!last->continued_by().empty() && by_id.count(last->continued_by())) {
      last = by_id[last->continued_by()];
    }
    Experiment experiment{key, *last, ConfirmationOf(*last, by_id)};
    bool replaced = false;
    for (Experiment& x : out) {
      if (x.key == key) {
        x = experiment;
        replaced = true;
      }
    }
    if (!replaced) out.push_back(std::move(experiment));
  }
  return out;
}

nlohmann::json HistoryJson(const v1::Campaign& campaign, const std::vector<Experiment>& history) {
  nlohmann::json out = nlohmann::json::array();
  const std::string& metric = campaign.goal().metric();
  for (const Experiment& x : history) {
    const v1::Evaluation& e = x.evaluation;
    const std::string& text = e.candidate().hypothesis();
    const size_t cut = text.find(kChangeLine);
    nlohmann::json j = {
        {"key", x.key},
        {"evaluation_id", e.id()},
        {"hypothesis", text.substr(0, cut)},
        {"change", cut == std::string::npos ? "" : text.substr(cut + sizeof(kChangeLine) - 1)},
        {"screen", !e.candidate().metric_scope().empty()},
        {"state", v1::EvaluationState_Name(e.state())},
        {"decision", v1::Decision_Name(e.verdict().decision())},
        {"merge", v1::MergeState_Name(e.merge().state())},
        {"merged_sha", e.merge().merged_sha()},
        {"why", nlohmann::json::array()},
        {"claims", nlohmann::json::array()},
    };
    for (const v1::Reason& r : e.verdict().reasons()) j["why"].push_back(r.message());
    for (const v1::ClaimResult& c : e.verdict().claims()) {
      j["claims"].push_back({{"metric", c.metric()}, {"claimed", c.claimed()},
                             {"verified", c.verified()}});
    }
    auto interval = [](const v1::MetricComparison& m) {
      return nlohmann::json{{"speedup", m.speedup()}, {"ci_low", m.ci_low()},
                            {"ci_high", m.ci_high()}, {"pairs", m.n_pairs()}};
    };
    if (const v1::MetricComparison* m = GoalComparison(e, metric)) {
      j["goal_metric"] = interval(*m);
      j["goal_metric"]["metric"] = metric;
    }
    if (x.confirmation) {
      j["confirmation"] = {{"evaluation_id", x.confirmation->id()},
                           {"decision", v1::Decision_Name(x.confirmation->verdict().decision())}};
      if (const v1::MetricComparison* m = GoalComparison(*x.confirmation, metric)) {
        j["confirmation"]["goal_metric"] = interval(*m);
      }
    }
    out.push_back(std::move(j));
  }
  return out;
}

std::string HistoryText(const v1::Campaign& campaign, const std::vector<Experiment>& history) {
  std::string out = absl::StrFormat(
      "campaign %s: %s on %s, goal %s >= %.2fx of %s\n", campaign.id(), campaign.repo(),
      campaign.branch(), campaign.goal().metric(), campaign.goal().min_speedup(),
      campaign.start_sha().substr(0, 12));
  const nlohmann::json entries = HistoryJson(campaign, history);
  int n = 0;
  for (size_t i = 0; i < history.size(); ++i) {
    const nlohmann::json& j = entries[i];
    absl::StrAppendFormat(&out, "\n%d. %s (%s, %s)\n", ++n, history[i].key,
                          j["evaluation_id"].get<std::string>(),
                          j["screen"].get<bool>() ? "screen" : "full");
    absl::StrAppend(&out, "   hypothesis: ", j["hypothesis"].get<std::string>(), "\n");
    if (!j["change"].get<std::string>().empty()) {
      absl::StrAppend(&out, "   change: ", j["change"].get<std::string>(), "\n");
    }
    for (const nlohmann::json& c : j["claims"]) {
      absl::StrAppendFormat(&out, "   claim: %s >= %.2fx, %s\n", c["metric"].get<std::string>(),
                            c["claimed"].get<double>(),
                            c["verified"].get<bool>() ? "verified" : "not verified");
    }
    absl::StrAppend(&out, "   measured: ", Measured(history[i].evaluation, campaign.goal().metric()),
                    "\n");
    if (const std::optional<v1::Evaluation>& c = history[i].confirmation) {
      absl::StrAppend(&out, "   confirmed afresh (", c->id(), "): ",
                      v1::Decision_Name(c->verdict().decision()), ", ",
                      Measured(*c, campaign.goal().metric()), "\n");
    }
    std::string decision = DecisionName(history[i].evaluation);
    if (std::string merge = MergeText(history[i].evaluation); !merge.empty()) {
      absl::StrAppend(&decision, ", ", merge);
    }
    absl::StrAppend(&out, "   decision: ", decision, "\n");
    int shown = 0;
    for (const nlohmann::json& why : j["why"]) {
      if (shown++ == 3) break;
      absl::StrAppend(&out, "   why: ", why.get<std::string>(), "\n");
    }
  }
  if (history.empty()) absl::StrAppend(&out, "\nno experiments yet\n");
  return out;
}

namespace {

// Pushes the worktree's commit as the experiment's branch, submits it and
// follows it to its end (its merge included); the experiment as it ended.
absl::StatusOr<Experiment> SubmitAndAwait(const v1::Campaign& campaign, ExperimentService* service,
                                          const CampaignRun& run, Workspace& ws,
                                          const std::string& tip, const Proposal& proposal,
                                          const std::string& shortstat, int number) {
  const std::string ref = ExperimentRef(campaign.id(), proposal.key);
  if (absl::Status s = ws.Push("refs/heads/" + ref); !s.ok()) return s;
  v1::SubmitRequest req;
  req.set_repo(campaign.repo());
  req.set_baseline_ref(tip);
  req.set_candidate_ref(ref);
  req.set_kind(v1::EXPERIMENT);
  req.set_policy(v1::GAIN);
  for (const v1::Claim& c : proposal.claims) *req.add_claims() = c;
  req.set_hypothesis(absl::StrCat(proposal.hypothesis, kChangeLine, shortstat));
  req.set_campaign(campaign.id());
  if (proposal.screen) {
    req.add_metric_scope(campaign.goal().metric());
  } else {
    req.set_target_branch(campaign.branch());
  }
  absl::StatusOr<v1::Evaluation> submitted = service->Submit(req);
  if (!submitted.ok()) return submitted.status();
  run.log(absl::StrCat("[", number, "/", campaign.budget().max_experiments(), "] ", proposal.key,
                       " submitted as ", submitted->id(), ": ",
                       proposal.hypothesis.substr(0, proposal.hypothesis.find('\n'))));
  absl::StatusOr<v1::Evaluation> ended = AwaitOutcome(service, submitted->id(), run.poll);
  if (!ended.ok()) return ended.status();
  absl::StatusOr<std::optional<v1::Evaluation>> confirmation = Confirmation(service, *ended);
  if (!confirmation.ok()) return confirmation.status();
  return Experiment{proposal.key, *ended, *confirmation};
}

// Why the loop stops now, or "" to go on.
std::string StopReason(const v1::Campaign& campaign, const CampaignOutcome& out,
                       const std::vector<v1::Evaluation>& all, bool proposers_done) {
  int experiments = 0;
  for (const Experiment& x : out.history) experiments += !IsTotal(x);
  if (out.landed_speedup >= campaign.goal().min_speedup()) {
    return absl::StrFormat("goal reached by the landed experiments (%.3fx, as confirmed)",
                           out.landed_speedup);
  }
  if (experiments >= campaign.budget().max_experiments()) {
    return absl::StrCat("budget spent: ", experiments, " experiments");
  }
  if (const double hours = NodeHours(all);
      campaign.budget().max_node_hours() > 0 && hours >= campaign.budget().max_node_hours()) {
    return absl::StrFormat("budget spent: %.2f node-hours", hours);
  }
  return proposers_done ? "every proposer is done" : "";
}

// The start against the tip, measured once with the goal as a claim: what
// the campaign gained (nothing to measure when the tip did not move).
absl::Status MeasureTotal(const v1::Campaign& campaign, ExperimentService* service,
                          const CampaignRun& run, Workspace& ws, CampaignOutcome* out) {
  const std::string& metric = campaign.goal().metric();
  absl::StatusOr<std::string> tip = ws.FetchTip(campaign.branch());
  if (!tip.ok()) return tip.status();
  if (*tip == campaign.start_sha()) return absl::OkStatus();
  const std::string key = kTotalPrefix + tip->substr(0, 12);
  for (const Experiment& x : out->history) {
    if (x.key == key) out->total = x.evaluation;
  }
  if (!out->total) {
    if (absl::Status s = ws.Reset(*tip); !s.ok()) return s;
    const std::string ref = ExperimentRef(campaign.id(), key);
    if (absl::Status s = ws.Push("refs/heads/" + ref); !s.ok()) return s;
    v1::SubmitRequest req;
    req.set_repo(campaign.repo());
    req.set_baseline_ref(campaign.start_sha());
    req.set_candidate_ref(ref);
    req.set_kind(v1::EXPERIMENT);
    req.set_policy(v1::GAIN);
    v1::Claim* goal = req.add_claims();
    goal->set_metric(metric);
    goal->set_min_speedup(campaign.goal().min_speedup());
    req.set_hypothesis(absl::StrCat("the campaign's gain: ", campaign.start_sha().substr(0, 12),
                                    " to ", tip->substr(0, 12), " on ", metric));
    req.set_campaign(campaign.id());
    req.add_metric_scope(metric);
    absl::StatusOr<v1::Evaluation> submitted = service->Submit(req);
    if (!submitted.ok()) return submitted.status();
    run.log(absl::StrCat("measuring the start against the tip as ", submitted->id()));
    absl::StatusOr<v1::Evaluation> ended = AwaitOutcome(service, submitted->id(), run.poll);
    if (!ended.ok()) return ended.status();
    out->total = *ended;
    out->history.push_back({key, *ended, std::nullopt});
  }
  for (const v1::ClaimResult& c : out->total->verdict().claims()) {
    if (c.metric() == metric) out->goal_reached = c.verified();
  }
  run.log(absl::StrCat("campaign gain: ", Measured(*out->total, metric), "; goal ",
                       out->goal_reached ? "reached" : "not reached"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CampaignOutcome> RunCampaign(const v1::Campaign& campaign,
                                            ExperimentService* service, const CampaignRun& run) {
  const std::string& metric = campaign.goal().metric();
  Workspace ws(run.workdir, campaign.repo(), run.tools.git);
  std::vector<std::unique_ptr<Proposer>> proposers;
  for (const v1::Proposer& p : campaign.proposers()) {
    proposers.push_back(NewProposer(p, run.tools));
  }
  absl::StatusOr<std::vector<v1::Evaluation>> listed = service->ListCampaign(campaign.id());
  if (!listed.ok()) return listed.status();
  CampaignOutcome out;
  out.history = HistoryOf(campaign.id(), *listed);
  std::vector<v1::Evaluation> all = *listed;
  // What a killed run left running is followed, not submitted again.
  for (Experiment& x : out.history) {
    if (OutcomeFinal(x.evaluation)) continue;
    run.log(absl::StrCat("awaiting ", x.key, " (", x.evaluation.id(), "), submitted earlier"));
    absl::StatusOr<v1::Evaluation> e = AwaitOutcome(service, x.evaluation.id(), run.poll);
    if (!e.ok()) return e.status();
    absl::StatusOr<std::optional<v1::Evaluation>> confirmation = Confirmation(service, *e);
    if (!confirmation.ok()) return confirmation.status();
    x.evaluation = *e;
    x.confirmation = *confirmation;
    run.log(OutcomeLine(x, metric));
  }
  std::string last_feedback;
  size_t proposer = 0;
  int idle = 0;  // Proposals in a row that submitted nothing.
  while (true) {
    out.landed_speedup = LandedSpeedup(out.history, metric);
    out.stopped = StopReason(campaign, out, all, proposer == proposers.size());
    if (!out.stopped.empty()) break;
    if (++idle > 1000) return absl::InternalError("1000 proposals in a row submitted nothing");
    absl::StatusOr<std::string> tip = ws.FetchTip(campaign.branch());
    if (!tip.ok()) return tip.status();
    if (absl::Status s = ws.Reset(*tip); !s.ok()) return s;
    const std::string history_json = HistoryJson(campaign, out.history).dump(2);
    ProposalContext ctx{&campaign, *tip, &out.history, ws.dir(), last_feedback, history_json};
    Proposer& current = *proposers[proposer];
    absl::StatusOr<Proposal> proposal = current.Next(ctx);
    if (!proposal.ok() || proposal->kind == Proposal::Kind::kDone) {
      run.log(absl::StrCat(current.Name(), proposal.ok() ? ": done: " : ": stopped: ",
                           proposal.ok() ? proposal->note : proposal.status().message()));
      ++proposer;
      continue;
    }
    if (proposal->kind == Proposal::Kind::kSkipped) {
      run.log(absl::StrCat(proposal->key, ": skipped: ", proposal->note));
      continue;
    }
    absl::StatusOr<Workspace::Change> change = ws.Commit(
        *tip, absl::StrCat("agent ", campaign.id(), ": ",
                           proposal->hypothesis.substr(0, proposal->hypothesis.find('\n'))));
    if (!change.ok()) return change.status();
    if (change->shortstat.empty()) {
      run.log(absl::StrCat(proposal->key, ": skipped: the change is empty"));
      continue;
    }
    int experiments = 0;
    for (const Experiment& x : out.history) experiments += !IsTotal(x);
    absl::StatusOr<Experiment> done = SubmitAndAwait(campaign, service, run, ws, *tip, *proposal,
                                                     change->shortstat, experiments + 1);
    if (!done.ok()) return done.status();
    idle = 0;
    out.history.push_back(*done);
    all.push_back(done->evaluation);
    if (done->confirmation) all.push_back(*done->confirmation);
    run.log(OutcomeLine(out.history.back(), metric));
    absl::StatusOr<std::string> feedback = service->FeedbackSummary(done->evaluation.id());
    last_feedback = feedback.ok() ? *feedback : "";
  }
  run.log("campaign " + campaign.id() + ": " + out.stopped);
  if (absl::Status s = MeasureTotal(campaign, service, run, ws, &out); !s.ok()) return s;
  return out;
}

}  // namespace densegate::agent
