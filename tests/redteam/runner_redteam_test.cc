// Each trick a candidate's kernel runner could play, against the real
// harness side of the protocol (kernel checks and the precision stage), in
// the real sandbox. Every cheat must be caught with a reason naming it;
// the honest runner must pass.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/process/launcher.h"
#include "harness/runner/kernel_check.h"
#include "harness/runner/precision_baseline_cache.h"
#include "harness/runner/precision_suite.h"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::TestTmpDir;

using test::Runfile;

using ::testing::HasSubstr;
using ::testing::Not;
using Outcome = KernelCheckReport::Outcome;

// A worktree-like directory whose ./runner is `binary`, optionally with a
// trick file for the evil runner.
std::string MakeDir(const std::string& name, const std::string& binary,
                    const std::string& trick = "") {
  std::string dir = absl::StrCat(TestTmpDir(), "/", name);
  EXPECT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  EXPECT_EQ(symlink(Runfile(binary).c_str(), (dir + "/runner").c_str()), 0);
  if (!trick.empty()) std::ofstream(dir + "/trick") << trick << "\n";
  return dir;
}

class RedTeamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    launcher_ = platform::NewSandboxLauncher();
    reference_dir_ = MakeDir("reference", "kernels/runner/kernel_runner");
  }

  KernelCheckReport Check(const std::string& trick, const std::string& op = "kda_decode",
                          KernelCheckSetup::Reference reference =
                              KernelCheckSetup::Reference::kFp64) {
    v1::KernelCheck check;
    check.set_name("check-" + trick);
    check.set_op(op);
    check.set_runner("runner");
    if (op == "kda_decode") {
      // V = 53: not a multiple of any tile, so a skipped tail shows.
      (*check.mutable_shape())["batch"] = 2;
      (*check.mutable_shape())["heads"] = 4;
      (*check.mutable_shape())["k"] = 64;
      (*check.mutable_shape())["v"] = 53;
      check.set_max_rel_rms(1e-5);
    } else {
      (*check.mutable_shape())["tokens"] = 7;
      (*check.mutable_shape())["heads"] = 3;
      (*check.mutable_shape())["dim"] = 100;
      check.set_max_rel_rms(0);
    }
    check.set_calls(5);
    KernelCheckSetup setup;
    setup.launcher = launcher_.get();
    setup.reference_dir = reference_dir_;
    setup.subject_dir = MakeDir("subject-" + trick + "-" + op, "tests/redteam/evil_runner", trick);
    setup.log_prefix = setup.subject_dir + "/log";
    setup.call_timeout = absl::Seconds(10);
    setup.reference = reference;
    return RunKernelCheck(check, setup);
  }

  std::unique_ptr<platform::ProcessLauncher> launcher_;
  std::string reference_dir_;
};

TEST_F(RedTeamTest, HonestRunnerPassesEveryOp) {
  for (const char* op : {"kda_decode", "quantize_fp8_e4m3", "quantize_int8"}) {
    KernelCheckReport r = Check("none", op);
    EXPECT_EQ(r.outcome, Outcome::kPassed) << op << ": " << r.message;
    EXPECT_EQ(r.call_seconds.size(), 5u);
    for (double s : r.call_seconds) EXPECT_GT(s, 0);
  }
}

// Regression: the near-repeat calls once moved a value by x -> 1.5x + 0.25,
// which leaves x near -0.5 (almost) where it was; after FP8 quantization the
// honest outputs were then identical and the check called them cached.
TEST_F(RedTeamTest, HonestQuantizerIsNeverMistakenForACache) {
  for (int session = 0; session < 20; ++session) {
    KernelCheckReport r = Check("none", "quantize_fp8_e4m3");
    ASSERT_EQ(r.outcome, Outcome::kPassed) << "session " << session << ": " << r.message;
  }
}

struct TrickCase {
  const char* trick;
  Outcome outcome;
  const char* reason;
};

TEST_F(RedTeamTest, EveryTrickIsCaughtAndNamed) {
  for (const TrickCase& c : std::vector<TrickCase>{
           {"cache_by_pointer", Outcome::kGaming, "cached outputs"},
           {"cache_by_content", Outcome::kGaming, "cached outputs"},
           {"skip_compute", Outcome::kIncorrect, "partial output"},
           {"strided", Outcome::kIncorrect, "partial output"},
           {"skip_tail", Outcome::kIncorrect, "partial output"},
           {"late_sloppy", Outcome::kIncorrect, "partial output"},
           {"write_inputs", Outcome::kGaming, "wrote into its input q"},
           {"tf32", Outcome::kIncorrect, "lower-precision"},
           {"nondeterministic", Outcome::kIncorrect, "nondeterministic"},
           {"background", Outcome::kGaming, "background work"},
           {"crash", Outcome::kIncorrect, "exited mid-call"},
           {"hang", Outcome::kIncorrect, "hung"},
       }) {
    SCOPED_TRACE(c.trick);
    KernelCheckReport r = Check(c.trick);
    EXPECT_EQ(r.outcome, c.outcome) << r.message;
    EXPECT_THAT(r.message, HasSubstr(c.reason));
  }
}

// Timed repetitions verify against the baseline's own fp32 result instead of
// the fp64 reference: every trick must still be caught there.
TEST_F(RedTeamTest, TimedRepetitionsAgainstTheBaselinesResultCatchTricksToo) {
  const auto baseline = KernelCheckSetup::Reference::kBaselineCompute;
  KernelCheckReport honest = Check("none", "kda_decode", baseline);
  EXPECT_EQ(honest.outcome, Outcome::kPassed) << honest.message;
  for (const TrickCase& c : std::vector<TrickCase>{
           {"cache_by_pointer", Outcome::kGaming, "cached outputs"},
           {"cache_by_content", Outcome::kGaming, "cached outputs"},
           {"strided", Outcome::kIncorrect, "partial output"},
           {"write_inputs", Outcome::kGaming, "wrote into its input q"},
           {"tf32", Outcome::kIncorrect, "lower-precision"},
           {"background", Outcome::kGaming, "background work"},
       }) {
    SCOPED_TRACE(c.trick);
    KernelCheckReport r = Check(c.trick, "kda_decode", baseline);
    EXPECT_EQ(r.outcome, c.outcome) << r.message;
    EXPECT_THAT(r.message, HasSubstr(c.reason));
  }
}

PrecisionReport Sweep(platform::ProcessLauncher* launcher, const std::string& reference_dir,
                      const std::string& trick, bool candidate_runner_identical = false,
                      PrecisionBaselineCache* baselines = nullptr,
                      const std::string& baseline_key = "") {
  v1::PrecisionSuite suite;
  suite.set_name("decode-long");
  suite.set_op("kda_decode");
  suite.set_runner("runner");
  for (int64_t len : {256, 1024, 4096}) suite.add_lengths(len);
  suite.set_max_rel_rms(2e-3);
  (*suite.mutable_shape())["heads"] = 1;
  (*suite.mutable_shape())["k"] = 32;
  (*suite.mutable_shape())["v"] = 32;
  (*suite.mutable_params())["gate_scale"] = 100;
  PrecisionSetup setup;
  setup.launcher = launcher;
  setup.baseline_dir = reference_dir;
  setup.candidate_dir = MakeDir("sweep-" + trick, "tests/redteam/evil_runner", trick);
  setup.log_prefix = setup.candidate_dir + "/log";
  setup.candidate_runner_identical = candidate_runner_identical;
  setup.baselines = baselines;
  setup.baseline_key = baseline_key;
  return RunPrecisionSuite(suite, setup);
}

TEST_F(RedTeamTest, PrecisionStageRejectsTf32ThatPassesTheAbsoluteBound) {
  PrecisionReport honest = Sweep(launcher_.get(), reference_dir_, "none");
  ASSERT_EQ(honest.outcome, PrecisionReport::Outcome::kPassed) << honest.message;
  ASSERT_EQ(honest.candidate.rel_rms.size(), 3u);
  EXPECT_LT(honest.candidate.rel_rms.back(), 1e-5);

  PrecisionReport tf32 = Sweep(launcher_.get(), reference_dir_, "tf32");
  EXPECT_EQ(tf32.outcome, PrecisionReport::Outcome::kFailed) << tf32.message;
  EXPECT_THAT(tf32.message, HasSubstr("the baseline's"));
  // The mission's failure class: under a short-context tolerance ...
  EXPECT_LT(tf32.candidate.rel_rms.front(), 2e-3);
  // ... yet far above the baseline's error.
  EXPECT_GT(tf32.candidate.rel_rms.back(), 10 * tf32.baseline.rel_rms.back());
  // The stage record keeps both curves and the bound for the report.
  v1::PrecisionSuite suite;
  suite.set_name("decode-long");
  suite.set_max_rel_rms(2e-3);
  v1::PrecisionCurve curve = tf32.ToProto(suite);
  ASSERT_EQ(curve.candidate_size(), 3);
  ASSERT_EQ(curve.baseline_size(), 3);
  EXPECT_EQ(curve.candidate(2).length(), 4096);
  EXPECT_EQ(curve.candidate(2).rel_rms(), tf32.candidate.rel_rms.back());
  EXPECT_EQ(curve.max_rel_rms(), 2e-3);
}

// A candidate whose runner is the baseline's is not swept again: its curve
// is the baseline's and the message says why. (The harness sets the flag
// only for byte-identical runners; given the TF32 runner here, the sweep
// never starts it, which the missing log shows.)
TEST_F(RedTeamTest, ACandidateRunnerIdenticalToTheBaselinesIsNotSweptAgain) {
  PrecisionReport same = Sweep(launcher_.get(), reference_dir_, "tf32", true);
  ASSERT_EQ(same.outcome, PrecisionReport::Outcome::kPassed) << same.message;
  ASSERT_EQ(same.baseline.rel_rms.size(), 3u);
  EXPECT_EQ(same.candidate.rel_rms, same.baseline.rel_rms);
  EXPECT_EQ(same.candidate.max_abs_err, same.baseline.max_abs_err);
  EXPECT_THAT(same.message, HasSubstr("byte-identical to the baseline's"));
  const std::string logs = absl::StrCat(TestTmpDir(), "/sweep-tf32/log");
  EXPECT_TRUE(std::filesystem::exists(logs + "-baseline.err"));
  EXPECT_FALSE(std::filesystem::exists(logs + "-candidate.err"));
}

// A node keeps the baseline's half of a sweep for the next candidate against
// the same baseline runner: that sweep starts only the candidate's runner,
// on the same inputs against the same reference, and still rejects TF32.
TEST_F(RedTeamTest, ALaterSweepAgainstTheSameBaselineRunnerRunsOnlyTheCandidate) {
  PrecisionBaselineCache baselines(int64_t{1} << 30);
  auto logs = [](const std::string& trick) {
    return absl::StrCat(TestTmpDir(), "/sweep-", trick, "/log");
  };
  PrecisionReport honest = Sweep(launcher_.get(), reference_dir_, "none", false, &baselines, "k");
  ASSERT_EQ(honest.outcome, PrecisionReport::Outcome::kPassed) << honest.message;
  EXPECT_THAT(honest.message, Not(HasSubstr("earlier sweep")));
  EXPECT_TRUE(std::filesystem::exists(logs("none") + "-reference.err"));
  EXPECT_TRUE(std::filesystem::exists(logs("none") + "-baseline.err"));
  EXPECT_EQ(baselines.entries(), 1);

  PrecisionReport tf32 = Sweep(launcher_.get(), reference_dir_, "tf32", false, &baselines, "k");
  EXPECT_EQ(tf32.outcome, PrecisionReport::Outcome::kFailed) << tf32.message;
  EXPECT_THAT(tf32.message, HasSubstr("the baseline's"));
  EXPECT_THAT(tf32.message, HasSubstr("earlier sweep with a byte-identical baseline runner"));
  EXPECT_EQ(tf32.baseline.rel_rms, honest.baseline.rel_rms);
  EXPECT_EQ(tf32.baseline.max_abs_err, honest.baseline.max_abs_err);
  EXPECT_GT(tf32.candidate.rel_rms.back(), 10 * tf32.baseline.rel_rms.back());
  EXPECT_FALSE(std::filesystem::exists(logs("tf32") + "-reference.err"));
  EXPECT_FALSE(std::filesystem::exists(logs("tf32") + "-baseline.err"));
  EXPECT_TRUE(std::filesystem::exists(logs("tf32") + "-candidate.err"));

  // Another baseline runner (another key) draws and computes its own.
  PrecisionReport other = Sweep(launcher_.get(), reference_dir_, "none", false, &baselines, "k2");
  ASSERT_EQ(other.outcome, PrecisionReport::Outcome::kPassed) << other.message;
  EXPECT_TRUE(std::filesystem::exists(logs("none") + "-reference.err"));
  EXPECT_NE(other.baseline.rel_rms, honest.baseline.rel_rms);
  EXPECT_EQ(baselines.entries(), 2);
}

}  // namespace
}  // namespace densegate::harness
