// The client side of the scheduler API: `densegate submit | status | watch |
// list | cancel | approve | decline | bisect`, each with --json (flags: client_flags.h).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "agent/experiment_service.h"
#include "bisect/bisect.h"
#include "cli/client_flags.h"
#include "cli/command.h"
#include "cli/terminal_progress.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.grpc.pb.h"
#include "results/report/report.h"

namespace densegate::cli {
namespace {

int ExitFor(const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) return kExitInfrastructure;
  switch (e.verdict().decision()) {
    case v1::ACCEPT:
      return kExitAccept;
    case v1::REJECT:
      return kExitReject;
    default:
      return kExitInconclusive;
  }
}

void PrintEvaluation(const v1::Evaluation& e) {
  std::cout << absl::StrFormat("%s  %s  %s %s..%s  node=%s attempt=%d\n", e.id(),
                               absl::AsciiStrToLower(v1::EvaluationState_Name(e.state())),
                               e.candidate().repo(), e.candidate().baseline_sha().substr(0, 8),
                               e.candidate().candidate_sha().substr(0, 8), e.node_id(),
                               e.attempt());
  if (e.has_verdict()) {
    std::cout << "  decision: " << absl::AsciiStrToLower(v1::Decision_Name(e.verdict().decision()))
              << "\n";
    for (const auto& m : e.verdict().metrics()) {
      std::cout << absl::StrFormat("  %-28s %s\n", m.metric(), results::SpeedupText(m));
    }
    for (const auto& r : e.verdict().reasons()) std::cout << "  - " << r.message() << "\n";
  }
  if (e.merge().state() != v1::NOT_MERGING && e.merge().state() != v1::MERGE_STATE_UNSPECIFIED) {
    std::cout << absl::StrFormat("  merge into %s: %s%s%s\n", e.candidate().target_branch(),
                                 absl::AsciiStrToLower(v1::MergeState_Name(e.merge().state())),
                                 e.merge().message().empty() ? "" : ": ", e.merge().message());
  }
}

// Streams events until the evaluation ends; a live line on a terminal.
int Watch(const ClientArgs& a, const std::string& id) {
  auto stub = Stub(a);
  grpc::ClientContext ctx;
  Attach(a, &ctx, 0);
  v1::WatchEvaluationRequest req;
  req.set_id(id);
  std::unique_ptr<grpc::ClientReader<v1::EvaluationEvent>> reader = stub->WatchEvaluation(&ctx, req);
  v1::EvaluationEvent ev;
  TerminalProgress progress;
  while (reader->Read(&ev)) {
    if (a.json) {
      std::cout << Json(ev) << "\n";
    } else if (ev.has_stage()) {
      progress.OnStage(ev.stage());
    } else if (ev.has_progress()) {
      progress.OnProgress(ev.progress());
    } else if (ev.event_case() == v1::EvaluationEvent::kState) {
      progress.Line("state: " + absl::AsciiStrToLower(v1::EvaluationState_Name(ev.state())));
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail("watch", s);
  grpc::ClientContext get_ctx;
  Attach(a, &get_ctx);
  v1::GetEvaluationRequest get;
  get.set_id(id);
  v1::Evaluation e;
  if (grpc::Status g = stub->GetEvaluation(&get_ctx, get, &e); !g.ok()) return Fail("watch", g);
  if (!a.json) PrintEvaluation(e);
  if (!e.continued_by().empty()) {
    // Its second part decides (v1::Evaluation::continued_by).
    if (!a.json) {
      std::cout << "noise left " << id << " inconclusive; its second part " << e.continued_by()
                << " pools its pairs on a calm node and decides\n";
    }
    return Watch(a, e.continued_by());
  }
  return ExitFor(e);
}

struct SubmitArgs {
  ClientArgs client;
  v1::SubmitRequest req;
  std::string kind = "experiment";
  std::string policy;
  std::vector<std::string> claims;
  std::vector<std::string> metric_scope;
  bool wait = false;
};

int Submit(SubmitArgs& a) {
  if (a.kind == "ci") {
    a.req.set_kind(v1::CI);
  } else if (a.kind == "experiment") {
    a.req.set_kind(v1::EXPERIMENT);
  } else {
    std::cerr << "densegate submit: --kind must be ci or experiment\n";
    return kExitUsage;
  }
  if (a.policy == "gain") {
    a.req.set_policy(v1::GAIN);
  } else if (a.policy == "no-regression") {
    a.req.set_policy(v1::NO_REGRESSION);
  } else if (!a.policy.empty()) {
    std::cerr << "densegate submit: --policy must be gain or no-regression\n";
    return kExitUsage;
  }
  for (const std::string& text : a.claims) {
    std::vector<std::string> parts = absl::StrSplit(text, ">=");
    double v;
    if (parts.size() != 2 || !absl::SimpleAtod(absl::StripSuffix(parts[1], "x"), &v)) {
      std::cerr << "densegate submit: --claim expects METRIC>=SPEEDUP, got \"" << text << "\"\n";
      return kExitUsage;
    }
    v1::Claim* c = a.req.add_claims();
    c->set_metric(parts[0]);
    c->set_min_speedup(v);
  }
  for (const std::string& metric : a.metric_scope) a.req.add_metric_scope(metric);
  char real[PATH_MAX];
  if (realpath(a.req.repo().c_str(), real) != nullptr) a.req.set_repo(real);
  auto stub = Stub(a.client);
  grpc::ClientContext ctx;
  Attach(a.client, &ctx);
  v1::SubmitResponse resp;
  if (grpc::Status s = stub->Submit(&ctx, a.req, &resp); !s.ok()) return Fail("submit", s);
  if (a.client.json && !a.wait) {
    std::cout << Json(resp) << "\n";
  } else {
    std::cerr << (resp.deduplicated() ? "already submitted: " : "submitted: ")
              << resp.evaluation().id() << "\n";
    if (!a.wait) std::cout << resp.evaluation().id() << "\n";
  }
  return a.wait ? Watch(a.client, resp.evaluation().id()) : 0;
}

}  // namespace

// ---- bisect -----------------------------------------------------------------

struct BisectArgs {
  ClientArgs client;
  std::string repo = ".";
  std::string metric, good, bad;
  int parallel = 2;
};

// A bisection's steps through the scheduler's API (the agent's client of
// it: bisection steps aim at no branch, so awaiting one ends with its
// verdict).
class GrpcStepEvaluator : public bisect::StepEvaluator {
 public:
  explicit GrpcStepEvaluator(const ClientArgs& a)
      : service_(Stub(a), [&a](grpc::ClientContext* ctx) { Attach(a, ctx); }) {}

  absl::StatusOr<std::string> Submit(const v1::SubmitRequest& request) override {
    absl::StatusOr<v1::Evaluation> e = service_.Submit(request);
    submit_status_ = e.status();
    if (!e.ok()) return absl::UnavailableError(e.status().message());
    return e->id();
  }

  absl::StatusOr<v1::Evaluation> Await(const std::string& evaluation_id) override {
    return agent::AwaitOutcome(&service_, evaluation_id, absl::Milliseconds(500));
  }

  // The last Submit's status, for the exit code of a refused one.
  grpc::Status submit_status() const {
    return grpc::Status(static_cast<grpc::StatusCode>(submit_status_.code()),
                        std::string(submit_status_.message()));
  }

 private:
  agent::GrpcExperimentService service_;
  absl::Status submit_status_;
};

int Bisect(const BisectArgs& a) {
  if (a.metric.empty() || a.good.empty() || a.bad.empty() || a.parallel < 1) {
    std::cerr << "densegate bisect: --metric, --good and --bad are required, --parallel >= 1\n";
    return kExitUsage;
  }
  // The commits after good up to bad, oldest first, on the path between them.
  std::unique_ptr<platform::ProcessLauncher> launcher = platform::NewSandboxLauncher();
  platform::Git git(launcher.get());
  absl::StatusOr<std::string> list = git.Run(
      a.repo, {"rev-list", "--ancestry-path", "--reverse", a.good + ".." + a.bad});
  if (!list.ok()) {
    std::cerr << "densegate bisect: " << list.status().message() << "\n";
    return kExitUsage;
  }
  bisect::Range range;
  range.repo = a.repo;
  range.metric = a.metric;
  range.parallel = a.parallel;
  range.commits = absl::StrSplit(*list, '\n', absl::SkipWhitespace());
  if (range.commits.empty()) {
    std::cerr << "densegate bisect: no commits between " << a.good << " and " << a.bad
              << " (is --good an ancestor of --bad?)\n";
    return kExitUsage;
  }
  absl::StatusOr<std::string> good_sha = git.ResolveCommit(a.repo, a.good);
  if (!good_sha.ok()) {
    std::cerr << "densegate bisect: " << good_sha.status().message() << "\n";
    return kExitUsage;
  }
  range.good = *good_sha;
  if (!a.client.json) {
    std::cerr << absl::StrFormat("bisect %s between %s (good) and %s (bad): %d commits\n",
                                 a.metric, range.good.substr(0, 12),
                                 range.commits.back().substr(0, 12), range.commits.size());
  }
  bisect::Listener listener;
  if (!a.client.json) {
    listener.round = [](int round, int commits) {
      std::cerr << absl::StrFormat("round %d: %d commit(s) in parallel\n", round, commits);
    };
    listener.step = [&a](const bisect::Step& step) {
      if (step.result == results::BisectResult::kUndecided) return;  // Said below.
      const v1::MetricComparison* m = results::FindMetric(step.evaluation.verdict(), a.metric);
      std::cerr << absl::StrFormat("  %s  %s  %s\n", step.commit.substr(0, 12),
                                   results::SpeedupText(*m), results::BisectResultName(step.result));
    };
  }
  GrpcStepEvaluator evaluator(a.client);
  absl::StatusOr<bisect::Outcome> outcome = bisect::FindCulprit(range, evaluator, listener);
  if (!outcome.ok()) {
    if (!evaluator.submit_status().ok()) return Fail("bisect", evaluator.submit_status());
    std::cerr << "densegate bisect: " << outcome.status().message() << "\n";
    return kExitInfrastructure;
  }
  if (outcome->culprit.empty()) {
    // Neither side of the range can take the last step: the gate found no
    // slowdown beyond the budget, nor bounded one within it.
    const bisect::Step& step = outcome->steps.back();
    const v1::Evaluation& e = step.evaluation;
    const v1::MetricComparison* m = results::FindMetric(e.verdict(), a.metric);
    std::cerr << absl::StrFormat(
        "densegate bisect: %s at %s is undecided (evaluation %s, %s%s%s); measure that "
        "commit again or bisect a narrower range\n",
        a.metric, step.commit.substr(0, 12), e.id(),
        absl::AsciiStrToLower(v1::EvaluationState_Name(e.state())),
        m == nullptr ? "" : ", " + results::SpeedupText(*m),
        e.verdict().reasons().empty() ? "" : ": " + e.verdict().reasons(0).message());
    return kExitInconclusive;
  }
  absl::StatusOr<std::string> subject =
      git.Run(a.repo, {"log", "-1", "--format=%s", outcome->culprit});
  const std::string subject_line =
      subject.ok() ? std::string(absl::StripAsciiWhitespace(*subject)) : "";
  if (a.client.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const bisect::Step& step : outcome->steps) {
      const v1::MetricComparison* m = results::FindMetric(step.evaluation.verdict(), a.metric);
      steps.push_back({{"commit", step.commit},
                       {"evaluation", step.evaluation.id()},
                       {"speedup", m->speedup()},
                       {"ci_low", m->ci_low()},
                       {"ci_high", m->ci_high()},
                       {"inputs_identical", m->inputs_identical()},
                       {"text", results::SpeedupText(*m)},
                       {"result", results::BisectResultName(step.result)}});
    }
    nlohmann::json out = {{"metric", a.metric},         {"good", range.good},
                          {"bad", range.commits.back()}, {"culprit", outcome->culprit},
                          {"subject", subject_line},     {"steps", steps}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "culprit: " << outcome->culprit.substr(0, 12) << " " << subject_line << "\n";
  }
  return kExitAccept;
}

namespace {

struct IdArgs {
  ClientArgs client;
  std::string id;
  std::string reason;
};

// One evaluation as JSON (--json) or as PrintEvaluation's text; exit 0.
int ShowOne(const ClientArgs& client, const v1::Evaluation& e) {
  if (client.json) {
    std::cout << Json(e) << "\n";
  } else {
    PrintEvaluation(e);
  }
  return 0;
}

int ShowEvaluation(const IdArgs& args) {
  auto stub = Stub(args.client);
  grpc::ClientContext ctx;
  Attach(args.client, &ctx);
  v1::GetEvaluationRequest req;
  req.set_id(args.id);
  v1::Evaluation e;
  if (grpc::Status s = stub->GetEvaluation(&ctx, req, &e); !s.ok()) return Fail("status", s);
  return ShowOne(args.client, e);
}

int CancelEvaluation(const IdArgs& args) {
  auto stub = Stub(args.client);
  grpc::ClientContext ctx;
  Attach(args.client, &ctx);
  v1::CancelEvaluationRequest req;
  req.set_id(args.id);
  req.set_reason(args.reason);
  v1::Evaluation e;
  if (grpc::Status s = stub->CancelEvaluation(&ctx, req, &e); !s.ok()) return Fail("cancel", s);
  return ShowOne(args.client, e);
}

// A person's say on a merge that awaits approval (roles maintainer, admin).
int DecideMerge(const IdArgs& args, bool approve) {
  auto stub = Stub(args.client);
  grpc::ClientContext ctx;
  Attach(args.client, &ctx);
  v1::Evaluation e;
  grpc::Status s;
  if (approve) {
    v1::ApproveMergeRequest req;
    req.set_evaluation_id(args.id);
    s = stub->ApproveMerge(&ctx, req, &e);
  } else {
    v1::DeclineMergeRequest req;
    req.set_evaluation_id(args.id);
    req.set_reason(args.reason);
    s = stub->DeclineMerge(&ctx, req, &e);
  }
  if (!s.ok()) return Fail(approve ? "approve" : "decline", s);
  return ShowOne(args.client, e);
}

struct ListArgs {
  ClientArgs client;
  std::string state, kind, repo;
};

int ListEvaluations(const ListArgs& args) {
  v1::ListEvaluationsRequest req;
  if (!args.state.empty()) {
    v1::EvaluationState st;
    if (!v1::EvaluationState_Parse(absl::AsciiStrToUpper(args.state), &st)) {
      std::cerr << "densegate list: unknown --state " << args.state << "\n";
      return kExitUsage;
    }
    req.add_states(st);
  }
  if (args.kind == "ci") req.set_kind(v1::CI);
  if (args.kind == "experiment") req.set_kind(v1::EXPERIMENT);
  req.set_repo(args.repo);
  auto stub = Stub(args.client);
  grpc::ClientContext ctx;
  Attach(args.client, &ctx);
  v1::ListEvaluationsResponse resp;
  if (grpc::Status s = stub->ListEvaluations(&ctx, req, &resp); !s.ok()) return Fail("list", s);
  if (args.client.json) {
    std::cout << Json(resp) << "\n";
  } else {
    for (const auto& e : resp.evaluations()) PrintEvaluation(e);
  }
  return 0;
}

void AddSubmitCommand(CLI::App& app, int* exit_code) {
  auto sub = std::make_shared<SubmitArgs>();
  CLI::App* cmd = app.add_subcommand("submit", "Queue a candidate with the scheduler.");
  AddClientFlags(cmd, &sub->client);
  sub->req.set_repo(".");
  cmd->add_option("--repo", *sub->req.mutable_repo(), "repository path")->capture_default_str();
  cmd->add_option("--baseline", *sub->req.mutable_baseline_ref(), "baseline ref")->required();
  cmd->add_option("--candidate", *sub->req.mutable_candidate_ref(), "candidate ref")->required();
  cmd->add_option("--branch", *sub->req.mutable_target_branch(),
                  "branch to merge into if accepted");
  cmd->add_option("--kind", sub->kind, "ci or experiment")->capture_default_str();
  cmd->add_option("--policy", sub->policy, "gain or no-regression (default: by kind)");
  cmd->add_option("--claim", sub->claims, "METRIC>=SPEEDUP, repeatable");
  cmd->add_option("--metric_scope", sub->metric_scope,
                  "measure and gate only this metric, repeatable (no --branch)");
  cmd->add_option("--hypothesis", *sub->req.mutable_hypothesis(), "what you expect and why");
  cmd->add_option("--precision-change", *sub->req.mutable_precision_change(),
                  "declare a change of numerics (e.g. \"fp8 kv cache\"): serving outputs then "
                  "need only agree within the manifest's min_token_agreement");
  cmd->add_option("--campaign", *sub->req.mutable_campaign(), "groups an agent's experiments");
  cmd->add_option(
      "--priority",
      [sub](const CLI::results_t& r) {
        int p = 0;
        bool ok = absl::SimpleAtoi(r[0], &p);
        sub->req.set_priority(p);
        return ok;
      },
      "higher runs first within a kind");
  cmd->add_flag("--wait", sub->wait, "stream progress and exit with the verdict's code");
  cmd->callback([sub, exit_code] { *exit_code = Submit(*sub); });
}

void AddBisectCommand(CLI::App& app, int* exit_code) {
  auto bisect = std::make_shared<BisectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bisect",
      "Find the commit between --good and --bad that slowed --metric, through the scheduler "
      "(each tested commit evaluated against --good; --parallel of them at a time).");
  AddClientFlags(cmd, &bisect->client);
  cmd->add_option("--repo", bisect->repo, "repository path")->capture_default_str();
  cmd->add_option("--metric", bisect->metric, "metric from the manifest")->required();
  cmd->add_option("--good", bisect->good, "a commit without the regression")->required();
  cmd->add_option("--bad", bisect->bad, "a later commit with it")->required();
  cmd->add_option("--parallel", bisect->parallel, "commits evaluated at once (free nodes)")
      ->capture_default_str();
  cmd->callback([bisect, exit_code] { *exit_code = Bisect(*bisect); });
}

void AddEvaluationCommands(CLI::App& app, int* exit_code) {
  auto status = std::make_shared<IdArgs>();
  CLI::App* cmd = app.add_subcommand("status", "Show one evaluation.");
  AddClientFlags(cmd, &status->client);
  cmd->add_option("id", status->id, "evaluation id")->required();
  cmd->callback([status, exit_code] { *exit_code = ShowEvaluation(*status); });

  auto watch = std::make_shared<IdArgs>();
  cmd = app.add_subcommand("watch", "Follow an evaluation until it ends; exits with its code.");
  AddClientFlags(cmd, &watch->client);
  cmd->add_option("id", watch->id, "evaluation id")->required();
  cmd->callback([watch, exit_code] { *exit_code = Watch(watch->client, watch->id); });

  auto cancel = std::make_shared<IdArgs>();
  cmd = app.add_subcommand("cancel", "Cancel a queued or running evaluation.");
  AddClientFlags(cmd, &cancel->client);
  cmd->add_option("id", cancel->id, "evaluation id")->required();
  cmd->add_option("--reason", cancel->reason, "recorded in the audit log");
  cmd->callback([cancel, exit_code] { *exit_code = CancelEvaluation(*cancel); });

  auto approve = std::make_shared<IdArgs>();
  cmd = app.add_subcommand(
      "approve", "Approve an accepted experiment that awaits a person before it lands.");
  AddClientFlags(cmd, &approve->client);
  cmd->add_option("id", approve->id, "evaluation id")->required();
  cmd->callback([approve, exit_code] { *exit_code = DecideMerge(*approve, true); });

  auto decline = std::make_shared<IdArgs>();
  cmd = app.add_subcommand("decline", "Decline an accepted experiment that awaits a person.");
  AddClientFlags(cmd, &decline->client);
  cmd->add_option("id", decline->id, "evaluation id")->required();
  cmd->add_option("--reason", decline->reason, "why: recorded with the entry")->required();
  cmd->callback([decline, exit_code] { *exit_code = DecideMerge(*decline, false); });

  auto list = std::make_shared<ListArgs>();
  cmd = app.add_subcommand("list", "List evaluations, newest first.");
  AddClientFlags(cmd, &list->client);
  cmd->add_option("--state", list->state, "queued, running, finished, cancelled or dead");
  cmd->add_option("--kind", list->kind, "ci or experiment");
  cmd->add_option("--repo", list->repo, "repository path");
  cmd->callback([list, exit_code] { *exit_code = ListEvaluations(*list); });
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  AddSubmitCommand(app, exit_code);
  AddBisectCommand(app, exit_code);
  AddEvaluationCommands(app, exit_code);
}

}  // namespace densegate::cli
