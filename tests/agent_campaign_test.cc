// The experiment agent end to end: `densegate agent run` against a
// scheduler in this process (each store) whose scripted node answers from
// what a candidate commit holds, so that the campaign's knobs and patches
// have speeds of their own. The campaign is killed mid-run and resumed.
// And what keeps people in charge: the branches an agent may aim at, and a
// branch policy that holds an agent's accepted experiment for approval.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "platform/process/service_process.h"
#include "tests/scenario_fixture.h"
#include "tests/scheduler_fixture.h"

namespace densegate::test {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// `git show SHA:PATH` in `repo`; empty when the file is not there.
std::string Show(const std::string& repo, const std::string& sha, const std::string& path) {
  std::string out;
  FILE* p = popen(("git -C " + repo + " show " + sha + ":" + path + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// How fast a commit of the workload is: tile 16 gains 1.25x, tile 32
// 1.1x; the fused patch (notes.txt says "fused") 1.3x on top.
double Speed(const std::string& repo, const std::string& sha) {
  const nlohmann::json tune = nlohmann::json::parse(Show(repo, sha, "tune.json"), nullptr, false);
  const int tile = tune.is_object() ? tune.value("tile", 8) : 8;
  double speed = tile == 16 ? 1.25 : tile == 32 ? 1.1 : 1.0;
  if (Show(repo, sha, "notes.txt").find("fused") != std::string::npos) speed *= 1.3;
  return speed;
}

class AgentCampaign : public SchedulerScenarios {
 protected:
  // The campaign's pieces: a knob space the repository declares, and a
  // patch catalog beside it with one patch that no longer applies.
  void WriteCampaign() {
    std::ofstream(repo_ + "/tune.json") << "{\"tile\": 8}\n";
    std::ofstream(repo_ + "/tuning.json")
        << R"({"file": "tune.json", "knobs": [{"name": "tile", "values": [8, 16, 32]}]})";
    Git("add -A");
    Git("commit -q -m 'a tile knob'");
    Git("tag -f base");
    Git("branch trunk base");
    const std::string patches = dir_ + "/patches";
    Sh("mkdir -p " + patches);
    // The fused patch: made against the start, applied three-way on the tip.
    Git("checkout -q -b fused base");
    std::ofstream(repo_ + "/notes.txt") << "fused decode\n";
    Git("add notes.txt");
    Git("commit -q -m fused");
    Sh("git -C " + repo_ + " diff base fused > " + patches + "/fused.patch");
    Git("checkout -q --detach base");
    Git("branch -D fused");
    // The lucky patch: fast the first time it is measured, not after.
    Git("checkout -q -b lucky base");
    std::ofstream(repo_ + "/notes.txt") << "lucky guess\n";
    Git("add notes.txt");
    Git("commit -q -m lucky");
    Sh("git -C " + repo_ + " diff base lucky > " + patches + "/lucky.patch");
    Git("checkout -q --detach base");
    Git("branch -D lucky");
    std::ofstream(patches + "/stale.patch") << "--- a/gone.txt\n+++ b/gone.txt\n@@ -1 +1 @@\n"
                                               "-old\n+new\n";
    std::ofstream(patches + "/catalog.json") << R"({"patches": [
      {"file": "stale.patch", "hypothesis": "an old idea", "expected_gain": 2.0},
      {"file": "lucky.patch", "hypothesis": "a lucky guess", "expected_gain": 1.4},
      {"file": "fused.patch", "hypothesis": "fuse the decode steps", "expected_gain": 1.3,
       "claims": [{"metric": "checksum.time", "min_speedup": 1.2}]}]})";
    std::ofstream(dir_ + "/campaign.json") << R"({"id": "tile-and-fuse", "repo": ")" << repo_
                                           << R"(", "branch": "trunk",
      "goal": {"metric": "checksum.time", "min_speedup": 1.5},
      "budget": {"max_experiments": 10},
      "proposers": [{"knob_search": {"space": "tuning.json"}},
                    {"patch_catalog": {"dir": "patches"}}]})";
  }

  std::string Agent(const std::string& args) const {
    return absl::StrCat(Runfile("cli/densegate"), " agent ", args, " --server ", address_,
                        " --token agent-token-01");
  }

  // The campaign's evaluations, as the store lists them.
  std::vector<v1::Evaluation> CampaignEvaluations() {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::ListEvaluationsRequest req;
    req.set_campaign("tile-and-fuse");
    req.set_page_size(500);
    v1::ListEvaluationsResponse resp;
    EXPECT_TRUE(stub_->ListEvaluations(&ctx, req, &resp).ok());
    return {resp.evaluations().begin(), resp.evaluations().end()};
  }
};

using AgentCampaignOnEachStore = OnEachStore<AgentCampaign>;

INSTANTIATE_TEST_SUITE_P(Stores, AgentCampaignOnEachStore,
                         ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(AgentCampaignOnEachStore, ACampaignLandsVerifiedGainsAndResumesWithoutRepeating) {
  WriteCampaign();
  scheduler::ServerOptions options = Options();
  options.scheduler.agent_branches = {"trunk"};
  StartServer(options);
  const std::string repo = repo_;
  auto lucky_runs = std::make_shared<std::map<std::string, int>>();  // Node thread only.
  auto node = StartNode("n1", [repo, lucky_runs](const harness::EvalRequest& r) {
    if (Show(repo, r.candidate_ref, "notes.txt").find("lucky") != std::string::npos &&
        (*lucky_runs)[r.candidate_ref]++ == 0) {
      return Measured(0.75);  // Noise that favoured it once.
    }
    return Measured(Speed(repo, r.baseline_ref) / Speed(repo, r.candidate_ref));
  });

  // Killed (SIGKILL) once two experiments have ended.
  absl::StatusOr<std::unique_ptr<platform::ServiceProcess>> first = platform::ServiceProcess::Start(
      {"/bin/sh", "-c", Agent("run " + dir_ + "/campaign.json --workdir " + dir_ + "/work")},
      dir_ + "/first.log");
  ASSERT_TRUE(first.ok()) << first.status();
  const bool two_ended = WaitFor(
      [&] {
        int ended = 0;
        for (const v1::Evaluation& e : CampaignEvaluations()) ended += e.state() == v1::FINISHED;
        return ended >= 2;
      },
      absl::Minutes(3));
  (*first)->Kill();
  ASSERT_TRUE(two_ended) << ReadFile(dir_ + "/first.log");

  const std::string out = dir_ + "/resumed.txt";
  const int rc = std::system((Agent("run --resume tile-and-fuse --workdir " + dir_ + "/work") +
                              " > " + out + " 2> " + dir_ + "/resumed.log")
                                 .c_str());
  const std::string log = ReadFile(dir_ + "/first.log") + ReadFile(dir_ + "/resumed.log");
  ASSERT_EQ(WEXITSTATUS(rc), 0) << ReadFile(out) << log;

  // Each experiment was evaluated once, across both runs.
  std::map<std::string, int> runs;
  std::map<std::string, v1::Evaluation> by_key;
  for (const v1::Evaluation& e : CampaignEvaluations()) {
    if (!e.candidate().remeasure_of().empty() || !e.candidate().confirms().empty()) continue;
    const std::string key = e.candidate().candidate_ref().substr(
        std::string("densegate/agent/tile-and-fuse/").size());
    ++runs[key];
    by_key[key] = e;
  }
  for (const auto& [key, n] : runs) EXPECT_EQ(n, 1) << key << " was evaluated " << n << " times";
  // Knobs: both points that differ from the start screened (scoped, not
  // aimed at the branch), the better one evaluated in full and landed.
  ASSERT_EQ(by_key.count("screen-tile=16"), 1) << log;
  ASSERT_EQ(by_key.count("screen-tile=32"), 1) << log;
  EXPECT_EQ(by_key.count("screen-tile=8"), 0);  // The start's own value.
  EXPECT_THAT(by_key["screen-tile=16"].candidate().metric_scope(),
              ::testing::ElementsAre("checksum.time"));
  EXPECT_TRUE(by_key["screen-tile=16"].candidate().target_branch().empty());
  ASSERT_EQ(by_key.count("final-tile=16"), 1) << log;
  EXPECT_EQ(by_key["final-tile=16"].merge().state(), v1::MERGED);
  EXPECT_EQ(by_key.count("final-tile=32"), 0);
  // The catalog: the stale patch skipped, the fused one applied on the
  // moved tip, its claim checked, landed.
  EXPECT_EQ(by_key.count("patch-stale"), 0);
  EXPECT_THAT(log, HasSubstr("stale.patch does not apply"));
  ASSERT_EQ(by_key.count("patch-fused"), 1) << log;
  const v1::Evaluation& fused = by_key["patch-fused"];
  EXPECT_EQ(fused.candidate().baseline_sha(), by_key["final-tile=16"].merge().merged_sha());
  EXPECT_EQ(fused.verdict().decision(), v1::ACCEPT);
  ASSERT_EQ(fused.verdict().claims_size(), 1);
  EXPECT_TRUE(fused.verdict().claims(0).verified());
  EXPECT_EQ(fused.merge().state(), v1::MERGED);
  EXPECT_EQ(Rev("trunk"), fused.merge().merged_sha());
  // Nothing lands on the verdict that accepted it: each landing was
  // confirmed by a fresh evaluation first, and the lucky patch, accepted
  // once, failed its confirmation and stayed out.
  for (const char* key : {"final-tile=16", "patch-fused"}) {
    const v1::Evaluation confirmation = Get(by_key[key].merge().remeasure_evaluation_id());
    EXPECT_EQ(confirmation.candidate().confirms(), by_key[key].id()) << key;
    EXPECT_EQ(confirmation.verdict().decision(), v1::ACCEPT) << key;
    EXPECT_TRUE(confirmation.candidate().remeasure_of().empty()) << key << ": pools no pairs";
  }
  ASSERT_EQ(by_key.count("patch-lucky"), 1) << log;
  const v1::Evaluation& lucky = by_key["patch-lucky"];
  EXPECT_EQ(lucky.verdict().decision(), v1::ACCEPT);
  EXPECT_EQ(lucky.merge().state(), v1::MERGE_FAILED);
  EXPECT_THAT(lucky.merge().message(), HasSubstr("confirmed afresh"));
  EXPECT_THAT(Show(repo_, "trunk", "notes.txt"), Not(HasSubstr("lucky")));
  // The campaign's gain measured start against tip: 1.25 x 1.3.
  int totals = 0;
  for (const auto& [key, e] : by_key) {
    if (key.rfind("total-", 0) != 0) continue;
    ++totals;
    EXPECT_EQ(e.candidate().baseline_sha(), Rev("base"));
    ASSERT_EQ(e.verdict().claims_size(), 1);
    EXPECT_TRUE(e.verdict().claims(0).verified()) << e.verdict().DebugString();
  }
  EXPECT_EQ(totals, 1);
  EXPECT_THAT(ReadFile(out), HasSubstr("fuse the decode steps"));

  // The log, from the store alone.
  const std::string history = dir_ + "/log.txt";
  ASSERT_EQ(std::system((Agent("log tile-and-fuse") + " > " + history).c_str()), 0);
  const std::string text = ReadFile(history);
  EXPECT_THAT(text, HasSubstr("final-tile=16"));
  EXPECT_THAT(text, HasSubstr("hypothesis: knobs tile=16 in tune.json"));
  EXPECT_THAT(text, HasSubstr("change: 1 file changed"));
  EXPECT_THAT(text, HasSubstr("claim: checksum.time >= 1.20x, verified"));
  EXPECT_THAT(text, ContainsRegex("measured: checksum.time 1\\.(29|30)[0-9]x"));  // 1.3 +- 0.5%
  EXPECT_THAT(text, HasSubstr("decision: ACCEPT, merged as"));
  EXPECT_THAT(text, HasSubstr("confirmed afresh ("));

  // The report: per campaign, claimed against confirmed.
  const std::string report = Http("/report?format=md&branch=trunk&token=viewer-token-1");
  EXPECT_THAT(report, HasSubstr("### tile-and-fuse: 2 landed"));
  EXPECT_THAT(report, HasSubstr("| checksum.time >= 1.20x |"));
  EXPECT_THAT(report, ContainsRegex("a lucky guess \\|[^\n]*\\| merge_failed \\|"));
}

TEST_P(AgentCampaignOnEachStore, ABranchPolicyHoldsAcceptedExperimentsForAPerson) {
  WriteCampaign();
  Branch("tile16", "sed -i 's/8/16/' tune.json");
  Branch("tile32", "sed -i 's/8/32/' tune.json");
  Branch("note", "echo '# a note' >> build.sh");
  scheduler::ServerOptions options = Options();
  options.scheduler.agent_branches = {"trunk"};
  options.scheduler.approval_branches = {"trunk"};
  StartServer(options);
  const std::string repo = repo_;
  auto node = StartNode("n1", [repo](const harness::EvalRequest& r) {
    return Measured(Speed(repo, r.baseline_ref) / Speed(repo, r.candidate_ref));
  });
  auto submit = [&](const std::string& token, const std::string& ref, v1::CandidateKind kind) {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch("trunk");
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(kind);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::SubmitResponse r;
    grpc::Status s = stub_->Submit(&ctx, req, &r);
    EXPECT_TRUE(s.ok()) << ref << ": " << s.error_message();
    return r.evaluation().id();
  };
  auto merge_is = [&](const std::string& id, v1::MergeState state) {
    const bool reached =
        WaitFor([&] { return Get(id).merge().state() == state; }, absl::Minutes(2));
    EXPECT_TRUE(reached) << id << " is " << v1::MergeState_Name(Get(id).merge().state()) << ": "
                         << Get(id).merge().message();
    return reached;
  };
  const std::string tile16 = submit("agent-token-01", "tile16", v1::EXPERIMENT);
  const std::string tile32 = submit("agent-token-01", "tile32", v1::EXPERIMENT);
  // Both accepted and held; the second was not held up by the first.
  ASSERT_TRUE(merge_is(tile16, v1::AWAITING_APPROVAL));
  ASSERT_TRUE(merge_is(tile32, v1::AWAITING_APPROVAL));
  EXPECT_THAT(Get(tile16).merge().message(), HasSubstr("densegate approve " + tile16));
  EXPECT_EQ(Rev("trunk"), Rev("base"));
  // The report and the live page list them, with verdict and feedback.
  const std::string report = Http("/report?format=md&branch=trunk&token=viewer-token-1");
  EXPECT_THAT(report, HasSubstr("## Awaiting approval"));
  EXPECT_THAT(report, HasSubstr(tile16));
  EXPECT_THAT(report, HasSubstr("densegate feedback " + tile16));
  EXPECT_THAT(Http("/report?branch=trunk&token=viewer-token-1"),
              HasSubstr("<h2>Awaiting approval</h2>"));

  // Only a person may say: never the agent, nor CI or a viewer.
  auto decide = [&](const std::string& token, const std::string& id, bool approve,
                    const std::string& reason = "") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::Evaluation e;
    if (approve) {
      v1::ApproveMergeRequest req;
      req.set_evaluation_id(id);
      return stub_->ApproveMerge(&ctx, req, &e).error_code();
    }
    v1::DeclineMergeRequest req;
    req.set_evaluation_id(id);
    req.set_reason(reason);
    return stub_->DeclineMerge(&ctx, req, &e).error_code();
  };
  for (const char* token : {"agent-token-01", "ci-token-0001", "viewer-token-1"}) {
    EXPECT_EQ(decide(token, tile16, true), grpc::StatusCode::PERMISSION_DENIED) << token;
  }
  EXPECT_EQ(decide("maintainer-token-1", tile32, false, "  "),
            grpc::StatusCode::INVALID_ARGUMENT);

  // CI lands meanwhile: the held entries do not block the branch.
  const std::string note = submit("ci-token-0001", "note", v1::CI);
  ASSERT_TRUE(merge_is(note, v1::MERGED));
  const std::string moved = Rev("trunk");
  ASSERT_NE(moved, Rev("base"));

  // Approved: re-measured on the moved tip first, then landed.
  EXPECT_EQ(decide("maintainer-token-1", tile16, true), grpc::StatusCode::OK);
  ASSERT_TRUE(merge_is(tile16, v1::MERGED));
  const v1::Evaluation landed = Get(tile16);
  EXPECT_EQ(landed.merge().approved_by(), "maintainer:ana");
  ASSERT_FALSE(landed.merge().remeasure_evaluation_id().empty());
  EXPECT_EQ(Get(landed.merge().remeasure_evaluation_id()).candidate().baseline_sha(), moved);
  EXPECT_EQ(decide("maintainer-token-1", tile16, true), grpc::StatusCode::FAILED_PRECONDITION);
  // Declined: it never lands, and says why.
  EXPECT_EQ(decide("maintainer-token-1", tile32, false, "tile 32 thrashes L2 on H200"),
            grpc::StatusCode::OK);
  const v1::Evaluation declined = Get(tile32);
  EXPECT_EQ(declined.merge().state(), v1::MERGE_FAILED);
  EXPECT_THAT(declined.merge().message(),
              HasSubstr("declined by maintainer:ana: tile 32 thrashes L2 on H200"));
  EXPECT_EQ(Show(repo_, "trunk", "tune.json").find("32"), std::string::npos);
}

TEST_F(AgentCampaign, AnAgentTokenAimsOnlyAtTheBranchesTheSchedulerAllows) {
  WriteCampaign();
  StartServer();  // No --agent_branches.
  const std::string out = dir_ + "/refused.txt";
  const int rc = std::system(
      (Agent("run " + dir_ + "/campaign.json") + " > " + out + " 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_THAT(ReadFile(out), HasSubstr("cannot aim at branch 'trunk'"));
  // Nor may it submit toward a branch itself.
  v1::SubmitRequest req;
  req.set_repo(repo_);
  req.set_target_branch("trunk");
  req.set_baseline_ref("base");
  req.set_candidate_ref("base");
  req.set_kind(v1::EXPERIMENT);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer agent-token-01");
  v1::SubmitResponse r;
  EXPECT_EQ(stub_->Submit(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

}  // namespace
}  // namespace densegate::test
