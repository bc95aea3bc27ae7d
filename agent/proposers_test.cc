// The proposers on a real git worktree, with histories made by hand, and
// how a campaign's history is read back from its evaluations.
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "agent/campaign_runner.h"
#include "agent/proposer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/git/git.h"
#include "platform/process/launcher.h"
#include "testing/test_util.h"

namespace densegate::agent {
namespace {

using ::testing::HasSubstr;
using Kind = Proposal::Kind;
using test::ReadFile;
using test::Sh;
using test::TestTmpDir;
using test::WriteFile;

class ProposersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTmpDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    tree_ = dir_ + "/tree";
    Sh("rm -rf " + dir_ + " && mkdir -p " + tree_ + " && cd " + tree_ +
       " && git init -q && echo '{\"decode\": {\"tile\": 8}}' > tune.json && echo "
       "'{\"file\": \"tune.json\", \"knobs\": [{\"name\": \"decode.tile\", \"values\": [8, "
       "16, 32]}, {\"name\": \"kv\", \"values\": [\"fp16\", \"fp8\"]}]}' > space.json && "
       "echo one > a.txt && git add -A && git -c user.name=t -c user.email=t@t commit -q -m "
       "start");
    tip_ = Rev();
    campaign_.set_id("c");
    campaign_.mutable_goal()->set_metric("tok_s");
    campaign_.mutable_goal()->set_min_speedup(2);
  }
  std::string Rev() {
    return std::string(absl::StripAsciiWhitespace(*git_.Run(tree_, {"rev-parse", "HEAD"})));
  }
  void Reset() { Sh("cd " + tree_ + " && git reset -q --hard " + tip_ + " && git clean -qfdx"); }
  ProposalContext Context() { return {&campaign_, tip_, &history_, tree_, "{}", "[]"}; }
  // An ended experiment whose goal metric moved by `speedup`.
  void Ended(const std::string& key, double speedup, v1::Decision d = v1::ACCEPT,
             v1::MergeState merge = v1::NOT_MERGING) {
    Experiment x{key, {}};
    x.evaluation.set_state(v1::FINISHED);
    x.evaluation.mutable_verdict()->set_decision(d);
    v1::MetricComparison* m = x.evaluation.mutable_verdict()->add_metrics();
    m->set_metric("tok_s");
    m->set_speedup(speedup);
    x.evaluation.mutable_merge()->set_state(merge);
    history_.push_back(x);
  }

  std::unique_ptr<platform::ProcessLauncher> launcher_ = platform::NewSandboxLauncher();
  platform::Git git_{launcher_.get()};
  std::string dir_, tree_, tip_;
  v1::Campaign campaign_;
  std::vector<Experiment> history_;
};

TEST_F(ProposersTest, KnobSearchScreensEachPointThenLandsTheBestFirst) {
  v1::KnobSearch spec;
  spec.set_space("space.json");
  spec.set_finalists(2);
  auto knobs = NewKnobSearch(spec, {&git_, launcher_.get()});
  // The start's own point (tile 8, kv unset) differs: kv is added.
  absl::StatusOr<Proposal> p = knobs->Next(Context());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kind, Kind::kExperiment);
  EXPECT_EQ(p->key, "screen-decode.tile=8-kv=fp16");
  EXPECT_TRUE(p->screen);
  EXPECT_THAT(ReadFile(tree_ + "/tune.json"), HasSubstr("\"kv\": \"fp16\""));
  // Screened in the space's order; the next is the first not in history.
  Ended("screen-decode.tile=8-kv=fp16", 1.0);
  Ended("screen-decode.tile=8-kv=fp8", 1.4);
  Ended("screen-decode.tile=16-kv=fp16", 1.2);
  Reset();
  p = knobs->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->key, "screen-decode.tile=16-kv=fp8");
  Ended("screen-decode.tile=16-kv=fp8", 1.9, v1::REJECT);  // Rejected: never a finalist.
  Ended("screen-decode.tile=32-kv=fp16", 0.8);
  Ended("screen-decode.tile=32-kv=fp8", 1.1);
  // Rung two: best screened first, in full.
  Reset();
  p = knobs->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->key, "final-decode.tile=8-kv=fp8");
  EXPECT_FALSE(p->screen);
  EXPECT_THAT(p->hypothesis, HasSubstr("screened at 1.400x"));
  Ended("final-decode.tile=8-kv=fp8", 1.35, v1::REJECT);
  Reset();
  p = knobs->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->key, "final-decode.tile=16-kv=fp16");
  Ended("final-decode.tile=16-kv=fp16", 1.2, v1::ACCEPT, v1::MERGED);
  Reset();
  p = knobs->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, Kind::kDone);
  EXPECT_THAT(p->note, HasSubstr("landed decode.tile=16"));
}

TEST_F(ProposersTest, PatchCatalogTriesByExpectedGainAndSkipsWhatDoesNotApply) {
  const std::string patches = dir_ + "/patches";
  Sh("mkdir -p " + patches + " && cd " + tree_ + " && echo two >> a.txt && git diff > " +
     patches + "/two.patch && git checkout -q a.txt");
  WriteFile(patches + "/gone.patch", "--- a/gone\n+++ b/gone\n@@ -1 +1 @@\n-x\n+y\n");
  WriteFile(patches + "/catalog.json",
            R"({"patches": [{"file": "two.patch", "hypothesis": "two", "expected_gain": 1.2,
                "claims": [{"metric": "tok_s", "min_speedup": 1.1}]},
               {"file": "gone.patch", "hypothesis": "gone", "expected_gain": 1.5}]})");
  v1::PatchCatalog spec;
  spec.set_dir(patches);
  auto catalog = NewPatchCatalog(spec, {&git_, launcher_.get()});
  absl::StatusOr<Proposal> p = catalog->Next(Context());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->kind, Kind::kSkipped);
  EXPECT_THAT(p->note, HasSubstr("gone.patch does not apply"));
  Reset();
  p = catalog->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->key, "patch-two");
  ASSERT_EQ(p->claims.size(), 1u);
  EXPECT_EQ(p->claims[0].min_speedup(), 1.1);
  EXPECT_EQ(ReadFile(tree_ + "/a.txt"), "one\ntwo\n");
  Ended("patch-two", 1.15);
  Reset();
  p = catalog->Next(Context());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, Kind::kDone);
}

TEST_F(ProposersTest, ExternalCommandGetsFeedbackAndHistoryAndItsChangeIsTheExperiment) {
  // A deterministic stand-in for a coding tool: it reads what it is given
  // and changes one file.
  const std::string tool = dir_ + "/tool.sh";
  WriteFile(tool,
            "#!/bin/sh\nset -e\ngrep -q decision \"$DENSEGATE_FEEDBACK\"\n"
            "test -f \"$DENSEGATE_HISTORY\"\necho \"tip $DENSEGATE_TIP\" >> a.txt\n"
            "echo '{\"hypothesis\": \"append the tip\", \"claims\": [{\"metric\": \"tok_s\", "
            "\"min_speedup\": 1.05}]}' > \"$DENSEGATE_PROPOSAL\"\n");
  Sh("chmod +x " + tool);
  v1::ExternalCommand spec;
  spec.add_argv(tool);
  spec.set_max_proposals(2);
  auto external = NewExternalCommand(spec, {&git_, launcher_.get()});
  ProposalContext ctx = Context();
  ctx.last_feedback_json = R"({"decision": "reject"})";
  absl::StatusOr<Proposal> p = external->Next(ctx);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->kind, Kind::kExperiment) << p->note;
  EXPECT_EQ(p->key, "ext-1");
  EXPECT_EQ(p->hypothesis, "append the tip");
  ASSERT_EQ(p->claims.size(), 1u);
  EXPECT_THAT(ReadFile(tree_ + "/a.txt"), HasSubstr("tip " + tip_));
  // Without feedback it fails: that ends it, with the reason.
  Reset();
  ctx.last_feedback_json = "";
  p = external->Next(ctx);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, Kind::kDone);
  EXPECT_THAT(p->note, HasSubstr("exited with 1"));
  // Its proposals are numbered on from the history, up to max_proposals.
  Ended("ext-1", 1.0);
  Reset();
  ctx.last_feedback_json = R"({"decision": "reject"})";
  p = external->Next(ctx);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->key, "ext-2");
  Ended("ext-2", 1.0);
  Reset();
  p = external->Next(ctx);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->kind, Kind::kDone);
  EXPECT_THAT(p->note, HasSubstr("2 proposals"));
}

TEST(HistoryOfTest, OneExperimentPerKeyWithItsSecondPartsVerdict) {
  auto eval = [](const std::string& id, const std::string& ref) {
    v1::Evaluation e;
    e.set_id(id);
    e.mutable_candidate()->set_candidate_ref(ref);
    return e;
  };
  std::vector<v1::Evaluation> all = {
      eval("e1", "densegate/agent/c/patch-a"), eval("e2", "densegate/agent/c/screen-x"),
      eval("e3", "densegate/agent/c/screen-x"), eval("e4", "some/other/branch"),
      eval("e5", "densegate/agent/c/patch-a"), eval("e6", "densegate/agent/c/patch-b")};
  all[0].set_continued_by("e5");
  all[4].mutable_candidate()->set_continues("e1");
  all[5].mutable_candidate()->set_remeasure_of("e1");
  std::vector<Experiment> h = HistoryOf("c", all);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].key, "patch-a");
  EXPECT_EQ(h[0].evaluation.id(), "e5");  // The second part decides.
  EXPECT_EQ(h[1].key, "screen-x");
  EXPECT_EQ(h[1].evaluation.id(), "e3");  // The latest of a key.
}

}  // namespace
}  // namespace densegate::agent
