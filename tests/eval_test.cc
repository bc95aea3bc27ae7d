// End-to-end tests of the harness on a real git repository: a fixture
// workload (tests/fixtures/tiny_workload) committed as the baseline, and one
// candidate commit per case, evaluated by the same Evaluator `densegate eval`
// uses, with real builds and real benchmark processes.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/evaluator.h"

namespace densegate::harness {
namespace {

using ::testing::HasSubstr;

std::string Tmp() { return std::getenv("TEST_TMPDIR"); }

std::string Fixture(const std::string& file) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/densegate/tests/fixtures/tiny_workload/",
                      file);
}

void Sh(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

class Recorder : public EvalListener {
 public:
  void OnStage(const v1::Stage& s) override {
    if (s.status() != v1::STAGE_RUNNING) finished.push_back(s);
  }
  void OnProgress(const v1::Progress& p) override { ++progress; }
  std::vector<v1::Stage> finished;
  int progress = 0;

  const v1::Stage* Find(v1::StageKind kind) const {
    for (const auto& s : finished) {
      if (s.kind() == kind) return &s;
    }
    return nullptr;
  }
};

class EvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    repo_ = Tmp() + "/repo-" + name_;
    Sh("rm -rf " + repo_ + " && mkdir -p " + repo_);
    for (const char* f : {"checksum.h", "bench.cc", "check.cc", "build.sh", "densegate.json"}) {
      Sh(absl::StrCat("cp ", Fixture(f), " ", repo_, "/"));
    }
    Commit("baseline");
  }

  void Commit(const std::string& message) {
    std::string git = "git -c user.name=t -c user.email=t@t -C " + repo_;
    Sh("test -d " + repo_ + "/.git || git init -q " + repo_);
    Sh(git + " add -A && " + git + " commit -q --allow-empty -m '" + message + "'");
  }

  void Write(const std::string& file, const std::string& text) {
    std::ofstream(repo_ + "/" + file) << text;
  }

  EvalOutcome Eval(v1::Policy policy, std::vector<v1::Claim> claims = {},
                   bool override_protected = false) {
    EvaluatorOptions options;
    options.workspace_root = Tmp() + "/ws-" + name_;
    options.software_version = "test";
    Evaluator evaluator(options, launcher_.get());
    EvalRequest request;
    request.repo = repo_;
    request.baseline_ref = "HEAD~1";
    request.candidate_ref = "HEAD";
    request.policy = policy;
    request.claims = std::move(claims);
    request.protected_path_override = override_protected;
    request.override_reason = "test";
    request.out_dir = Tmp() + "/out-" + name_;
    Sh("mkdir -p " + request.out_dir);
    request.seed = 7;
    absl::StatusOr<EvalOutcome> outcome = evaluator.Evaluate(request, &recorder_);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->infrastructure_error.ok()) << outcome->infrastructure_error;
    return *outcome;
  }

  static bool HasReason(const v1::Verdict& v, v1::ReasonCode code, const std::string& text) {
    for (const auto& r : v.reasons()) {
      if (r.code() == code && r.message().find(text) != std::string::npos) return true;
    }
    return false;
  }

  static std::string Reasons(const v1::Verdict& v) {
    std::string s;
    for (const auto& r : v.reasons()) s += r.message() + "\n";
    return s;
  }

  std::unique_ptr<ProcessLauncher> launcher_ =
      NewSandboxLauncher(SandboxOptions{.scratch_root = Tmp()});
  Recorder recorder_;
  std::string name_, repo_;
};

constexpr char kFastChecksum[] = R"(#pragma once
#include <cstdint>
#include <vector>

// Reduce once per 4096 elements: the sum of 4096 uint32 values plus a
// residue stays far below 2^64, so the result is the same.
inline uint64_t Checksum(const std::vector<uint32_t>& v) {
  uint64_t sum = 0;
  size_t i = 0;
  while (i < v.size()) {
    size_t end = i + 4096 < v.size() ? i + 4096 : v.size();
    for (; i < end; ++i) sum += v[i];
    sum %= 1000000007ULL;
  }
  return sum;
}
)";

TEST_F(EvalTest, RealSpeedupIsAcceptedWithClaimVerified) {
  Write("checksum.h", kFastChecksum);
  Commit("faster checksum");
  v1::Claim claim;
  claim.set_metric("checksum.time");
  claim.set_min_speedup(1.7);
  EvalOutcome o = Eval(v1::GAIN, {claim});
  const v1::Verdict& v = o.verdict;
  EXPECT_EQ(v.decision(), v1::ACCEPT) << Reasons(v);
  ASSERT_EQ(v.metrics_size(), 1);
  EXPECT_GT(v.metrics(0).ci_low(), 1.7);
  ASSERT_EQ(v.claims_size(), 1);
  EXPECT_TRUE(v.claims(0).verified());
  // Every stage ran and was reported, with progress in between.
  for (v1::StageKind k : {v1::PREFLIGHT, v1::BUILD, v1::CORRECTNESS, v1::MICROBENCHMARK}) {
    ASSERT_NE(recorder_.Find(k), nullptr) << v1::StageKind_Name(k);
    EXPECT_EQ(recorder_.Find(k)->status(), v1::STAGE_PASSED) << v1::StageKind_Name(k);
  }
  EXPECT_GT(recorder_.progress, 0);
  // The feedback bundle names the metric that moved.
  std::ifstream feedback(Tmp() + "/out-" + name_ + "/feedback.json");
  std::stringstream text;
  text << feedback.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("\"component\": \"checksum\""));
  EXPECT_THAT(text.str(), HasSubstr("\"change\": \"faster\""));
}

TEST_F(EvalTest, CommentOnlyIsNoGainButPassesNoRegression) {
  Sh("sed -i '1i // A comment that changes nothing.' " + repo_ + "/checksum.h");
  Commit("comment");
  EvalOutcome gain = Eval(v1::GAIN);
  EXPECT_NE(gain.verdict.decision(), v1::ACCEPT) << Reasons(gain.verdict);
  EvalOutcome neutral = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(neutral.verdict.decision(), v1::ACCEPT) << Reasons(neutral.verdict);
}

TEST_F(EvalTest, BrokenBuildIsRejected) {
  Write("checksum.h", "#pragma once\nthis is not C++\n");
  Commit("broken");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::BUILD_FAILED, "candidate build")) << Reasons(o.verdict);
}

TEST_F(EvalTest, WrongResultFailsCorrectnessAndSkipsBenchmarks) {
  Sh("sed -i 's/1000000007ULL/1000000009ULL/' " + repo_ + "/checksum.h");
  Commit("wrong modulus");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::CORRECTNESS_FAILED, "check")) << Reasons(o.verdict);
  const v1::Stage* micro = nullptr;
  for (const auto& s : o.verdict.stages()) {
    if (s.kind() == v1::MICROBENCHMARK) micro = &s;
  }
  ASSERT_NE(micro, nullptr);
  EXPECT_EQ(micro->status(), v1::STAGE_SKIPPED);
}

TEST_F(EvalTest, EditingAProtectedTestIsRejectedUnlessOverridden) {
  Sh("sed -i 's/return 1;/return 0;/' " + repo_ + "/check.cc");
  Commit("loosen the check");
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::PROTECTED_PATH, "check.cc")) << Reasons(o.verdict);
}

TEST_F(EvalTest, BenchmarkThatLiesAboutItsTimeIsGaming) {
  // Prints Google Benchmark JSON claiming 1000 s of timed work.
  Write("bench.cc", R"(#include <cstdio>
int main() {
  std::printf("{\"benchmarks\": [{\"name\": \"BM_Checksum\", \"run_type\": \"iteration\", "
              "\"iterations\": 1000000, \"real_time\": 1000000, \"cpu_time\": 1000000, "
              "\"time_unit\": \"ns\"}]}\n");
}
)");
  Commit("fast benchmark");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::GAMING, "times are not real")) << Reasons(o.verdict);
}

TEST_F(EvalTest, BuildThatReachesForTheNetworkIsRejected) {
  // A build step that fetches something: the sandbox has no route out.
  Write("build.sh", R"sh(#!/bin/sh
set -e
python3 -c "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"
g++ -O2 -std=c++17 -o bench bench.cc -lbenchmark -lpthread
g++ -O2 -std=c++17 -o check check.cc
)sh");
  Commit("download during the build");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::BUILD_FAILED, "Network is unreachable"))
      << Reasons(o.verdict);
}

TEST_F(EvalTest, UnknownRefAndMissingManifestAreInputErrors) {
  EvaluatorOptions options;
  options.workspace_root = Tmp() + "/ws-" + name_;
  Evaluator evaluator(options, launcher_.get());
  EvalRequest request;
  request.repo = repo_;
  request.baseline_ref = "HEAD";
  request.candidate_ref = "no-such-branch";
  auto bad_ref = evaluator.Evaluate(request, nullptr);
  EXPECT_EQ(bad_ref.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(bad_ref.status().message()), HasSubstr("no-such-branch"));

  Sh("git -C " + repo_ + " rm -q densegate.json");
  Commit("drop manifest");
  request.baseline_ref = "HEAD";
  request.candidate_ref = "HEAD";
  auto no_manifest = evaluator.Evaluate(request, nullptr);
  EXPECT_EQ(no_manifest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_manifest.status().message()), HasSubstr("densegate.json"));
}

}  // namespace
}  // namespace densegate::harness
