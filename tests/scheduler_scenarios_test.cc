// The scheduler's scenarios in one process: the scheduler server on
// loopback port 0 over each store (an SQLite file, and PostgreSQL with
// DENSEGATE_PG_URL), node workers on threads whose jobs a script answers
// (harness/node/testing/scripted_job_runner.h: samples and the gate's
// verdict, nothing built or measured), and simulated nodes that speak the
// node protocol themselves. What needs real processes (SIGKILL, TLS,
// sandboxes) is scheduler_test.cc; real evaluations are eval_test.cc.
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "harness/node/node_worker.h"
#include "harness/node/testing/scripted_job_runner.h"
#include "nlohmann/json.hpp"
#include "platform/process/launcher.h"
#include "results/gate/gate.h"
#include "scheduler/server.h"
#include "tests/scheduler_fixture.h"
#include "tests/scenario_fixture.h"

namespace densegate::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using SchedulerScenariosOnEachStore = OnEachStore<SchedulerScenarios>;

INSTANTIATE_TEST_SUITE_P(Stores, SchedulerScenariosOnEachStore,
                         ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(SchedulerScenariosOnEachStore, SubmissionsAcrossTwoNodesReachTheRightVerdicts) {
  Branch("fast", kFast);
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  Branch("broken", "echo 'not C++' >> checksum.h");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  for (int i = 1; i <= 16; ++i) {
    Branch(absl::StrCat("comment-", i), absl::StrCat("sed -i '1i // note ", i, "' checksum.h"));
  }
  // Claims one at a time (PostgreSQL; SQLite ignores it): the two nodes
  // take turns and every candidate still reaches its verdict.
  results::StoreOptions one_claim_at_a_time;
  one_claim_at_a_time.max_concurrent_claims = 1;
  StartServer(Options(), one_claim_at_a_time);
  std::map<std::string, ScriptedAnswer> answers = {{"fast", Measured(0.5)},
                                                   {"comment", Unchanged()},
                                                   {"broken", CorrectnessFails()},
                                                   {"wrong", CorrectnessFails()}};
  for (int i = 1; i <= 16; ++i) answers[absl::StrCat("comment-", i)] = Unchanged();
  // Each job takes a moment, as a measured one does, so that both nodes
  // are busy while the queue lasts.
  const Script by_candidate = ByCandidate(answers, absl::Milliseconds(50));
  // "fast" starts once a watcher follows it (below).
  absl::Notification watched;
  const std::string fast = Rev("fast");
  const Script script = [&](const harness::EvalRequest& request) {
    if (request.candidate_ref == fast) watched.WaitForNotificationWithTimeout(absl::Minutes(1));
    return by_candidate(request);
  };
  auto n1 = StartNode("n1", script);
  auto n2 = StartNode("n2", script);
  ASSERT_TRUE(WaitFor([&] { return MetricValue("densegate_nodes{state=\"active\"}") == 2; },
                      absl::Seconds(30)))
      << Metrics();
  struct Case {
    std::string ref;
    v1::CandidateKind kind;
    v1::Decision want;
  };
  std::vector<Case> cases = {{"fast", v1::EXPERIMENT, v1::ACCEPT},
                             {"comment", v1::CI, v1::ACCEPT},
                             {"broken", v1::EXPERIMENT, v1::REJECT},
                             {"wrong", v1::CI, v1::REJECT}};
  // Twenty submissions in all: sixteen more CI commits, each a comment.
  for (int i = 1; i <= 16; ++i) cases.push_back({absl::StrCat("comment-", i), v1::CI, v1::ACCEPT});
  std::vector<std::string> ids;
  for (const Case& c : cases) {
    v1::SubmitResponse r;
    ASSERT_TRUE(Submit(c.kind == v1::CI ? "ci-token-0001" : "agent-token-01", c.ref, c.kind, &r).ok());
    EXPECT_FALSE(r.deduplicated());
    ids.push_back(r.evaluation().id());
  }
  // The same candidate again attaches to its evaluation.
  v1::SubmitResponse again;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &again).ok());
  EXPECT_TRUE(again.deduplicated());
  EXPECT_EQ(again.evaluation().id(), ids[1]);
  // Watched from its start, the accepted experiment shows each progress
  // report its node sent once: none empty, none repeated.
  const std::vector<v1::Progress> progress =
      WatchProgress(ids[0], [&](const v1::EvaluationEvent& ev) {
        if (ev.state() == v1::RUNNING) watched.Notify();
      });
  EXPECT_GE(progress.size(), 3u);
  for (size_t i = 0; i < progress.size(); ++i) {
    SCOPED_TRACE(progress[i].ShortDebugString());
    EXPECT_NE(progress[i].stage(), v1::STAGE_KIND_UNSPECIFIED);
    if (i > 0) {
      EXPECT_NE(progress[i].SerializeAsString(), progress[i - 1].SerializeAsString());
    }
  }
  std::set<std::string> nodes;
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::Evaluation e = WaitDone(ids[i]);
    EXPECT_EQ(e.state(), v1::FINISHED) << cases[i].ref;
    EXPECT_EQ(e.verdict().decision(), cases[i].want) << cases[i].ref;
    EXPECT_EQ(e.verdict().evaluation_id(), ids[i]);
    EXPECT_FALSE(e.stages().empty());
    nodes.insert(e.node_id());
  }
  EXPECT_EQ(nodes.size(), 2u) << "both nodes should have taken work";
  // The accepted experiment's verdict lists the samples it was computed from.
  EXPECT_GT(WaitDone(ids[0]).verdict().provenance().sample_ids_size(), 0);
  // Prometheus sees the same.
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("densegate_verdicts_total{decision=\"accept\"} 18"));
  EXPECT_THAT(metrics, HasSubstr("densegate_verdicts_total{decision=\"reject\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("densegate_nodes{state=\"active\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("densegate_queued_evaluations{kind=\"ci\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("densegate_claim_latency_seconds_count"));
  // Verdicts with the next claim: on PostgreSQL in shared statements, each
  // carrying at least one lease; SQLite writes each alone and counts none.
  const int64_t statements = MetricValue("densegate_finish_statements_total");
  const int64_t leases = MetricValue("densegate_finish_statement_leases_total");
  if (GetParam() == "postgresql") {
    EXPECT_GE(statements, 1);
    EXPECT_GE(leases, statements);
    EXPECT_LE(leases, 20);
  } else {
    EXPECT_EQ(statements, 0);
    EXPECT_EQ(leases, 0);
  }
}

TEST_P(SchedulerScenariosOnEachStore, CiRunsBeforeExperimentsAndCancelStopsARunningJob) {
  Branch("fast", kFast);
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  StartServer();
  // Queued while no node is up: an experiment first, then CI work.
  v1::SubmitResponse experiment, ci, doomed;
  ASSERT_TRUE(Submit("agent-token-01", "fast", v1::EXPERIMENT, &experiment).ok());
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &ci).ok());
  ASSERT_TRUE(Submit("agent-token-01", "wrong", v1::EXPERIMENT, &doomed).ok());
  // /metrics shows the queue by class, priority and accelerator kind.
  const std::string queued = Metrics();
  EXPECT_THAT(queued, HasSubstr("densegate_queue_depth{class=\"ci\",priority=\"0\","
                                "accelerator_kind=\"any\"} 1"));
  EXPECT_THAT(queued, HasSubstr("densegate_queue_depth{class=\"experiment\",priority=\"0\","
                                "accelerator_kind=\"any\"} 2"));
  // The CI job runs until the test lets it end; the first experiment runs
  // until it is cancelled.
  absl::Notification ci_may_end;
  ScriptedAnswer held = Unchanged();
  held.until_cancelled = true;
  const std::map<std::string, ScriptedAnswer> answers = {
      {"comment", Unchanged()}, {"fast", held}, {"wrong", CorrectnessFails()}};
  const std::string comment = Rev("comment");
  const Script by_candidate = ByCandidate(answers);
  auto node = StartNode("only", [&](const harness::EvalRequest& request) {
    if (request.candidate_ref == comment) ci_may_end.WaitForNotificationWithTimeout(absl::Minutes(1));
    return by_candidate(request);
  });
  // One node, one job at a time: CI is leased first although submitted later.
  WaitDone(ci.evaluation().id(), v1::RUNNING);
  EXPECT_EQ(Get(experiment.evaluation().id()).state(), v1::QUEUED);
  ci_may_end.Notify();
  // Cancel the experiment that runs after the CI job: the node drops it at
  // its next stage boundary and moves on.
  WaitDone(experiment.evaluation().id(), v1::RUNNING);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::CancelEvaluationRequest req;
    req.set_id(experiment.evaluation().id());
    req.set_reason("superseded");
    v1::Evaluation e;
    ASSERT_TRUE(stub_->CancelEvaluation(&ctx, req, &e).ok());
    EXPECT_EQ(e.state(), v1::CANCELLED);
  }
  EXPECT_EQ(WaitDone(ci.evaluation().id()).verdict().decision(), v1::ACCEPT);
  v1::Evaluation last = WaitDone(doomed.evaluation().id());
  EXPECT_EQ(last.state(), v1::FINISHED);
  EXPECT_EQ(last.verdict().decision(), v1::REJECT);
  v1::Evaluation cancelled = Get(experiment.evaluation().id());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_FALSE(cancelled.has_verdict());
}

TEST_P(SchedulerScenariosOnEachStore, MergeQueueLandsOnlyWhatWasMeasuredAgainstTheTip) {
  // The benchmark's inputs are compared (its binary is built from checksum.h
  // and bench.cc only), so the comments are decided without pairs and the
  // re-measure of "fast" finds the programs it measured before.
  Sh("sed -i 's|\"timeout_s\": 60,|\"timeout_s\": 60, \"skip_when_identical\": true,|' " +
     repo_ + "/densegate.json");
  Git("commit -q -am 'compare the benchmark inputs'");
  Git("tag -f base");
  Git("branch trunk base");
  // Two comments on the same line of build.sh conflict with each other, not
  // with "fast" (checksum.h).
  Branch("comment", "echo '# no-op' >> build.sh");
  Branch("other-comment", "echo '# another no-op' >> build.sh");
  Branch("fast", kFast);
  StartServer();
  auto submit = [&](const std::string& token, const std::string& ref, v1::CandidateKind kind,
                    v1::Policy policy) {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch("trunk");
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(kind);
    req.set_policy(policy);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::SubmitResponse r;
    grpc::Status s = stub_->Submit(&ctx, req, &r);
    EXPECT_TRUE(s.ok()) << ref << ": " << s.error_message();
    return r.evaluation().id();
  };
  // Only CI and admin tokens may aim at a branch.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch("trunk");
    req.set_baseline_ref("base");
    req.set_candidate_ref("fast");
    req.set_kind(v1::EXPERIMENT);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::SubmitResponse r;
    EXPECT_EQ(stub_->Submit(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // One node, so the order is CI (FIFO), then the experiment: "comment"
  // lands as measured; "other-comment" was measured against base too, but
  // the tip moved and it conflicts; "fast" is re-measured against the new
  // tip and lands as a merge commit.
  const std::string comment = submit("ci-token-0001", "comment", v1::CI, v1::NO_REGRESSION);
  const std::string other = submit("ci-token-0001", "other-comment", v1::CI, v1::NO_REGRESSION);
  const std::string fast = submit("ci-token-0001", "fast", v1::EXPERIMENT, v1::GAIN);
  // The re-measure's candidate is "fast" merged onto the moved tip: it
  // gains as "fast" did.
  const Script by_candidate = ByCandidate(
      {{"comment", Unchanged()}, {"other-comment", Unchanged()}, {"fast", Measured(0.5)}});
  auto node = StartNode("n1", [&](const harness::EvalRequest& request) {
    return request.prior.evaluation_id().empty() ? by_candidate(request) : Measured(0.5);
  });
  auto merge_ended = [&](const std::string& id) {
    v1::Evaluation e;
    if (!WaitFor(
            [&] {
              e = Get(id);
              return e.merge().state() == v1::MERGED || e.merge().state() == v1::MERGE_FAILED;
            },
            absl::Minutes(2), absl::Milliseconds(100))) {
      ADD_FAILURE() << "the merge of " << id << " did not end";
    }
    return e;
  };
  auto note = [&](const std::string& sha) {
    std::string out = dir_ + "/note";
    Sh("git -C " + repo_ + " notes --ref=densegate show " + sha + " > " + out);
    std::stringstream text;
    text << std::ifstream(out).rdbuf();
    return text.str();
  };

  v1::Evaluation c = merge_ended(comment);
  ASSERT_EQ(c.merge().state(), v1::MERGED) << c.merge().message();
  EXPECT_EQ(c.merge().merged_sha(), Rev("comment"));  // A fast-forward.
  EXPECT_THAT(note(c.merge().merged_sha()), HasSubstr("evaluation " + comment));

  v1::Evaluation o = merge_ended(other);
  EXPECT_EQ(o.verdict().decision(), v1::ACCEPT);
  ASSERT_EQ(o.merge().state(), v1::MERGE_FAILED);
  EXPECT_THAT(o.merge().message(), HasSubstr("conflicts with trunk"));
  EXPECT_THAT(o.merge().message(), HasSubstr("build.sh"));

  v1::Evaluation f = merge_ended(fast);
  ASSERT_EQ(f.merge().state(), v1::MERGED) << f.merge().message();
  ASSERT_FALSE(f.merge().remeasure_evaluation_id().empty());
  v1::Evaluation re = Get(f.merge().remeasure_evaluation_id());
  EXPECT_EQ(re.verdict().decision(), v1::ACCEPT);
  EXPECT_EQ(re.candidate().baseline_sha(), Rev("comment"));
  EXPECT_EQ(re.candidate().remeasure_of(), fast);
  // The node is told which evaluation it re-measures (the harness takes
  // that one's pairs where the inputs match: eval_test).
  bool told = false;
  for (const harness::EvalRequest& request : node->runner().requests()) {
    told |= request.prior.evaluation_id() == fast && request.baseline_ref == Rev("comment");
  }
  EXPECT_TRUE(told);
  EXPECT_EQ(f.merge().merged_sha(), Rev("trunk"));
  EXPECT_EQ(Rev("trunk^1"), Rev("comment"));
  EXPECT_EQ(Rev("trunk^2"), Rev("fast"));
  const std::string fast_note = note(Rev("trunk"));
  EXPECT_THAT(fast_note, HasSubstr("densegate: accept (policy gain)"));
  EXPECT_THAT(fast_note, HasSubstr("re-measure of " + fast));
  EXPECT_THAT(fast_note, HasSubstr("checksum.time: "));

  // The report over HTTP (viewer token) and gRPC shows what landed.
  EXPECT_THAT(Http("/report?branch=trunk"), HasSubstr("401 Unauthorized"));
  const std::string page = Http("/report?branch=trunk", "Bearer viewer-token-1");
  EXPECT_THAT(page, HasSubstr("200 OK"));
  EXPECT_THAT(page, HasSubstr("text/html"));
  EXPECT_THAT(page, HasSubstr("<svg class=\"chart\""));
  EXPECT_THAT(page, HasSubstr("checksum.time"));
  EXPECT_THAT(Http("/report?branch=trunk&format=md&token=viewer-token-1"),
              HasSubstr("## Headline"));
  EXPECT_THAT(Http("/report?format=pdf&token=viewer-token-1"), HasSubstr("400 Bad Request"));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer viewer-token-1");
  v1::GetReportRequest req;
  req.set_branch("trunk");
  req.set_format(v1::JSON);
  v1::Report report;
  ASSERT_TRUE(stub_->GetReport(&ctx, req, &report).ok());
  EXPECT_EQ(report.content_type(), "application/json");
  EXPECT_THAT(report.content(), HasSubstr("\"headline\""));
}

TEST_P(SchedulerScenariosOnEachStore, EveryEvaluationLeavesAFeedbackBundleThatClientsRead) {
  Branch("fast", kFast);
  Branch("chatty", "sed -i '1i // chatty' checksum.h");
  Branch("broken", "echo 'not C++' >> checksum.h");
  scheduler::ServerOptions options = Options();
  options.scheduler.feedback.max_bytes = 64 << 10;
  StartServer(options);
  ScriptedAnswer chatty = Measured(1.0);
  chatty.log_bytes = 200 << 10;  // Over the cap: the node leaves it out.
  auto n1 = StartNode("n1", ByCandidate({{"fast", Measured(0.5)},
                                         {"chatty", chatty},
                                         {"broken", CorrectnessFails()}}));
  std::map<std::string, std::string> ids;
  for (const char* ref : {"fast", "chatty", "broken"}) {
    v1::SubmitResponse r;
    ASSERT_TRUE(Submit("agent-token-01", ref, v1::EXPERIMENT, &r).ok());
    ids[ref] = r.evaluation().id();
  }
  for (const auto& [ref, id] : ids) ASSERT_EQ(WaitDone(id).state(), v1::FINISHED) << ref;

  auto get = [&](const std::string& id, bool summary_only, grpc::Status* status) {
    Feedback out;
    *status = GetFeedback(id, summary_only, &out);
    return out;
  };
  grpc::Status st;
  Feedback fast = get(ids["fast"], false, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const nlohmann::json summary = nlohmann::json::parse(fast.info.summary_json());
  EXPECT_EQ(summary["schema_version"], 1);
  EXPECT_EQ(summary["evaluation_id"], ids["fast"]);
  EXPECT_EQ(summary["decision"], "accept");
  ASSERT_FALSE(summary["moved"].empty());
  EXPECT_EQ(summary["moved"][0]["metric"], "checksum.time");
  EXPECT_EQ(summary["stages"].size(), 4);
  for (const char* file : {"feedback.json", "verdict.json", "samples.json", "stages.json",
                           "logs/bench-scripted.out"}) {
    EXPECT_EQ(fast.files.count(file), 1) << file;
  }
  EXPECT_EQ(fast.files["feedback.json"], fast.info.summary_json());
  EXPECT_EQ(fast.info.files(), static_cast<int>(fast.files.size()));
  EXPECT_TRUE(fast.info.omitted().empty());
  EXPECT_TRUE(fast.info.has_recorded_at());

  // Over the cap: the node left the large log out, and says so.
  Feedback big = get(ids["chatty"], false, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_THAT(big.info.omitted(), ElementsAre("logs/bench-scripted.out"));
  EXPECT_EQ(big.files.count("logs/bench-scripted.out"), 0);
  EXPECT_LE(big.info.bytes(), 64 << 10);

  // A failed stage says so in the summary; summary_only sends no files.
  Feedback broken = get(ids["broken"], true, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(broken.files.empty());
  const nlohmann::json rejected = nlohmann::json::parse(broken.info.summary_json());
  EXPECT_EQ(rejected["decision"], "reject");
  EXPECT_EQ(rejected["stages"][2]["name"], "correctness");
  EXPECT_EQ(rejected["stages"][2]["status"], "failed");
  ASSERT_EQ(rejected["stages"][2]["first_errors"].size(), 1);
  EXPECT_EQ(rejected["stages"][2]["first_errors"][0]["text"],
            "[  FAILED  ] Scripted.Check (check: exit code 1)");

  get("ev-unknown", true, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);

  // The CLI writes the bundle out.
  const std::string out = dir_ + "/fb";
  const int rc = std::system(absl::StrCat(Runfile("cli/densegate"), " feedback ", ids["fast"],
                                          " --server ", address_, " --token viewer-token-1 --out ",
                                          out, " > ", dir_, "/fb.out 2> ", dir_, "/fb.err")
                                 .c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << ReadFile(dir_ + "/fb.err");
  EXPECT_EQ(ReadFile(out + "/feedback.json"), fast.info.summary_json());
  EXPECT_EQ(ReadFile(out + "/logs/bench-scripted.out"), fast.files["logs/bench-scripted.out"]);

  // Over HTTP, for the report's links: the summary, one file, the tokens.
  const std::string page =
      Http(absl::StrCat("/feedback?evaluation=", ids["fast"], "&token=viewer-token-1"));
  EXPECT_THAT(page, HasSubstr("200 OK"));
  EXPECT_THAT(page, HasSubstr("application/json"));
  EXPECT_THAT(page, HasSubstr("nosniff"));
  EXPECT_THAT(page, HasSubstr("\"schema_version\": 1"));
  EXPECT_THAT(Http(absl::StrCat("/feedback?evaluation=", ids["fast"],
                                "&file=logs/bench-scripted.out&token=viewer-token-1")),
              HasSubstr("text/plain"));
  EXPECT_THAT(Http(absl::StrCat("/feedback?evaluation=", ids["fast"])), HasSubstr("401"));
  EXPECT_THAT(Http("/feedback?evaluation=ev-unknown&token=viewer-token-1"), HasSubstr("404"));
  const std::string html = Http("/report?token=viewer-token-1");
  EXPECT_THAT(html, HasSubstr(absl::StrCat("href=\"feedback?token=viewer-token-1&amp;evaluation=",
                                           ids["fast"], "\"")));

  // Uploads: only as the node itself, under a live lease, within the cap,
  // paths inside the bundle. A simulated node's calibration lease is live
  // but holds no evaluation.
  auto nodes = NodeStub();
  const std::string sim = RegisterSimulatedNode(*nodes, "simulated");
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, sim);
  ASSERT_TRUE(calibration.has_lease());
  auto upload = [&](const std::string& token, const std::string& node,
                    std::vector<v1::FeedbackFile> files,
                    const std::string& lease_id = "lease-of-nobody") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::UploadFeedbackResponse resp;
    auto writer = nodes->UploadFeedback(&ctx, &resp);
    v1::UploadFeedbackRequest req;
    req.set_node_id(node);
    req.set_lease_id(lease_id);
    for (v1::FeedbackFile& f : files) {
      *req.mutable_file() = f;
      if (!writer->Write(req)) break;
    }
    writer->WritesDone();
    return writer->Finish().error_code();
  };
  v1::FeedbackFile small;
  small.set_path("feedback.json");
  small.set_content("{}");
  v1::FeedbackFile escaping = small;
  escaping.set_path("../../etc/cron.d/x");
  v1::FeedbackFile large = small;
  large.set_path("logs/huge");
  large.set_content(std::string(60 << 10, 'x'));
  const std::string n1_id = Get(ids["fast"]).node_id();
  EXPECT_EQ(upload(NodeToken("n2"), n1_id, {small}), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(upload("agent-token-01", n1_id, {small}), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(upload(NodeToken("n1"), n1_id, {small}), grpc::StatusCode::NOT_FOUND);
  const std::string live = calibration.lease().id();
  EXPECT_EQ(upload("admin-token-01", sim, {escaping}, live), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(upload("admin-token-01", sim, {large, small, large}, live),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(upload("admin-token-01", sim, {small}, live), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_P(SchedulerScenariosOnEachStore, ActiveNodesCalibrateAgainPeriodically) {
  Branch("comment", "echo '# no-op' >> build.sh");
  scheduler::ServerOptions options = Options();
  options.scheduler.calibration_period = absl::Seconds(1);
  StartServer(options);
  // The evaluation takes longer than the period.
  auto node = StartNode("n1", ByCandidate({{"comment", Unchanged()}}, absl::Milliseconds(1500)));
  v1::SubmitResponse r;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &r).ok());
  // Calibration on join, then the evaluation (longer than the period).
  EXPECT_EQ(WaitDone(r.evaluation().id()).state(), v1::FINISHED);
  // The node's next request finds its calibration a period old: it
  // calibrates again before any further gate work.
  int64_t n = 0;
  WaitFor(
      [&] {
        n = MetricValue("densegate_calibrations_total");
        return n >= 2;
      },
      absl::Minutes(1), absl::Milliseconds(100));
  EXPECT_GE(n, 2) << Metrics();
}

TEST_P(SchedulerScenariosOnEachStore, BisectFindsTheCommitThatSlowedTheMetric) {
  // base -> comment -> slow (128-bit modulo: same result, slower) ->
  // comment -> comment.
  Git("checkout -q -b line base");
  auto commit = [&](const std::string& shell, const std::string& message) {
    Sh("cd " + repo_ + " && " + shell);
    Git("commit -q -am '" + message + "'");
    std::string out = dir_ + "/sha";
    Sh("git -C " + repo_ + " rev-parse HEAD > " + out);
    std::string sha;
    std::ifstream(out) >> sha;
    return sha;
  };
  const std::string one = commit("echo '# one' >> build.sh", "note one");
  const std::string slow = commit(
      "sed -i 's|sum = (sum + x) % 1000000007ULL;|sum = static_cast<uint64_t>((static_cast<unsigned "
      "__int128>(sum) + x) % 1000000007ULL);|' checksum.h",
      "reduce in 128 bits");
  const std::string two = commit("echo '# two' >> build.sh", "note two");
  const std::string three = commit("echo '# three' >> build.sh", "note three");
  Git("checkout -q --detach base");
  StartServer();
  // From the slow commit on, the metric takes 1.5 times as long.
  const Script script = ByCandidate(
      {{one, Measured(1.0)}, {slow, Measured(1.5)}, {two, Measured(1.5)}, {three, Measured(1.5)}});
  auto n1 = StartNode("n1", script);
  auto n2 = StartNode("n2", script);
  const std::string out = dir_ + "/bisect.json";
  const int rc = std::system(absl::StrCat(Runfile("cli/densegate"), " bisect --server ", address_,
                                          " --token ci-token-0001 --repo ", repo_,
                                          " --metric checksum.time --good base --bad line "
                                          "--parallel 2 --json > ",
                                          out, " 2> ", dir_, "/bisect.err")
                                 .c_str());
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  std::stringstream err;
  err << std::ifstream(dir_ + "/bisect.err").rdbuf();
  ASSERT_EQ(WEXITSTATUS(rc), 0) << text.str() << err.str();
  EXPECT_THAT(text.str(), HasSubstr("\"culprit\": \"" + slow + "\""));
  EXPECT_THAT(text.str(), HasSubstr("reduce in 128 bits"));
  // Each step is an evaluation scoped to the metric, classified by the gate.
  const nlohmann::json result = nlohmann::json::parse(text.str());
  ASSERT_FALSE(result["steps"].empty());
  for (const nlohmann::json& step : result["steps"]) {
    const std::string& commit = step["commit"].get<std::string>();
    EXPECT_EQ(step["result"], commit == slow ? "regressed" : "clean") << step.dump();
    EXPECT_THAT(Get(step["evaluation"]).candidate().metric_scope(), ElementsAre("checksum.time"));
  }
  // The report puts the bisection back together and names the same commit.
  EXPECT_THAT(Http("/report?format=md&token=viewer-token-1"),
              HasSubstr("culprit " + slow.substr(0, 12)));
}

// A repository stricter than the scheduler (the manifest's
// max_calibration_noise 0.03; the server's flag here is 1): a node
// calibrated at 4.09% gets none of its gate work, which goes to the calm
// node; while that work waits, the noisy node is sent to calibrate again.
TEST_P(SchedulerScenariosOnEachStore, ARepositorysNoiseLimitSendsItsWorkToTheCalmNode) {
  Sh("cd " + repo_ + " && sed -i 's/\"max_pairs\": 30}/\"max_pairs\": 30, " +
     "\"max_calibration_noise\": 0.03}/' densegate.json && grep -q max_calibration_noise " +
     "densegate.json");
  Git("commit -q -am 'a stricter noise limit'");
  Git("tag -f base");
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  auto calibrated = [&](const std::string& name, double noise) {
    const std::string id = RegisterSimulatedNode(*nodes, name);
    const v1::SynchronizeResponse c = Synchronize(*nodes, id);
    EXPECT_EQ(c.lease().job_kind(), v1::CALIBRATION) << name;
    v1::FinishLeaseResponse done;
    EXPECT_TRUE(FinishCalibration(*nodes, id, c.lease(), noise, false, &done).ok()) << name;
    return id;
  };
  const std::string noisy = calibrated("noisy", 0.0409);
  const std::string calm = calibrated("calm", 0.0016);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());

  const v1::SynchronizeResponse noisy_sync = Synchronize(*nodes, noisy);
  EXPECT_EQ(noisy_sync.lease().job_kind(), v1::CALIBRATION);
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::QUEUED);
  const v1::SynchronizeResponse calm_sync = Synchronize(*nodes, calm);
  EXPECT_EQ(calm_sync.lease().job_kind(), v1::EVALUATION);
  EXPECT_EQ(calm_sync.lease().evaluation().id(), queued.evaluation().id());
  // The lease tells the node its noise, which sizes its end-to-end runs.
  EXPECT_EQ(calm_sync.lease().node_calibration_noise(), 0.0016);
}

// FinishLease with claim_next hands the node its next job in the reply,
// after calibration noise and after a verdict (the store's
// FinishLeaseAndClaimNext); a refused finish claims nothing, and with
// nothing queued the reply is empty.
TEST_P(SchedulerScenariosOnEachStore, AFinishCanClaimTheNodesNextJobWhoseProgressReachesWatchers) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  Branch("other", "echo '// other' >> bench.cc");
  StartServer();
  auto nodes = NodeStub();
  const std::string holder = RegisterSimulatedNode(*nodes, "holder");
  const std::string intruder = RegisterSimulatedNode(*nodes, "intruder");
  ASSERT_FALSE(holder.empty());
  ASSERT_FALSE(intruder.empty());
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, holder);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());

  v1::FinishLeaseRequest finish;
  finish.set_node_id(intruder);
  finish.set_lease_id(calibration.lease().id());
  finish.set_calibration_noise(0.01);
  finish.set_claim_next(true);
  v1::FinishLeaseResponse refused;
  EXPECT_EQ(AsNode([&](grpc::ClientContext* c) {
              return nodes->FinishLease(c, finish, &refused);
            }).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(refused.has_next_lease());
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::QUEUED);

  finish.set_node_id(holder);
  v1::FinishLeaseResponse calibrated;
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &calibrated);
              }).ok());
  ASSERT_TRUE(calibrated.has_next_lease());
  const v1::Lease& next = calibrated.next_lease();
  EXPECT_EQ(next.job_kind(), v1::EVALUATION);
  EXPECT_EQ(next.evaluation().id(), queued.evaluation().id());
  EXPECT_GT(next.heartbeat_interval_s(), 0);
  const v1::Evaluation running = Get(queued.evaluation().id());
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_EQ(running.node_id(), holder);

  // Each progress report reaches a watcher once and in order, also several
  // sent between two of its wake-ups.
  {
    grpc::ClientContext watching;
    watching.AddMetadata("authorization", "Bearer viewer-token-1");
    watching.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WatchEvaluationRequest watch;
    watch.set_id(next.evaluation().id());
    auto reader = stub_->WatchEvaluation(&watching, watch);
    // Sends the messages as progress reports on one report stream.
    auto report = [&](const std::vector<std::string>& messages) {
      std::vector<v1::NodeReport> reports(messages.size());
      for (size_t i = 0; i < messages.size(); ++i) {
        reports[i].mutable_progress()->set_message(messages[i]);
      }
      return SendReports(*nodes, holder, next.id(), std::move(reports));
    };
    auto relayed = [&]() -> std::string {
      v1::EvaluationEvent ev;
      while (reader->Read(&ev)) {
        if (ev.event_case() == v1::EvaluationEvent::kProgress) return ev.progress().message();
      }
      return "(the stream ended)";
    };
    ASSERT_TRUE(report({"building"}));
    EXPECT_EQ(relayed(), "building");
    // The scheduler records these five microseconds apart, faster than a
    // watcher wakes.
    ASSERT_TRUE(report({"pair 1", "pair 2", "pair 3", "pair 4", "pair 5"}));
    for (int i = 1; i <= 5; ++i) EXPECT_EQ(relayed(), absl::StrCat("pair ", i));
    watching.TryCancel();
    reader->Finish();
  }

  v1::SubmitResponse later;
  ASSERT_TRUE(Submit("ci-token-0001", "other", v1::CI, &later).ok());
  v1::FinishLeaseResponse rejected;
  ASSERT_TRUE(FinishWithVerdict(*nodes, holder, next, v1::REJECT, &rejected).ok());
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::FINISHED);
  ASSERT_TRUE(rejected.has_next_lease());
  const v1::Lease& after_verdict = rejected.next_lease();
  EXPECT_EQ(after_verdict.job_kind(), v1::EVALUATION);
  EXPECT_EQ(after_verdict.evaluation().id(), later.evaluation().id());
  EXPECT_GT(after_verdict.heartbeat_interval_s(), 0);
  EXPECT_EQ(Get(later.evaluation().id()).state(), v1::RUNNING);

  v1::FinishLeaseResponse idle;
  ASSERT_TRUE(FinishWithVerdict(*nodes, holder, after_verdict, v1::REJECT, &idle).ok());
  EXPECT_FALSE(idle.has_next_lease());  // The intruder's calibration is pinned to it.
  EXPECT_EQ(Get(later.evaluation().id()).state(), v1::FINISHED);
}

// An accepted candidate's verdict moves the merge queue at once: when it
// lands on a tip that moved, its re-measure is queued before the node that
// accepted it claims again, so that node takes the re-measure, not the next
// queued job (the periodic advance came too late for a claim in the reply).
TEST_P(SchedulerScenariosOnEachStore, AnAcceptOnAMovedTipQueuesItsReMeasureBeforeTheNodeClaimsAgain) {
  Git("branch trunk base");
  Branch("first", "echo '# first' >> build.sh");
  Branch("second", "echo '// second' >> checksum.h");
  Branch("other", "echo '// other' >> bench.cc");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "simulated");
  ASSERT_FALSE(node.empty());
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::FinishLeaseResponse ignored;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, false, &ignored).ok());

  auto submit = [&](const std::string& ref, const std::string& target) {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch(target);
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(v1::EXPERIMENT);
    req.set_policy(v1::NO_REGRESSION);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse r;
    EXPECT_TRUE(stub_->Submit(&ctx, req, &r).ok()) << ref;
    return r.evaluation().id();
  };
  const std::string first = submit("first", "trunk");
  const std::string second = submit("second", "trunk");
  const std::string other = submit("other", "");
  // Accepts the lease's evaluation and returns the lease the reply carries.
  auto accept = [&](const v1::Lease& lease) {
    v1::FinishLeaseResponse reply;
    EXPECT_TRUE(FinishWithVerdict(*nodes, node, lease, v1::ACCEPT, &reply).ok());
    return reply.next_lease();
  };
  const v1::SynchronizeResponse work = Synchronize(*nodes, node);
  ASSERT_EQ(work.lease().evaluation().id(), first);
  // "first" was measured against the tip: it lands before the reply.
  const v1::Lease after_first = accept(work.lease());
  EXPECT_EQ(Get(first).merge().state(), v1::MERGED);
  ASSERT_EQ(after_first.evaluation().id(), second);
  // "second" was measured against base, and trunk has moved on to "first".
  const v1::Lease after_second = accept(after_first);
  const v1::Evaluation queued = Get(second);
  EXPECT_EQ(queued.merge().state(), v1::REMEASURING);
  ASSERT_FALSE(queued.merge().remeasure_evaluation_id().empty());
  EXPECT_EQ(after_second.evaluation().id(), queued.merge().remeasure_evaluation_id());
  EXPECT_EQ(after_second.evaluation().candidate().remeasure_of(), second);
  EXPECT_NE(after_second.evaluation().id(), other);
}

TEST_P(SchedulerScenariosOnEachStore, RolesAndBadRequestsGetPreciseStatuses) {
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  StartServer();
  v1::SubmitResponse r;
  // An agent submits experiments only, and never overrides protected paths.
  grpc::Status s = Submit("agent-token-01", "comment", v1::CI, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::EXPERIMENT);
    req.set_protected_path_override(true);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    EXPECT_EQ(stub_->Submit(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  ASSERT_TRUE(Submit("agent-token-01", "comment", v1::EXPERIMENT, &r).ok());
  // Another agent cannot cancel it; a viewer cannot submit; no token at all
  // is unauthenticated.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-02");
    v1::CancelEvaluationRequest req;
    req.set_id(r.evaluation().id());
    v1::Evaluation e;
    EXPECT_EQ(stub_->CancelEvaluation(&ctx, req, &e).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Submit("viewer-token-1", "comment", v1::EXPERIMENT, &r).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Submit("nope-nope-nope", "comment", v1::EXPERIMENT, &r).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Bad input: a repo that does not exist, a ref that does not resolve, a
  // missing field, an unknown id.
  EXPECT_EQ(Submit("ci-token-0001", "comment", v1::CI, &r, dir_ + "/nowhere").error_code(),
            grpc::StatusCode::NOT_FOUND);
  s = Submit("ci-token-0001", "no-such-branch", v1::CI, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no-such-branch"));
  EXPECT_EQ(Submit("ci-token-0001", "", v1::CI, &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::GetEvaluationRequest req;
    req.set_id("ev-unknown");
    v1::Evaluation e;
    EXPECT_EQ(stub_->GetEvaluation(&ctx, req, &e).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // An oversized request: a hypothesis over 16 KiB is refused by the
  // scheduler, a message over 16 MiB by gRPC itself.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::CI);
    req.set_hypothesis(std::string(20000, 'h'));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse big;
    EXPECT_EQ(stub_->Submit(&ctx, req, &big).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    req.set_hypothesis(std::string(17 << 20, 'h'));
    grpc::ClientContext huge_ctx;
    huge_ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    EXPECT_EQ(stub_->Submit(&huge_ctx, req, &big).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // A metric scope: only metrics the baseline's manifest measures, never
  // with a target branch (a scoped evaluation cannot land), claims inside
  // it; a valid one is its own candidate, not a duplicate of the unscoped.
  {
    auto scoped = [&](const std::string& metric, const std::string& branch,
                      const std::string& claim, v1::SubmitResponse* out) {
      v1::SubmitRequest req;
      req.set_repo(repo_);
      req.set_baseline_ref("base");
      req.set_candidate_ref("comment");
      req.set_kind(v1::CI);
      req.add_metric_scope(metric);
      req.set_target_branch(branch);
      if (!claim.empty()) {
        v1::Claim* c = req.add_claims();
        c->set_metric(claim);
        c->set_min_speedup(1.1);
      }
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", "Bearer ci-token-0001");
      return stub_->Submit(&ctx, req, out);
    };
    v1::SubmitResponse unused;
    s = scoped("checksum.nope", "", "", &unused);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("it measures checksum.time"));
    EXPECT_EQ(scoped("checksum.time", "main", "", &unused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(scoped("checksum.time", "", "other.metric", &unused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    v1::SubmitResponse plain, scope;
    ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &plain).ok());
    ASSERT_TRUE(scoped("checksum.time", "", "", &scope).ok());
    EXPECT_FALSE(scope.deduplicated());
    EXPECT_NE(scope.evaluation().id(), plain.evaluation().id());
    EXPECT_THAT(scope.evaluation().candidate().metric_scope(), ElementsAre("checksum.time"));
  }
  // A declared precision change is part of the candidate: the same commits
  // without it are another evaluation, and the node gets the declaration.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::CI);
    req.set_precision_change("fp8 kv cache");
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse declared, plain;
    ASSERT_TRUE(stub_->Submit(&ctx, req, &declared).ok());
    ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &plain).ok());
    EXPECT_NE(declared.evaluation().id(), plain.evaluation().id());
    EXPECT_EQ(declared.evaluation().candidate().precision_change(), "fp8 kv cache");
  }
  // A node finishing a lease another node holds: FAILED_PRECONDITION, and
  // the holder's lease is untouched.
  {
    auto nodes = NodeStub();
    const std::string ids[2] = {RegisterSimulatedNode(*nodes, "holder"),
                                RegisterSimulatedNode(*nodes, "intruder")};
    ASSERT_FALSE(ids[0].empty());
    ASSERT_FALSE(ids[1].empty());
    // The holder's calibration job.
    const v1::SynchronizeResponse lease = Synchronize(*nodes, ids[0]);
    ASSERT_TRUE(lease.has_lease());
    v1::FinishLeaseRequest finish;
    finish.set_node_id(ids[1]);
    finish.set_lease_id(lease.lease().id());
    finish.set_calibration_noise(0.01);
    v1::FinishLeaseResponse ignored;
    grpc::Status st =
        AsNode([&](grpc::ClientContext* c) { return nodes->FinishLease(c, finish, &ignored); });
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    finish.set_lease_id("lease-that-never-was");
    EXPECT_NE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &ignored);
              }).error_code(),
              grpc::StatusCode::OK);
    finish.set_node_id(ids[0]);
    finish.set_lease_id(lease.lease().id());
    EXPECT_TRUE(AsNode([&](grpc::ClientContext* c) {
                  return nodes->FinishLease(c, finish, &ignored);
                }).ok());
  }
  // The submitter may cancel its own queued evaluation (no node is running).
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::CancelEvaluationRequest req;
    req.set_id(r.evaluation().id());
    v1::Evaluation e;
    ASSERT_TRUE(stub_->CancelEvaluation(&ctx, req, &e).ok());
    EXPECT_EQ(e.state(), v1::CANCELLED);
  }
}

// A benchmark-only shortcut through the scheduler: the candidate's benchmark
// binary times the checksum 2x faster while the trusted runner's timing of
// the same op does not move. A node whose gate ignores the manifest's
// confirmed_by link reports ACCEPT; the scheduler decides with the link:
// REJECT, BENCHMARK_ONLY_GAIN, and the node is quarantined.
TEST_F(SchedulerScenarios, ANodeThatDropsAConfirmerIsDecidedByTheManifest) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["kernel_checks"] = nlohmann::json::array(
      {nlohmann::json::parse(std::ifstream(repo_ + "/timed_check.json"))});
  manifest["benchmarks"][0]["metrics"][0]["confirmed_by"] = "checksum.runner";
  std::ofstream(repo_ + "/densegate.json") << manifest.dump(2);
  Commit("the benchmark metric is confirmed by the runner metric");
  Git("tag -f base");
  Branch("shortcut", "echo '// only the benchmark is faster' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "lax");
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitRequest req;
  req.set_repo(repo_);
  req.set_baseline_ref("base");
  req.set_candidate_ref("shortcut");
  req.set_kind(v1::EXPERIMENT);
  req.set_policy(v1::GAIN);
  v1::SubmitResponse queued;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    ASSERT_TRUE(stub_->Submit(&ctx, req, &queued).ok());
  }
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, true, &next).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease lease = next.next_lease();
  ASSERT_EQ(lease.evaluation().id(), queued.evaluation().id());

  // 30 pairs (the manifest's budget), within half a percent of: benchmark
  // 100 ns baseline, 50 candidate; runner 1000 ns in both arms.
  std::vector<v1::Sample> samples;
  for (int pair = 0; pair < 30; ++pair) {
    const double wobble = 1 + 0.005 * ((pair * 7) % 5 - 2) / 2.0;
    for (auto [metric, base, cand] : {std::tuple{"checksum.time", 100.0, 50.0},
                                      std::tuple{"checksum.runner", 1000.0, 1000.0}}) {
      for (v1::Arm arm : {v1::BASELINE, v1::CANDIDATE}) {
        v1::Sample& s = samples.emplace_back();
        s.set_evaluation_id(lease.evaluation().id());
        s.set_metric(metric);
        s.set_arm(arm);
        s.set_pair_index(pair);
        s.set_unit("ns");
        s.set_value((arm == v1::BASELINE ? base : cand) *
                    (arm == v1::BASELINE ? wobble : 2 - wobble));
      }
    }
  }
  std::vector<v1::NodeReport> reports(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) *reports[i].mutable_sample() = samples[i];
  ASSERT_TRUE(SendReports(*nodes, node, lease.id(), std::move(reports)));
  // The lax node's gate: both metrics, the link left out.
  std::vector<results::MetricSamples> described(2);
  for (int i = 0; i < 2; ++i) {
    described[i].name = i == 0 ? "checksum.time" : "checksum.runner";
    described[i].unit = "ns";
    described[i].direction = v1::LOWER_IS_BETTER;
    described[i].primary = true;
    described[i].stage = v1::MICROBENCHMARK;
  }
  v1::GatePolicy gate;
  gate.set_min_effect(0.02);
  gate.set_regression_budget(0.10);
  gate.set_min_pairs(6);
  gate.set_max_pairs(30);
  v1::FinishLeaseRequest finish;
  finish.set_node_id(node);
  finish.set_lease_id(lease.id());
  *finish.mutable_verdict() = results::testing::VerdictFromSamples(
      lease.evaluation().id(), v1::GAIN, gate, described, samples);
  ASSERT_EQ(finish.verdict().decision(), v1::ACCEPT);
  v1::FinishLeaseResponse ignored;
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &ignored);
              }).ok());
  const v1::Evaluation done = Get(queued.evaluation().id());
  EXPECT_EQ(done.verdict().decision(), v1::REJECT);
  bool named = false;
  for (const v1::Reason& r : done.verdict().reasons()) named |= r.code() == v1::BENCHMARK_ONLY_GAIN;
  EXPECT_TRUE(named) << done.verdict().DebugString();
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer viewer-token-1");
  v1::ListNodesRequest list;
  v1::ListNodesResponse listed;
  ASSERT_TRUE(stub_->ListNodes(&ctx, list, &listed).ok());
  for (const v1::Node& n : listed.nodes()) {
    if (n.id() == node) {
      EXPECT_EQ(n.state(), v1::DISTRUSTED);
    }
  }
}

// Noise leaves an evaluation inconclusive: its second part is queued once,
// with the error budget the first part kept, for a calm node of the same
// kind, carrying the first part's samples; it looks at 36 to 60 pooled
// pairs, and its verdict is the one that counts (continued_by). Its own
// inconclusive verdict would not be continued again.
TEST_F(SchedulerScenarios, AnEvaluationNoiseLeftInconclusiveIsContinuedOnceOnACalmNode) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "calm");
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());
  EXPECT_EQ(queued.evaluation().candidate().error_share(), 0.9);
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, true, &next).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease first = next.next_lease();

  // Per pair, a candidate/baseline ratio; the verdict the node reports
  // from pairs [0, pairs.size()) under `gate`.
  v1::GatePolicy gate;  // The fixture's.
  gate.set_min_effect(0.02);
  gate.set_regression_budget(0.10);
  gate.set_min_pairs(6);
  gate.set_max_pairs(30);
  auto run = [&](const v1::Lease& lease, const std::vector<double>& log_ratios, double share,
                 bool second_part) {
    std::vector<v1::Sample> samples;
    for (size_t pair = 0; pair < log_ratios.size(); ++pair) {
      for (v1::Arm arm : {v1::BASELINE, v1::CANDIDATE}) {
        v1::Sample& smp = samples.emplace_back();
        smp.set_evaluation_id(lease.evaluation().id());
        smp.set_metric("checksum.time");
        smp.set_arm(arm);
        smp.set_pair_index(pair);
        smp.set_unit("ns");
        smp.set_value(arm == v1::BASELINE ? 100 : 100 * std::exp(log_ratios[pair]));
      }
    }
    std::vector<v1::NodeReport> reports(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) *reports[i].mutable_sample() = samples[i];
    EXPECT_TRUE(SendReports(*nodes, node, lease.id(), std::move(reports)));
    std::vector<results::MetricSamples> described(1);
    described[0].name = "checksum.time";
    described[0].unit = "ns";
    described[0].direction = v1::LOWER_IS_BETTER;
    described[0].primary = true;
    described[0].stage = v1::MICROBENCHMARK;
    v1::FinishLeaseRequest finish;
    finish.set_node_id(node);
    finish.set_lease_id(lease.id());
    *finish.mutable_verdict() = results::testing::VerdictFromSamples(
        lease.evaluation().id(), v1::NO_REGRESSION, gate, described, samples, share, second_part);
    v1::FinishLeaseResponse ignored;
    EXPECT_TRUE(AsNode([&](grpc::ClientContext* c) {
                  return nodes->FinishLease(c, finish, &ignored);
                }).ok());
    return finish.verdict().decision();
  };
  // 30 pairs spread over +-60%: a 10% slowdown cannot be ruled out.
  std::vector<double> noisy;
  for (int pair = 0; pair < 30; ++pair) noisy.push_back(0.6 * (((pair * 11) % 30) / 14.5 - 1));
  ASSERT_EQ(run(first, noisy, 0.9, false), v1::INCONCLUSIVE);
  const v1::Evaluation first_done = Get(queued.evaluation().id());
  ASSERT_EQ(first_done.verdict().decision(), v1::INCONCLUSIVE)
      << first_done.verdict().DebugString();
  ASSERT_FALSE(first_done.continued_by().empty());
  EXPECT_EQ(Get(queued.evaluation().id()).continued_by(), first_done.continued_by());  // Once.
  const v1::Evaluation second = Get(first_done.continued_by());
  EXPECT_EQ(second.state(), v1::QUEUED);
  EXPECT_EQ(second.candidate().continues(), queued.evaluation().id());
  EXPECT_EQ(second.candidate().error_share(), 0.1);
  EXPECT_EQ(second.candidate().candidate_sha(), first_done.candidate().candidate_sha());

  const v1::SynchronizeResponse claimed = Synchronize(*nodes, node);
  ASSERT_EQ(claimed.lease().evaluation().id(), second.id());
  EXPECT_EQ(claimed.lease().prior().evaluation_id(), queued.evaluation().id());
  EXPECT_EQ(claimed.lease().prior().samples_size(), 60);  // 30 pairs, two arms.
  // The first part's pairs and 30 calm ones: decided at a pooled look.
  std::vector<double> pooled = noisy;
  for (int pair = 0; pair < 30; ++pair) pooled.push_back(0.002 * ((pair % 5) - 2));
  EXPECT_EQ(run(claimed.lease(), pooled, 0.1, true), v1::ACCEPT);
  const v1::Evaluation second_done = Get(second.id());
  EXPECT_EQ(second_done.verdict().decision(), v1::ACCEPT) << second_done.verdict().DebugString();
  EXPECT_TRUE(second_done.continued_by().empty());
  EXPECT_EQ(second_done.verdict().provenance().policy_parameters().max_pairs(), 60);
  EXPECT_TRUE(second_done.verdict().provenance().second_part());
  EXPECT_EQ(second_done.verdict().provenance().error_share(), 0.1);
}

// Node tokens are per node: one acts only as its own node, other roles
// cannot finish a lease at all (a forged FinishLease), and a revoked token
// stops working while the server runs. What a node reports as its verdict
// is checked: the scheduler stores the gate's decision from what the node
// measured, and distrusts a node whose verdict contradicts it, for good.
TEST_P(SchedulerScenariosOnEachStore, NodeTokensActOnlyAsTheirNodeAndTheSchedulerDecides) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string honest = NodeToken("honest");
  v1::RegisterNodeRequest reg;
  reg.mutable_dimensions()->set_accelerator_kind("cpu");
  reg.mutable_dimensions()->set_fingerprint("test");
  v1::RegisterNodeResponse registered;
  reg.set_name("someone-else");
  grpc::Status st = AsNode(
      [&](grpc::ClientContext* c) { return nodes->RegisterNode(c, reg, &registered); }, honest);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  reg.set_name("honest");
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->RegisterNode(c, reg, &registered);
              }, honest).ok());
  const std::string node = registered.node_id();
  const std::string other = RegisterSimulatedNode(*nodes, "other");
  ASSERT_FALSE(other.empty());
  // Its token cannot poll, beat or finish for another node.
  v1::SynchronizeRequest sync;
  sync.set_node_id(other);
  v1::SynchronizeResponse work;
  EXPECT_EQ(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                   honest).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Calibrated, then it leases the queued candidate.
  sync.set_node_id(node);
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                     honest).ok());
  ASSERT_EQ(work.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, work.lease(), 0.01, true, &next, honest).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease lease = next.next_lease();

  // A CI or agent token cannot finish it, whatever it claims.
  v1::FinishLeaseRequest forged;
  forged.set_node_id(node);
  forged.set_lease_id(lease.id());
  const v1::Candidate& c = lease.evaluation().candidate();
  *forged.mutable_verdict() = results::testing::VerdictWithoutSamples(
      lease.evaluation().id(), results::EffectivePolicy(c.policy(), c.kind()), v1::REJECT);
  // The verdict's reasons say a correctness stage failed; it claims ACCEPT.
  forged.mutable_verdict()->set_decision(v1::ACCEPT);
  v1::FinishLeaseResponse ignored;
  for (const char* token : {"ci-token-0001", "agent-token-01", "viewer-token-1"}) {
    EXPECT_EQ(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, forged, &ignored);
              }, token).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << token;
  }
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::RUNNING);

  // The node itself sends it: stored is the gate's decision (REJECT, for
  // the failed stage its own verdict names), and the node is distrusted.
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, forged, &ignored);
              }, honest).ok());
  const v1::Evaluation done = Get(queued.evaluation().id());
  EXPECT_EQ(done.state(), v1::FINISHED);
  EXPECT_EQ(done.verdict().decision(), v1::REJECT);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::ListNodesRequest req;
    v1::ListNodesResponse listed;
    ASSERT_TRUE(stub_->ListNodes(&ctx, req, &listed).ok());
    bool found = false;
    for (const v1::Node& n : listed.nodes()) {
      if (n.id() != node) continue;
      found = true;
      EXPECT_EQ(n.state(), v1::DISTRUSTED);
    }
    EXPECT_TRUE(found);
  }
  // It is told so, and gets no work back: not by recalibrating, not after
  // the scheduler restarts, not by registering again as other hardware.
  sync.set_wait_s(0);
  auto refused = [&](const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("is distrusted"));
  };
  work.Clear();
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                 honest));
  EXPECT_FALSE(work.has_lease());
  RestartServer();
  nodes = NodeStub();
  reg.mutable_dimensions()->set_fingerprint("other hardware");
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->RegisterNode(c, reg, &registered); },
                 honest));
  work.Clear();
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                 honest));
  EXPECT_FALSE(work.has_lease());

  // Revoked with `densegate token revoke`, the token stops working without
  // a restart (the server looks at the file at most once a second).
  Sh(Runfile("cli/densegate") + " token revoke honest --tokens " + dir_ + "/tokens 2>/dev/null");
  grpc::StatusCode code = grpc::StatusCode::OK;
  WaitFor(
      [&] {
        code = AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                      honest)
                   .error_code();
        return code == grpc::StatusCode::UNAUTHENTICATED;
      },
      absl::Seconds(5));
  EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace densegate::test
