// End-to-end tests of the harness on a real git repository: a fixture
// workload (tests/fixtures/tiny_workload) committed as the baseline, and one
// candidate commit per case, evaluated by the same Evaluator `densegate eval`
// uses, with real builds and real benchmark processes.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/evaluator.h"
#include "nlohmann/json.hpp"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::ReadFile;
using test::Runfile;
using test::Sh;
using test::TestTmpDir;
using test::WaitFor;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Fixture(const std::string& file) {
  return Runfile("tests/fixtures/tiny_workload/" + file);
}

class Recorder : public EvalListener {
 public:
  void OnStage(const v1::Stage& s) override {
    if (on_stage) on_stage(s);
    if (s.status() != v1::STAGE_RUNNING) finished.push_back(s);
  }
  std::function<void(const v1::Stage&)> on_stage;
  void OnProgress(const v1::Progress& p) override { progress.push_back(p); }
  std::vector<v1::Stage> finished;
  std::vector<v1::Progress> progress;

  const v1::Stage* Find(v1::StageKind kind) const {
    for (const auto& s : finished) {
      if (s.kind() == kind) return &s;
    }
    return nullptr;
  }
};

// A serving program in the style of the runtime's serve_bench: it reads
// prompts from --seed, "decodes" them through the candidate's model.py and
// prints its throughput and what it generated.
constexpr char kServe[] = R"py(import sys, time
import model
seed = int(sys.argv[1].split("=")[1])
start = time.perf_counter()
outputs = [model.generate(seed * 31 + r, tokens=6) for r in range(4)]
elapsed = time.perf_counter() - start
print('{"throughput": %f, "outputs": %s}' % (24 / elapsed, outputs))
)py";

// The model: four layers of fixed work per token, each mixing the state.
std::string Model(const std::string& layers_run) {
  return absl::StrFormat(R"py(import os, sys
def layer(state, i):
    for _ in range(20000):
        state = (state * 6364136223846793005 + i) %% (1 << 61)
    return state
def generate(prompt, tokens):
    out, state = [], prompt
    for _ in range(tokens):
        for i in %s:
            state = layer(state, i)
        out.append(state %% 50000)
    return out
)py",
                         layers_run);
}

class EvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    repo_ = TestTmpDir() + "/repo-" + name_;
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

  // A repository whose one end-to-end benchmark reports a throughput of its
  // own on every run (100-163), and a candidate that changes nothing it reads.
  void WriteNoisyEndToEndRepo() {
    Write("densegate.json", R"({
  "schema_version": 1,
  "name": "tiny-e2e",
  "build": {"command": "true", "timeout_s": 60},
  "benchmarks": [{
    "name": "e2e", "kind": "JSON_COMMAND", "command": "sh e2e.sh", "timeout_s": 60,
    "skip_when_identical": false,
    "metrics": [{"name": "e2e.throughput", "source": "throughput", "unit": "req/s",
                 "direction": "HIGHER_IS_BETTER", "primary": true}]
  }],
  "gate": {"min_effect": 0.02, "regression_budget": 0.10, "min_pairs": 6, "max_pairs": 6},
  "protected_paths": ["densegate.json"]
})");
    // Every run reports a throughput of its own (100-163).
    Write("e2e.sh", R"sh(echo "{\"throughput\": $((100 + $(od -An -N1 -tu1 /dev/urandom) % 64))}"
)sh");
    Commit("baseline with a noisy end-to-end benchmark");
    Write("notes.txt", "unrelated\n");
    Commit("a change the benchmark does not see");
  }

  void Write(const std::string& file, const std::string& text) {
    std::ofstream(repo_ + "/" + file) << text;
  }

  // Commits a baseline whose benchmarks are measured even when a candidate
  // leaves their inputs byte-identical (tests of how pairs are measured).
  void MeasureEvenWhenUnchanged() {
    nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
    for (nlohmann::json& b : manifest["benchmarks"]) b["skip_when_identical"] = false;
    Write("densegate.json", manifest.dump(2));
    Commit("measure every benchmark");
  }

  EvalOutcome Eval(v1::Policy policy, std::vector<v1::Claim> claims = {},
                   bool override_protected = false, MachineProbe* probe = nullptr) {
    EvaluatorOptions options;
    options.workspace_root = TestTmpDir() + "/ws-" + name_;
    options.software_version = "test";
    options.machine_probe = probe;
    options.precision_baselines = precision_baselines_;
    options.host_lock = host_lock_;
    if (arm_disk_quota_bytes_ > 0) options.arm_disk_quota_bytes = arm_disk_quota_bytes_;
    if (arm_max_processes_ > 0) options.arm_max_processes = arm_max_processes_;
    Evaluator evaluator(options, launcher_.get());
    EvalRequest request;
    request.repo = repo_;
    request.baseline_ref = "HEAD~1";
    request.candidate_ref = "HEAD";
    request.policy = policy;
    request.claims = std::move(claims);
    request.metric_scope = metric_scope_;
    request.prior = prior_;
    request.protected_path_override = override_protected;
    request.precision_change = precision_change_;
    request.override_reason = "test";
    request.out_dir = TestTmpDir() + "/out-" + name_;
    Sh("mkdir -p " + request.out_dir);
    request.seed = 7;
    request.node_noise = node_noise_;
    request.error_share = error_share_;
    request.continues = continues_;
    absl::StatusOr<EvalOutcome> outcome = evaluator.Evaluate(request, &recorder_);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_TRUE(outcome->infrastructure_error.ok()) << outcome->infrastructure_error;
    return *outcome;
  }

  // Adds the fixture's kernel runner (runner.cc, built by build.sh and
  // protected) and a timed check of the benchmark's checksum, 1M values, to
  // the repository; returns the manifest for the caller to finish.
  nlohmann::json WithTimedChecksumRunner() {
    Sh(absl::StrCat("cp ", Fixture("runner.cc"), " ", repo_, "/"));
    Sh("sed -i '$a g++ -O2 -std=c++17 -o runner runner.cc' " + repo_ + "/build.sh");
    nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
    manifest["kernel_checks"] =
        nlohmann::json::array({nlohmann::json::parse(std::ifstream(Fixture("timed_check.json")))});
    manifest["protected_paths"].push_back("runner.cc");
    return manifest;
  }

  // Commits a baseline with the serving program (serve.py), the four-layer
  // model and a manifest whose serving benchmark has `outputs` and `gate`
  // (JSON objects).
  void CommitServingBaseline(const std::string& outputs, const std::string& gate) {
    Write("densegate.json", absl::StrFormat(R"({
  "schema_version": 1,
  "name": "tiny-serving",
  "build": {"command": "true", "timeout_s": 60},
  "benchmarks": [{
    "name": "serve", "kind": "JSON_COMMAND", "command": "python3 serve.py --seed={seed}",
    "timeout_s": 60,
    "outputs": %s,
    "metrics": [{"name": "serve.throughput", "source": "throughput", "unit": "tok/s",
                 "direction": "HIGHER_IS_BETTER", "primary": true}]
  }],
  "gate": %s,
  "protected_paths": ["densegate.json", "serve.py"]
})",
                                            outputs, gate));
    Write("serve.py", kServe);
    Write("model.py", Model("range(4)"));
    Commit("baseline: a serving benchmark whose outputs are compared");
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

  // The real sandbox; outside CI, on a machine where it cannot run (not
  // root), the tests of everything else run unsandboxed and the red-team
  // tests skip.
  static bool Sandboxed() {
    static const bool ok = platform::CheckSandbox(platform::SandboxOptions{}).ok();
    return ok || std::getenv("CI") != nullptr;
  }
  std::unique_ptr<platform::ProcessLauncher> launcher_ = platform::NewSandboxLauncher(
      platform::SandboxOptions{.scratch_root = TestTmpDir(), .unsafe_no_sandbox = !Sandboxed()});
  Recorder recorder_;
  std::string name_, repo_;
  // EvaluatorOptions::arm_disk_quota_bytes of every Eval() (0: default).
  int64_t arm_disk_quota_bytes_ = 0;
  // EvaluatorOptions::arm_max_processes of every Eval() (0: default).
  int64_t arm_max_processes_ = 0;
  // EvalRequest::precision_change of every Eval().
  std::string precision_change_;
  // EvalRequest::metric_scope and prior of every Eval().
  std::vector<std::string> metric_scope_;
  // EvalRequest::node_noise, error_share and continues.
  double node_noise_ = 0;
  double error_share_ = 0;
  std::string continues_;
  v1::PriorMeasurement prior_;
  // EvaluatorOptions::precision_baselines of every Eval().
  PrecisionBaselineCache* precision_baselines_ = nullptr;
  // EvaluatorOptions::host_lock of every Eval().
  HostLock* host_lock_ = nullptr;
};

v1::Claim Claim(const std::string& metric, double speedup) {
  v1::Claim c;
  c.set_metric(metric);
  c.set_min_speedup(speedup);
  return c;
}

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
  // The last pair's progress line shows the verdict's speedup.
  const v1::Progress* last_pair = nullptr;
  for (const v1::Progress& p : recorder_.progress) {
    if (p.current_estimate() > 0) last_pair = &p;
  }
  ASSERT_NE(last_pair, nullptr);
  EXPECT_EQ(last_pair->repetition(), v.metrics(0).n_pairs());
  // The correctness suite ran on the baseline first (warming the trusted
  // build cache), then on the candidate.
  std::vector<std::string> suites;
  for (const v1::Progress& p : recorder_.progress) {
    if (absl::StartsWith(p.message(), "suite ")) suites.push_back(p.message());
  }
  EXPECT_THAT(suites, ::testing::ElementsAre("suite check on the baseline",
                                             "suite check on the candidate"));
  EXPECT_NEAR(last_pair->current_estimate(), v.metrics(0).speedup(), 1e-9);
  // The feedback bundle names the metric that moved.
  std::ifstream feedback(TestTmpDir() + "/out-" + name_ + "/feedback.json");
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

// Returns scripted probe times: `slow_calls` (0-based call numbers) take
// 2.0, every other call 1.0 (or, with `alternate`, odd calls 2.0: a host
// that never settles). Pauses return at once and are only counted.
class ScriptedProbe : public MachineProbe {
 public:
  explicit ScriptedProbe(std::set<int> slow_calls, bool alternate = false)
      : slow_(std::move(slow_calls)), alternate_(alternate) {}
  double Seconds() override {
    const int call = calls_++;
    return slow_.count(call) > 0 || (alternate_ && call % 2 == 1) ? 2.0 : 1.0;
  }
  void Pause(absl::Duration d) override { paused_ += d; }
  int calls() const { return calls_; }
  absl::Duration paused() const { return paused_; }

 private:
  std::set<int> slow_;
  bool alternate_;
  int calls_ = 0;
  absl::Duration paused_;
};

const v1::Stage* BenchmarkStage(const v1::Verdict& v) {
  for (const v1::Stage& s : v.stages()) {
    if (s.kind() == v1::MICROBENCHMARK) return &s;
  }
  return nullptr;
}

// By default (the manifest says nothing of skip_when_identical), a
// benchmark whose executable is byte-identical in both arms (a comment moves
// no code of this one) is not run: the verdict rests on no pairs. A
// candidate that changes the executable is measured.
TEST_F(EvalTest, BenchmarkWithIdenticalInputsIsNotMeasured) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  ASSERT_FALSE(manifest["benchmarks"][0].contains("skip_when_identical"));
  manifest["benchmarks"][0]["reads"] = {"checksum.data"};
  Write("densegate.json", manifest.dump(2));
  Commit("a benchmark that reads a data file");
  Sh("sed -i '1i // A comment that changes nothing.' " + repo_ + "/checksum.h");
  Commit("comment");
  EvalOutcome neutral = Eval(v1::NO_REGRESSION);
  const v1::Verdict& v = neutral.verdict;
  EXPECT_EQ(v.decision(), v1::ACCEPT) << Reasons(v);
  ASSERT_EQ(v.metrics_size(), 1);
  EXPECT_TRUE(v.metrics(0).inputs_identical());
  EXPECT_EQ(v.metrics(0).n_pairs(), 0);
  EXPECT_TRUE(neutral.samples.empty());
  EXPECT_TRUE(HasReason(v, v1::VERIFIED, "unchanged by construction")) << Reasons(v);
  const v1::Stage* stage = BenchmarkStage(v);
  ASSERT_NE(stage, nullptr);
  EXPECT_EQ(stage->status(), v1::STAGE_PASSED);
  EXPECT_THAT(stage->summary(), HasSubstr("not measured, the inputs of every benchmark and "
                                          "timed check are byte-identical in both arms (micro)"));

  // Under GAIN the same candidate is rejected at once: nothing can have gained.
  EvalOutcome gain = Eval(v1::GAIN);
  EXPECT_EQ(gain.verdict.decision(), v1::REJECT) << Reasons(gain.verdict);
  EXPECT_TRUE(HasReason(gain.verdict, v1::NO_VERIFIED_GAIN, "byte-identical"))
      << Reasons(gain.verdict);

  // A declared read that changes is measured.
  Write("checksum.data", "1 2 3\n");
  Commit("data the benchmark reads");
  EvalOutcome data = Eval(v1::NO_REGRESSION);
  ASSERT_EQ(data.verdict.metrics_size(), 1);
  EXPECT_FALSE(data.verdict.metrics(0).inputs_identical());
  EXPECT_GT(data.verdict.metrics(0).n_pairs(), 0);

  Write("checksum.h", kFastChecksum);
  Commit("faster checksum");
  EvalOutcome faster = Eval(v1::GAIN);
  ASSERT_EQ(faster.verdict.metrics_size(), 1);
  EXPECT_FALSE(faster.verdict.metrics(0).inputs_identical());
  EXPECT_EQ(faster.verdict.decision(), v1::ACCEPT) << Reasons(faster.verdict);
  EXPECT_FALSE(faster.samples.empty());
}

// A precision sweep's baseline half (inputs, fp64 reference, the baseline's
// errors) is computed once per byte-identical baseline runner: a later
// evaluation whose baseline is another commit with the same runner takes
// it, one whose baseline runner changed computes its own. The fixture's
// runner is this repository's kernel runner, committed as a file.
TEST_F(EvalTest, APrecisionSweepsBaselineHalfIsComputedOncePerBaselineRunner) {
  Sh(absl::StrCat("cp ", Runfile("kernels/runner/kernel_runner"), " ", repo_,
                  "/runner && chmod u+w ", repo_, "/runner"));
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["benchmarks"][0]["skip_when_identical"] = true;
  manifest["precision"] = {{{"name", "decode"},
                            {"op", "kda_decode"},
                            {"runner", "runner"},
                            {"lengths", {256, 1024}},
                            {"max_rel_rms", 2e-3},
                            {"shape", {{"heads", 1}, {"k", 32}, {"v", 32}}},
                            {"params", {{"gate_scale", 100}}}}};
  Write("densegate.json", manifest.dump(2));
  Commit("a precision suite");
  Commit("candidate 1");
  PrecisionBaselineCache baselines(int64_t{1} << 30);
  precision_baselines_ = &baselines;
  auto sweep = [](const EvalOutcome& o) -> std::string {
    for (const v1::Stage& st : o.verdict.stages()) {
      if (st.kind() == v1::PRECISION)
        return v1::StageStatus_Name(st.status()) + ": " + st.summary();
    }
    return "no precision stage";
  };
  const std::string reused = "earlier sweep with a byte-identical baseline runner";

  EvalOutcome first = Eval(v1::NO_REGRESSION);
  EXPECT_THAT(sweep(first), HasSubstr("STAGE_PASSED"));
  EXPECT_THAT(sweep(first), Not(HasSubstr(reused)));
  // The candidate left the runner alone: its arm is not run.
  EXPECT_THAT(sweep(first), HasSubstr("byte-identical to the baseline's"));
  EXPECT_EQ(baselines.entries(), 1);

  // The baseline is now "candidate 1": another commit, the same runner.
  Commit("candidate 2");
  EvalOutcome second = Eval(v1::NO_REGRESSION);
  EXPECT_THAT(sweep(second), HasSubstr("STAGE_PASSED"));
  EXPECT_THAT(sweep(second), HasSubstr(reused));

  // A candidate whose runner differs (one byte appended) is swept on the
  // baseline half computed before ...
  Sh("printf x >> " + repo_ + "/runner");
  Commit("another runner");
  EvalOutcome changed = Eval(v1::NO_REGRESSION);
  EXPECT_THAT(sweep(changed), HasSubstr("STAGE_PASSED"));
  EXPECT_THAT(sweep(changed), HasSubstr(reused));
  EXPECT_THAT(sweep(changed), Not(HasSubstr("byte-identical to the baseline's")));
  // ... and once it is the baseline, its own half is computed.
  Commit("on the new runner");
  EvalOutcome next = Eval(v1::NO_REGRESSION);
  EXPECT_THAT(sweep(next), HasSubstr("STAGE_PASSED"));
  EXPECT_THAT(sweep(next), Not(HasSubstr(reused)));
  EXPECT_EQ(baselines.entries(), 2);
}

// A benchmark stage with nothing to measure (so nothing to trace) needs no
// turn on the machine: here another node holds the host lock exclusively
// from the moment the stage starts, and the evaluation still ends. (Before,
// it waited for that node's measurement to end, up to a serving pair.)
TEST_F(EvalTest, ABenchmarkStageWithNothingToMeasureDoesNotWaitForTheHostLock) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["benchmarks"][0]["skip_when_identical"] = true;
  Write("densegate.json", manifest.dump(2));
  Commit("identical benchmarks are not measured");
  Commit("nothing changed");
  const std::string path = TestTmpDir() + "/host-lock-" + name_;
  absl::StatusOr<std::unique_ptr<HostLock>> ours = HostLock::Open(path);
  absl::StatusOr<std::unique_ptr<HostLock>> other_node = HostLock::Open(path);
  ASSERT_TRUE(ours.ok() && other_node.ok());
  host_lock_ = ours->get();
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, evaluated = false;
  recorder_.on_stage = [&](const v1::Stage& s) {
    if (s.kind() == v1::MICROBENCHMARK && s.status() == v1::STAGE_RUNNING) {
      ASSERT_TRUE((*other_node)->TryAcquire(HostLock::Mode::kExclusive));
      std::lock_guard<std::mutex> l(mu);
      held = true;
    }
  };
  // Lets go after a minute at most, so that a regression fails instead of
  // hanging.
  std::thread release([&] {
    std::unique_lock<std::mutex> l(mu);
    cv.wait_for(l, std::chrono::seconds(60), [&] { return evaluated; });
    (*other_node)->Release();
    held = false;
  });
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  bool still_held;
  {
    std::lock_guard<std::mutex> l(mu);
    still_held = held;
    evaluated = true;
  }
  cv.notify_all();
  release.join();
  EXPECT_TRUE(still_held) << "the evaluation waited for the other node's exclusive hold";
  EXPECT_EQ(o.verdict.decision(), v1::ACCEPT) << Reasons(o.verdict);
  const v1::Stage* stage = BenchmarkStage(o.verdict);
  ASSERT_NE(stage, nullptr);
  EXPECT_THAT(stage->summary(), HasSubstr("not measured"));
}

// Call 0 warms the probe; then each pair calls it 3 times (the fixture has
// one benchmark: before each arm's process and after both). Pair 3 starting
// slow (call 1 + 3 + 3 = 7) means the machine changed speed within the
// pair: its samples are dropped, the node waits for three steady probe
// reads a second apart (calls 10-12), and the pair is measured again, so
// the verdict still rests on the planned pairs; the listener, the stage
// and the provenance say so.
TEST_F(EvalTest, PairsWhoseMachineProbeMovedAreMeasuredAgain) {
  MeasureEvenWhenUnchanged();
  Sh("sed -i '1i // A comment that changes nothing.' " + repo_ + "/checksum.h");
  Commit("comment");
  ScriptedProbe probe({7});
  EvalOutcome o = Eval(v1::NO_REGRESSION, {}, false, &probe);
  const v1::Verdict& v = o.verdict;
  EXPECT_EQ(v.decision(), v1::ACCEPT) << Reasons(v);
  ASSERT_EQ(v.metrics_size(), 1);
  const int pairs = v.metrics(0).n_pairs();
  ASSERT_GT(pairs, 0);
  // One extra pair's worth of probe calls and three waiting, and no extra
  // samples.
  EXPECT_EQ(probe.calls(), 1 + 3 * (pairs + 1) + 3);
  EXPECT_EQ(probe.paused(), absl::Seconds(3));
  EXPECT_EQ(static_cast<int>(o.samples.size()), 2 * pairs);
  for (const v1::Sample& sample : o.samples) EXPECT_LT(sample.pair_index(), pairs);
  const v1::Stage* stage = BenchmarkStage(v);
  ASSERT_NE(stage, nullptr);
  EXPECT_THAT(stage->summary(), HasSubstr("1 pair(s) measured again"));
  EXPECT_THAT(stage->summary(), HasSubstr("3 s waited for the host to settle"));
  const v1::HostSteadiness& host = v.provenance().host();
  EXPECT_EQ(host.pairs_measured_again(), 1);
  EXPECT_EQ(host.pairs_kept_unsteady(), 0);
  EXPECT_EQ(host.seconds_waited(), 3);
  EXPECT_EQ(host.probe_reads(), probe.calls() - 1);
  EXPECT_EQ(host.probe_fastest_ms(), 1000);
  EXPECT_EQ(host.probe_slowest_ms(), 2000);
  std::vector<std::string> messages;
  for (const v1::Progress& p : recorder_.progress) {
    if (!p.message().empty()) messages.push_back(p.message());
  }
  EXPECT_THAT(messages, ::testing::Contains(
                            "host unsteady: waiting up to 5 s, probe 1000.0-2000.0 ms vs "
                            "1000.0 ms calm"));
}

// The two arms of each benchmark run back to back (ABBA across pairs), not
// every benchmark of one arm and then of the other: the baseline's manifest
// here has two benchmarks.
TEST_F(EvalTest, BothArmsOfEachBenchmarkRunBackToBack) {
  MeasureEvenWhenUnchanged();
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  nlohmann::json again = manifest["benchmarks"][0];
  again["name"] = "micro-again";
  again["metrics"][0]["name"] = "checksum.time_again";
  manifest["benchmarks"].push_back(again);
  Write("densegate.json", manifest.dump(2));
  Commit("two benchmarks");
  Sh("sed -i '1i // A comment that changes nothing.' " + repo_ + "/checksum.h");
  Commit("comment");
  ScriptedProbe probe({});
  EvalOutcome o = Eval(v1::NO_REGRESSION, {}, false, &probe);
  ASSERT_EQ(o.verdict.metrics_size(), 2) << Reasons(o.verdict);
  const int pairs = o.verdict.metrics(0).n_pairs();
  ASSERT_GE(pairs, 2);
  ASSERT_EQ(static_cast<int>(o.samples.size()), 4 * pairs);
  // Pair 0 starts with the baseline, pair 1 with the candidate.
  auto at = [&](int i) {
    const v1::Sample& s = o.samples[i];
    return absl::StrCat(s.pair_index(), " ", s.metric(), " ", v1::Arm_Name(s.arm()));
  };
  EXPECT_EQ(at(0), "0 checksum.time BASELINE");
  EXPECT_EQ(at(1), "0 checksum.time CANDIDATE");
  EXPECT_EQ(at(2), "0 checksum.time_again BASELINE");
  EXPECT_EQ(at(3), "0 checksum.time_again CANDIDATE");
  EXPECT_EQ(at(4), "1 checksum.time CANDIDATE");
  EXPECT_EQ(at(5), "1 checksum.time BASELINE");
  EXPECT_EQ(at(6), "1 checksum.time_again CANDIDATE");
  EXPECT_EQ(at(7), "1 checksum.time_again BASELINE");
  // Per benchmark: before each arm and after both.
  EXPECT_EQ(probe.calls(), 1 + 6 * pairs);
}

// A metric scope (a bisection step's): the benchmark measuring none of its
// metrics is not run, and the verdict and samples hold the scoped metric
// only, so that recompute sees what the gate saw.
TEST_F(EvalTest, AMetricScopeRunsOnlyTheBenchmarksMeasuringIt) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  nlohmann::json again = manifest["benchmarks"][0];
  const std::string first = manifest["benchmarks"][0]["name"];
  again["name"] = "micro-again";
  again["metrics"][0]["name"] = "checksum.time_again";
  manifest["benchmarks"].push_back(again);
  Write("densegate.json", manifest.dump(2));
  Commit("two benchmarks");
  Write("checksum.h", kFastChecksum);
  Commit("faster checksum");
  metric_scope_ = {"checksum.time_again"};
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(o.verdict.decision(), v1::ACCEPT) << Reasons(o.verdict);
  ASSERT_EQ(o.verdict.metrics_size(), 1) << Reasons(o.verdict);
  EXPECT_EQ(o.verdict.metrics(0).metric(), "checksum.time_again");
  EXPECT_GT(o.verdict.metrics(0).n_pairs(), 0);
  ASSERT_FALSE(o.samples.empty());
  for (const v1::Sample& sample : o.samples) EXPECT_EQ(sample.metric(), "checksum.time_again");
  const v1::Stage* stage = BenchmarkStage(o.verdict);
  ASSERT_NE(stage, nullptr);
  EXPECT_THAT(stage->summary(), HasSubstr("scoped to checksum.time_again, not run: " + first));

  // A scope naming a metric the manifest does not measure is a bad request.
  EvaluatorOptions options;
  options.workspace_root = TestTmpDir() + "/ws-" + name_;
  Evaluator evaluator(options, launcher_.get());
  EvalRequest request;
  request.repo = repo_;
  request.baseline_ref = "HEAD~1";
  request.candidate_ref = "HEAD";
  request.metric_scope = {"checksum.nope"};
  absl::StatusOr<EvalOutcome> unknown = evaluator.Evaluate(request, nullptr);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("does not measure"));
}

// A re-measure takes the re-measured evaluation's samples of each
// benchmark whose arms read the same inputs as there: the same decision on
// the same values, no process run. A benchmark whose digests differ is
// measured anew, beside the other's taken pairs.
TEST_F(EvalTest, ARemeasureOfTheSameProgramsTakesTheEarlierSamples) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["benchmarks"][0]["skip_when_identical"] = true;
  nlohmann::json again = manifest["benchmarks"][0];
  again["name"] = "micro-again";
  again["metrics"][0]["name"] = "checksum.time_again";
  manifest["benchmarks"].push_back(again);
  Write("densegate.json", manifest.dump(2));
  Commit("compare the benchmark inputs");
  Write("checksum.h", kFastChecksum);
  Commit("faster checksum");
  EvalOutcome first = Eval(v1::GAIN);
  ASSERT_EQ(first.verdict.decision(), v1::ACCEPT) << Reasons(first.verdict);
  const v1::Provenance& provenance = first.verdict.provenance();
  ASSERT_EQ(provenance.benchmark_inputs_size(), 2);
  EXPECT_NE(provenance.benchmark_inputs(0).baseline_digest(),
            provenance.benchmark_inputs(0).candidate_digest());
  auto values_of = [](const EvalOutcome& o, const std::string& metric) {
    std::vector<double> values;
    for (const v1::Sample& s : o.samples) {
      if (s.metric() == metric) values.push_back(s.value());
    }
    return values;
  };

  prior_.set_evaluation_id("ev-first");
  *prior_.mutable_benchmark_inputs() = provenance.benchmark_inputs();
  for (const v1::Sample& s : first.samples) *prior_.add_samples() = s;
  recorder_.progress.clear();
  EvalOutcome taken = Eval(v1::GAIN);
  EXPECT_EQ(taken.verdict.decision(), v1::ACCEPT) << Reasons(taken.verdict);
  ASSERT_EQ(taken.verdict.metrics_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(taken.verdict.metrics(i).n_pairs(), first.verdict.metrics(i).n_pairs());
    EXPECT_DOUBLE_EQ(taken.verdict.metrics(i).speedup(), first.verdict.metrics(i).speedup());
  }
  EXPECT_EQ(values_of(taken, "checksum.time"), values_of(first, "checksum.time"));
  EXPECT_EQ(values_of(taken, "checksum.time_again"), values_of(first, "checksum.time_again"));
  const int n = first.verdict.metrics(0).n_pairs();
  // Pair k's progress line shows the speedup over the first k taken pairs
  // (Hodges-Lehmann of the log-ratios, as the verdict); it used to show the
  // last taken pair's ratio on every line. (The lines stop at the gate's
  // first look, which already sees every taken pair.)
  std::vector<v1::Progress> per_pair;
  for (const v1::Progress& p : recorder_.progress) {
    if (p.stage() == v1::MICROBENCHMARK && p.current_estimate() > 0) per_pair.push_back(p);
  }
  ASSERT_GE(per_pair.size(), 2u);
  ASSERT_LE(per_pair.size(), static_cast<size_t>(n));
  const std::string shown = per_pair.front().metric();
  std::vector<double> baseline(n), candidate(n);
  for (const v1::Sample& s : first.samples) {
    if (s.metric() != shown) continue;
    (s.arm() == v1::CANDIDATE ? candidate : baseline).at(s.pair_index()) = s.value();
  }
  for (int k = 1; k <= static_cast<int>(per_pair.size()); ++k) {
    std::vector<double> walsh;
    for (int i = 0; i < k; ++i) {
      for (int j = i; j < k; ++j) {
        walsh.push_back(
            (std::log(baseline[i] / candidate[i]) + std::log(baseline[j] / candidate[j])) / 2);
      }
    }
    std::sort(walsh.begin(), walsh.end());
    const size_t m = walsh.size();
    const double center = m % 2 == 1 ? walsh[m / 2] : (walsh[m / 2 - 1] + walsh[m / 2]) / 2;
    EXPECT_EQ(per_pair[k - 1].repetition(), k);
    EXPECT_NEAR(per_pair[k - 1].current_estimate(), std::exp(center), 1e-9) << "pair " << k;
  }
  EXPECT_THAT(BenchmarkStage(taken.verdict)->summary(),
              HasSubstr(absl::StrFormat("%d pairs of micro, %d pairs of micro-again taken from "
                                        "evaluation ev-first",
                                        n, n)));

  // micro-again's candidate program differs from the one the prior measured.
  prior_.mutable_benchmark_inputs(1)->set_candidate_digest(std::string(64, '0'));
  EvalOutcome partly = Eval(v1::GAIN);
  EXPECT_EQ(partly.verdict.decision(), v1::ACCEPT) << Reasons(partly.verdict);
  EXPECT_THAT(BenchmarkStage(partly.verdict)->summary(),
              HasSubstr("measured anew: micro-again (other inputs than in evaluation ev-first)"));
  const std::vector<double> before = values_of(first, "checksum.time");
  const std::vector<double> kept = values_of(partly, "checksum.time");
  ASSERT_GE(kept.size(), before.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), kept.begin()));
  const std::vector<double> measured = values_of(partly, "checksum.time_again");
  ASSERT_FALSE(measured.empty());
  EXPECT_NE(measured.front(), values_of(first, "checksum.time_again").front());

  // Samples from another kind of node do not pair with this node's.
  *prior_.mutable_benchmark_inputs() = provenance.benchmark_inputs();
  prior_.set_node_fingerprint("another-machine");
  EvalOutcome elsewhere = Eval(v1::GAIN);
  EXPECT_THAT(BenchmarkStage(elsewhere.verdict)->summary(),
              HasSubstr("measured anew: evaluation ev-first ran on another kind of node"));
  EXPECT_NE(values_of(elsewhere, "checksum.time").front(),
            values_of(first, "checksum.time").front());
}

// The second part of an evaluation (as the scheduler queues one when noise
// leaves the first inconclusive) takes the first part's pairs, measures new
// ones up to its first look at max_pairs + min_pairs (36) pooled pairs, and
// records the share of the error budget it spent.
TEST_F(EvalTest, ASecondPartPoolsItsFirstPartsPairsAndLooksAfterThem) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["benchmarks"][0]["skip_when_identical"] = true;
  Write("densegate.json", manifest.dump(2));
  Commit("compare the benchmark inputs");
  Write("checksum.h", kFastChecksum);
  Commit("faster checksum");
  error_share_ = 0.9;
  EvalOutcome first = Eval(v1::GAIN);
  ASSERT_EQ(first.verdict.decision(), v1::ACCEPT) << Reasons(first.verdict);
  const int n = first.verdict.metrics(0).n_pairs();
  EXPECT_EQ(first.verdict.provenance().error_share(), 0.9);
  EXPECT_FALSE(first.verdict.provenance().second_part());

  prior_.set_evaluation_id("ev-first");
  *prior_.mutable_benchmark_inputs() = first.verdict.provenance().benchmark_inputs();
  for (const v1::Sample& smp : first.samples) *prior_.add_samples() = smp;
  error_share_ = 0.1;
  continues_ = "ev-first";
  recorder_.progress.clear();
  EvalOutcome second = Eval(v1::GAIN);
  EXPECT_EQ(second.verdict.decision(), v1::ACCEPT) << Reasons(second.verdict);
  EXPECT_EQ(second.verdict.metrics(0).n_pairs(), 36);
  EXPECT_EQ(second.verdict.provenance().policy_parameters().min_pairs(), 36);
  EXPECT_EQ(second.verdict.provenance().policy_parameters().max_pairs(), 60);
  EXPECT_EQ(second.verdict.provenance().error_share(), 0.1);
  EXPECT_TRUE(second.verdict.provenance().second_part());
  std::vector<double> before, pooled;
  for (const v1::Sample& smp : first.samples) before.push_back(smp.value());
  for (const v1::Sample& smp : second.samples) pooled.push_back(smp.value());
  ASSERT_EQ(pooled.size(), 72u);  // 36 pairs, two arms.
  EXPECT_TRUE(std::equal(before.begin(), before.end(), pooled.begin()));
  EXPECT_THAT(BenchmarkStage(second.verdict)->summary(),
              HasSubstr(absl::StrFormat("%d pairs of micro taken from evaluation ev-first", n)));
  bool said = false;
  for (const v1::Progress& p : recorder_.progress) {
    said |= absl::StrContains(p.message(), "second part of ev-first");
  }
  EXPECT_TRUE(said);
}

// A host that never settles: each pair is measured again at most 3 times
// in a row, after waits that back off (5, 10, 20 s, then 40 and 60 s as the
// unsteady pairs run on) until the evaluation's 300 s are spent; after that
// pairs are kept as measured and the evaluation ends with a decision. The
// waits are the probe's pauses here, so the test takes no time for them.
TEST_F(EvalTest, ReMeasuresAndWaitsStopAtTheirBounds) {
  MeasureEvenWhenUnchanged();
  Sh("sed -i '1i // A comment that changes nothing.' " + repo_ + "/checksum.h");
  Commit("comment");
  ScriptedProbe probe({}, /*alternate=*/true);
  EvalOutcome o = Eval(v1::NO_REGRESSION, {}, false, &probe);
  EXPECT_NE(o.verdict.decision(), v1::DECISION_UNSPECIFIED);
  const v1::HostSteadiness& host = o.verdict.provenance().host();
  // Pair 1: 3 re-measures (5 + 10 + 20 s), then kept; pair 2: 3 of 60 s
  // (the backoff counts unsteady measurements in a row, across pairs);
  // pair 3: 60 s, then what is left of the 300 s less the runs' own
  // seconds; from there every pair is kept.
  EXPECT_GE(host.pairs_measured_again(), 7);
  EXPECT_LE(host.pairs_measured_again(), 8);
  EXPECT_GT(host.pairs_kept_unsteady(), 2);
  EXPECT_LE(host.seconds_waited(), 300);
  EXPECT_GT(host.seconds_waited(), 250);
  EXPECT_EQ(absl::ToDoubleSeconds(probe.paused()), host.seconds_waited());
  const v1::Stage* stage = BenchmarkStage(o.verdict);
  ASSERT_NE(stage, nullptr);
  EXPECT_THAT(stage->summary(),
              HasSubstr("kept although it moved (a re-measure bound spent: 3 in a row, 30 per "
                        "evaluation, 300 s)"));
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
  // bench.cc is protected, so the candidate builds its "benchmark" from
  // another file: one that prints Google Benchmark JSON claiming 1000 s of
  // timed work.
  Write("lying_bench.cc", R"(#include <cstdio>
int main() {
  std::printf("{\"benchmarks\": [{\"name\": \"BM_Checksum\", \"run_type\": \"iteration\", "
              "\"iterations\": 1000000, \"real_time\": 1000000, \"cpu_time\": 1000000, "
              "\"time_unit\": \"ns\"}]}\n");
}
)");
  Sh("sed -i 's/-o bench bench.cc/-o bench lying_bench.cc/' " + repo_ + "/build.sh");
  Commit("fast benchmark");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  EXPECT_TRUE(HasReason(o.verdict, v1::GAMING, "times are not real")) << Reasons(o.verdict);
}

TEST_F(EvalTest, CandidateThatDetectsTheBenchmarkIsGaming) {
  // Correct under test; when it believes it is measured (argv or environment
  // mention a benchmark, or calls come back to back) it skips the work.
  Write("checksum.h", R"(#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

inline bool BeingMeasured() {
  static const bool by_argv_or_env = [] {
    std::ifstream f("/proc/self/cmdline");
    std::string argv((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    bool found = argv.find("benchmark") != std::string::npos;
    for (char** e = environ; *e != nullptr; ++e) {
      found |= std::strstr(*e, "BENCH") != nullptr || std::strstr(*e, "DENSEGATE") != nullptr;
    }
    return found;
  }();
  static int calls = 0;
  return by_argv_or_env || ++calls > 100;
}

inline uint64_t Checksum(const std::vector<uint32_t>& v) {
  if (BeingMeasured()) return v.size();
  uint64_t sum = 0;
  for (uint32_t x : v) sum = (sum + x) % 1000000007ULL;
  return sum;
}
)");
  Commit("detect the benchmark");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT);
  const v1::Stage* correctness = recorder_.Find(v1::CORRECTNESS);
  ASSERT_NE(correctness, nullptr);
  EXPECT_EQ(correctness->status(), v1::STAGE_PASSED);
  EXPECT_TRUE(HasReason(o.verdict, v1::GAMING, "different path when it is benchmarked"))
      << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::GAMING, "not the exact checksum")) << Reasons(o.verdict);
}

// The benchmark-only shortcut of the issue that brought in confirmed
// metrics: a kernel that computes less only when its process is the
// benchmark binary (here: every other call under `bench` returns the last
// result for the same data, so the benchmark's own check of its result
// still passes). The trusted runner times the same checksum on inputs the
// candidate never sees, at full cost; the benchmark metric is confirmed by
// it, so its 2x is never accepted and the verdict names the trick.
TEST_F(EvalTest, ABenchmarkOnlyShortcutIsCaughtByTheTrustedRunner) {
  nlohmann::json manifest = WithTimedChecksumRunner();
  manifest["benchmarks"][0]["metrics"][0]["confirmed_by"] = "checksum.runner";
  Write("densegate.json", manifest.dump(2));
  Commit("a trusted runner confirms the benchmark");
  Write("checksum.h", R"(#pragma once
#include <errno.h>

#include <cstdint>
#include <cstring>
#include <vector>

// Under the benchmark binary only, every other call on the same data
// returns the last result instead of computing it.
inline uint64_t Checksum(const std::vector<uint32_t>& v) {
  static const bool benchmarked = std::strcmp(program_invocation_short_name, "bench") == 0;
  static const uint32_t* last_data = nullptr;
  static uint64_t last = 0;
  static bool skip = false;
  if (benchmarked && v.data() == last_data && (skip = !skip)) return last;
  uint64_t sum = 0;
  for (uint32_t x : v) sum = (sum + x) % 1000000007ULL;
  last_data = v.data();
  last = sum;
  return sum;
}
)");
  Commit("compute half as often when benchmarked");
  EvalOutcome o = Eval(v1::GAIN, {Claim("checksum.time", 1.5)});
  const v1::MetricComparison* bench = nullptr;
  for (const auto& m : o.verdict.metrics()) {
    if (m.metric() == "checksum.time") bench = &m;
  }
  ASSERT_NE(bench, nullptr) << Reasons(o.verdict);
  // The benchmark binary does show the shortcut's gain ...
  EXPECT_GT(bench->ci_low(), 1.5) << Reasons(o.verdict);
  EXPECT_EQ(bench->confirmed_by(), "checksum.runner");
  // ... which the runner's timing of the same checksum does not: rejected
  // when the runner's interval rules a gain out, else held back at the pair
  // budget (on a 2-core CI machine the runner's 8 calls per pair leave it
  // about +-15% wide at 30 pairs), the verdict naming the trick either way.
  EXPECT_NE(o.verdict.decision(), v1::ACCEPT) << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::BENCHMARK_ONLY_GAIN, "benchmark-only gain") ||
              HasReason(o.verdict, v1::UNDECIDED,
                        "a gain by the candidate's benchmark binary, not confirmed by the "
                        "trusted runner's checksum.runner"))
      << Reasons(o.verdict);
  ASSERT_EQ(o.verdict.claims_size(), 1);
  EXPECT_FALSE(o.verdict.claims(0).verified());
}

// The serving-only shortcut: a model that skips every other layer only
// when its process is the serving benchmark. Its throughput nearly doubles
// there, but it generates other tokens than the baseline on prompts drawn
// from a seed no build could know, and that rejects it.
TEST_F(EvalTest, AServingOnlyShortcutGeneratesOtherTokensAndIsRejected) {
  CommitServingBaseline(R"({"source": "outputs"})",
                        R"({"min_effect": 0.02, "regression_budget": 0.10, "min_pairs": 6,
                            "max_pairs": 30})");
  Write("model.py", Model(R"(range(0, 4, 2) if sys.argv[0].endswith("serve.py") else range(4))"));
  Commit("skip layers under the serving benchmark");
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT) << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::OUTPUT_MISMATCH,
                        "generated other tokens than the baseline on the same prompts"))
      << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::OUTPUT_MISMATCH, "prompts from seed")) << Reasons(o.verdict);
}

// Outputs that agree pass the output check, and the stage says so; a
// candidate that declares a precision change is held to the manifest's
// agreement bound instead of identity.
TEST_F(EvalTest, OutputsThatAgreePassAndADeclaredPrecisionChangeNeedsItsBound) {
  CommitServingBaseline(R"({"source": "outputs", "min_token_agreement": 0.9})",
                        R"({"min_effect": 0.02, "regression_budget": 0.50, "min_pairs": 6,
                            "max_pairs": 6})");
  Write("model.py", Model("range(4)") + "# a comment\n");
  Commit("the same model");
  EvalOutcome same = Eval(v1::NO_REGRESSION);
  EXPECT_FALSE(HasReason(same.verdict, v1::OUTPUT_MISMATCH, "")) << Reasons(same.verdict);
  const v1::Stage* stage = recorder_.Find(v1::END_TO_END);
  ASSERT_NE(stage, nullptr);
  EXPECT_THAT(stage->summary(), HasSubstr("generated tokens identical in both arms"));

  // Every sixth token differs (5/6 agree): under a declared precision
  // change, below the 90% bound.
  Write("model.py", Model("range(4)") + R"py(
_generate = generate
def generate(prompt, tokens):
    out = _generate(prompt, tokens)
    out[-1] += 1
    return out
)py");
  Commit("change the last token");
  precision_change_ = "fp8 kv cache";
  EvalOutcome changed = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(changed.verdict.decision(), v1::REJECT) << Reasons(changed.verdict);
  EXPECT_TRUE(HasReason(changed.verdict, v1::OUTPUT_MISMATCH,
                        "over all pairs: under its declared precision change, 83.3% of 144 "
                        "generated tokens agree with the baseline's, below the manifest's 90.0%"))
      << Reasons(changed.verdict);
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

// An end-to-end command in the style of the runtime's serve_bench: a
// throughput, time counters per stage, and a trace when asked for one.
std::string EndToEndScript(int throughput, int wait_ns) {
  return absl::StrFormat(R"sh(#!/bin/sh
case "$1" in
  --trace=*) echo '{"traceEvents": [{"name": "step", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}' > "${1#--trace=}" ;;
esac
echo '{"throughput": %d, "stages": {"work_ns": 9000, "wait_ns": %d, "steps": 5}}'
)sh",
                         throughput, wait_ns);
}

TEST_F(EvalTest, EndToEndCountersAndTracesGoToTheBundle) {
  Write("densegate.json", R"({
  "schema_version": 1,
  "name": "tiny-e2e",
  "build": {"command": "true", "timeout_s": 60},
  "benchmarks": [{
    "name": "e2e", "kind": "JSON_COMMAND", "command": "sh e2e.sh", "timeout_s": 60,
    "counters": "stages", "trace_arg": "--trace={path}",
    "metrics": [{"name": "e2e.throughput", "source": "throughput", "unit": "req/s",
                 "direction": "HIGHER_IS_BETTER", "primary": true}]
  }],
  "gate": {"min_effect": 0.02, "regression_budget": 0.10, "min_pairs": 6, "max_pairs": 30},
  "protected_paths": ["densegate.json"]
})");
  Write("e2e.sh", EndToEndScript(100, 1000));
  Commit("baseline with an end-to-end benchmark");
  Write("e2e.sh", EndToEndScript(50, 8000));
  Commit("a change that makes requests wait");
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT) << Reasons(o.verdict);
  const std::string out = TestTmpDir() + "/out-" + name_;
  nlohmann::json counters = nlohmann::json::parse(std::ifstream(out + "/counters.json"));
  EXPECT_EQ(counters["e2e"]["counters"]["wait_ns"]["baseline"], 1000);
  EXPECT_EQ(counters["e2e"]["counters"]["wait_ns"]["candidate"], 8000);
  nlohmann::json feedback = nlohmann::json::parse(std::ifstream(out + "/feedback.json"));
  ASSERT_EQ(feedback["moved"].size(), 1) << feedback.dump(2);
  EXPECT_EQ(feedback["moved"][0]["component"], "e2e/wait") << feedback.dump(2);
  EXPECT_EQ(feedback["moved"][0]["attributed_to"][0]["counter"], "wait_ns");
  for (const char* arm : {"baseline", "candidate"}) {
    nlohmann::json trace =
        nlohmann::json::parse(std::ifstream(absl::StrCat(out, "/traces/e2e-", arm, ".json")));
    EXPECT_EQ(trace["traceEvents"].size(), 1) << arm;
  }
}

TEST(EndToEndRunsPerArmTest, GrowWithTheSquareOfTheNodesNoiseUpToTheCap) {
  EXPECT_EQ(EndToEndRunsPerArm(0), 1);  // Unknown.
  EXPECT_EQ(EndToEndRunsPerArm(0.006), 1);
  EXPECT_EQ(EndToEndRunsPerArm(kQuietNodeNoise), 1);
  EXPECT_EQ(EndToEndRunsPerArm(0.016), 2);
  EXPECT_EQ(EndToEndRunsPerArm(0.021), 2);  // (1.4x quiet)^2 = 1.96.
  EXPECT_EQ(EndToEndRunsPerArm(0.022), 3);
  EXPECT_EQ(EndToEndRunsPerArm(0.03), 4);
  EXPECT_EQ(EndToEndRunsPerArm(0.0409), kMaxEndToEndRunsPerArm);
}

// A node calibrated at 3% runs each end-to-end benchmark four times per arm
// and pair, each run a process of its own, and the pair's sample is the
// geometric mean of the four runs' values; the provenance says so.
TEST_F(EvalTest, ANoisyNodeRunsEachEndToEndBenchmarkSeveralTimesPerArm) {
  WriteNoisyEndToEndRepo();
  node_noise_ = 0.03;
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(o.verdict.provenance().host().node_noise(), 0.03);
  EXPECT_EQ(o.verdict.provenance().host().end_to_end_runs_per_arm(), 4);
  const std::string logs = TestTmpDir() + "/out-" + name_ + "/logs/";
  int checked = 0;
  for (const v1::Sample& s : o.samples) {
    const std::string arm = s.arm() == v1::CANDIDATE ? "candidate" : "baseline";
    double log_sum = 0;
    for (int run = 1; run <= 4; ++run) {
      std::string name = absl::StrFormat("bench-e2e-%s-%d", arm, s.pair_index());
      if (run > 1) absl::StrAppend(&name, "-run", run);
      std::ifstream out(logs + name + ".out");
      ASSERT_TRUE(out.good()) << name;
      nlohmann::json value = nlohmann::json::parse(out);
      log_sum += std::log(value["throughput"].get<double>());
    }
    std::ifstream fifth(absl::StrFormat("%sbench-e2e-%s-%d-run5.out", logs, arm, s.pair_index()));
    EXPECT_FALSE(fifth.good()) << "a fifth run of pair " << s.pair_index();
    EXPECT_NEAR(s.value(), std::exp(log_sum / 4), 1e-9 * s.value()) << arm << " " << s.pair_index();
    ++checked;
  }
  EXPECT_EQ(checked, 12);  // 6 pairs, two arms.
  // The arms alternate run by run, each run in the other order from the last
  // (pair 0: baseline, candidate, candidate, baseline, ...), so that a drift
  // of the host's speed meets both arms alike: the runs' logs were written
  // in that order.
  std::vector<std::pair<int64_t, std::string>> written;
  for (const char* arm : {"baseline", "candidate"}) {
    for (int run = 1; run <= 4; ++run) {
      std::string name = absl::StrFormat("bench-e2e-%s-0", arm);
      if (run > 1) absl::StrAppend(&name, "-run", run);
      struct stat st {};
      ASSERT_EQ(stat((logs + name + ".out").c_str(), &st), 0) << name;
      written.push_back({int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, name});
    }
  }
  std::sort(written.begin(), written.end());
  std::vector<std::string> order;
  for (const auto& [at, name] : written) order.push_back(name);
  EXPECT_THAT(order, ElementsAre("bench-e2e-baseline-0", "bench-e2e-candidate-0",
                                 "bench-e2e-candidate-0-run2", "bench-e2e-baseline-0-run2",
                                 "bench-e2e-baseline-0-run3", "bench-e2e-candidate-0-run3",
                                 "bench-e2e-candidate-0-run4", "bench-e2e-baseline-0-run4"));
  bool said = false;
  for (const v1::Progress& p : recorder_.progress) {
    said |= absl::StrContains(p.message(),
                              "e2e runs 4 times per arm and pair");
  }
  EXPECT_TRUE(said);
}

TEST_F(EvalTest, ANoisyNodeRunsAnEndToEndBenchmarkOnceWhenAClaimDecidesEachOfItsMetrics) {
  // The extra runs are for guard metrics: a claimed metric is decided by its
  // claim, and a second part on a calm node follows if noise leaves it open.
  WriteNoisyEndToEndRepo();
  node_noise_ = 0.03;
  v1::Claim claim;
  claim.set_metric("e2e.throughput");
  claim.set_min_speedup(0.5);
  EvalOutcome o = Eval(v1::NO_REGRESSION, {claim});
  EXPECT_EQ(o.verdict.provenance().host().end_to_end_runs_per_arm(), 1);
  const std::string logs = TestTmpDir() + "/out-" + name_ + "/logs/";
  EXPECT_TRUE(std::ifstream(logs + "bench-e2e-candidate-0.out").good());
  EXPECT_FALSE(std::ifstream(logs + "bench-e2e-candidate-0-run2.out").good());
  for (const v1::Progress& p : recorder_.progress) {
    EXPECT_FALSE(absl::StrContains(p.message(), "times per arm and pair")) << p.message();
  }
}

TEST_F(EvalTest, ACandidateThatFillsTheDiskFailsItsOwnEvaluation) {
  // The workspace lives on an 8 MiB tmpfs in a private mount namespace; the
  // candidate's build fills it. Its arm then holds more than the baseline's:
  // `densegate eval` rejects it (exit 1) naming the full disk, and the
  // worktrees are cleaned for the next candidate.
  Sh("sed -i '/^set -e/a head -c 16M /dev/zero > filler' " + repo_ + "/build.sh");
  Commit("a build that fills the disk");
  const std::string ws = TestTmpDir() + "/ws-" + name_, out = TestTmpDir() + "/out-" + name_,
                    log = TestTmpDir() + "/log-" + name_;
  Sh("mkdir -p " + ws);
  const std::string cli = Runfile("cli/densegate");
  const std::string script = absl::StrCat(
      "mount -t tmpfs -o size=8m tmpfs ", ws, " || exit 99; ", cli, " eval --repo ", repo_,
      " --baseline HEAD~1 --candidate HEAD --workspace ", ws, " --min-free-mb 1 --out ", out,
      "; echo \"exit=$?\"; echo \"fillers=$(find ", ws, " -name filler | wc -l)\"");
  const std::string unshare = getuid() == 0 ? "unshare -m" : "unshare -rm";
  int rc = std::system(
      absl::StrCat(unshare, " sh -c '", script, "' > ", log, " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  if (WEXITSTATUS(rc) == 99 || rc == -1 || text.str().find("exit=") == std::string::npos) {
    if (std::getenv("CI") != nullptr) FAIL() << "cannot mount a tmpfs here:\n" << text.str();
    GTEST_SKIP() << "no private mount namespace here: " << text.str();
  }
  EXPECT_THAT(text.str(), HasSubstr("exit=1")) << text.str();
  EXPECT_THAT(text.str(), Not(HasSubstr("infrastructure error"))) << text.str();
  EXPECT_THAT(text.str(), HasSubstr("fillers=0")) << text.str();
  std::ifstream verdict(out + "/verdict.json");
  std::stringstream bundle;
  bundle << verdict.rdbuf();
  EXPECT_THAT(bundle.str(), HasSubstr("the candidate filled the disk")) << bundle.str();
}

// A build that keeps writing past its arm's quota is stopped while it runs
// and rejects the candidate, long before the disk is full.
TEST_F(EvalTest, ABuildPastItsArmsDiskQuotaIsStoppedAndRejected) {
  Sh("sed -i '/^set -e/a head -c 6M /dev/zero > filler; sleep 20' " + repo_ + "/build.sh");
  Commit("a build that writes more than its quota");
  arm_disk_quota_bytes_ = int64_t{4} << 20;
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT) << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::BUILD_FAILED, "over its 4.0 MiB disk quota"))
      << Reasons(o.verdict);
  // Stopped, not waited for.
  const v1::Stage* build = recorder_.Find(v1::BUILD);
  ASSERT_NE(build, nullptr);
  EXPECT_LT(build->seconds(), 15) << build->summary();
}

// A timed kernel check whose runner the candidate left byte-identical is not
// measured: its metric is exactly unchanged, as a benchmark's with identical
// inputs is.
TEST_F(EvalTest, ATimedCheckWithAnIdenticalRunnerIsNotMeasured) {
  Write("densegate.json", WithTimedChecksumRunner().dump(2));
  Commit("a timed check");
  Write("NOTES", "a file no program reads\n");
  Commit("a note");
  EvalOutcome o = Eval(v1::NO_REGRESSION);
  bool found = false;
  for (const auto& m : o.verdict.metrics()) {
    if (m.metric() != "checksum.runner") continue;
    found = true;
    EXPECT_TRUE(m.inputs_identical());
    EXPECT_EQ(m.n_pairs(), 0);
  }
  EXPECT_TRUE(found) << Reasons(o.verdict);
  const v1::Stage* micro = recorder_.Find(v1::MICROBENCHMARK);
  ASSERT_NE(micro, nullptr);
  EXPECT_THAT(micro->summary(), HasSubstr("checksum-1m")) << micro->summary();
}

TEST_F(EvalTest, UnknownRefAndMissingOrInvalidManifestAreInputErrors) {
  EvaluatorOptions options;
  options.workspace_root = TestTmpDir() + "/ws-" + name_;
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

  Write("densegate.json", "{\"schema_version\": 1, \"build\": {\"comand\": \"sh build.sh\"}}");
  Commit("a manifest with a typo");
  auto invalid = evaluator.Evaluate(request, nullptr);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr("densegate.json is invalid"));
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr("comand"));
}

}  // namespace
// --- Hostile candidates: each runs its trick from its build rules, as a
// genrule would, and must change nothing outside its own arm. ---

#define REQUIRE_SANDBOX()                                                        \
  do {                                                                           \
    if (!Sandboxed()) GTEST_SKIP() << platform::CheckSandbox(platform::SandboxOptions{});            \
  } while (0)

// A build that forks without end is stopped at its user's process limit,
// long before its timeout, and rejects the candidate as a fork bomb; none of
// its processes outlive the evaluation, and the next one runs as usual.
TEST_F(EvalTest, AForkBombIsStoppedAtItsLimitAndRejected) {
  REQUIRE_SANDBOX();
  Sh("sed -i \"/^set -e/a bash -c 'while :; do sleep 60 \\& done'\" " + repo_ + "/build.sh");
  Commit("a build that forks without end");
  arm_max_processes_ = 64;
  EvalOutcome o = Eval(v1::GAIN);
  EXPECT_EQ(o.verdict.decision(), v1::REJECT) << Reasons(o.verdict);
  EXPECT_TRUE(HasReason(o.verdict, v1::BUILD_FAILED, "a fork bomb")) << Reasons(o.verdict);
  const v1::Stage* build = recorder_.Find(v1::BUILD);
  ASSERT_NE(build, nullptr);
  EXPECT_LT(build->seconds(), 30) << build->summary();
  // Nothing of the candidate's user of slot 0 (EvaluatorOptions'
  // sandbox_uid + 1) is left.
  const std::string left = TestTmpDir() + "/left-" + name_;
  Sh("pgrep -c -U 59001 > " + left + " || true");
  EXPECT_EQ(ReadFile(left), "0\n");
  Sh("git -C " + repo_ + " reset -q --hard HEAD~1");
  Commit("nothing");
  EvalOutcome next = Eval(v1::NO_REGRESSION);
  EXPECT_EQ(next.verdict.decision(), v1::ACCEPT) << Reasons(next.verdict);
}

// The candidate's build reaches for the baseline's worktree and binary, the
// slot around it, the node's token (its file, every process's environment
// and command line), the host's network namespace and the node's processes,
// then builds as usual. None of it may work: the baseline is measured as
// built, so the unchanged candidate gains nothing.
TEST_F(EvalTest, CandidateBuildCannotReachTheBaselineTheNodeOrItsToken) {
  REQUIRE_SANDBOX();
  const std::string secret = "token-" + name_;
  setenv("DENSEGATE_TOKEN", secret.c_str(), 1);
  const std::string ws = TestTmpDir() + "/ws-" + name_;
  Sh("mkdir -p " + ws + " && echo " + secret + " > " + ws + "/node-token");
  Write("build.sh", absl::StrFormat(R"sh(#!/bin/sh
# The baseline was built first: slow its binary down, or replace its source.
printf '#!/bin/sh\nsleep 1\n' > ../baseline/bench 2>/dev/null && echo TRICK-baseline-binary
echo 'int x;' >> ../baseline/bench.cc 2>/dev/null && echo TRICK-baseline-source
echo x > ../escaped 2>/dev/null
# A trick only where the node's own workspace shows (its token file): under
# /tmp the sandbox's private /tmp holds an empty copy of the path.
echo x > %s/escaped 2>/dev/null && [ -e %s/node-token ] && echo TRICK-workspace
cat %s/node-token 2>/dev/null && echo TRICK-token-file
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep 'toke[n]-%s' && echo TRICK-token-proc
nsenter -t 1 -n true 2>/dev/null && echo TRICK-nsenter
set -e
g++ -O2 -std=c++17 -o bench bench.cc -lbenchmark -lpthread
g++ -O2 -std=c++17 -o check check.cc
)sh",
                                         ws, ws, ws, name_));
  Commit("reach outside the arm");
  EvalOutcome o = Eval(v1::GAIN);
  unsetenv("DENSEGATE_TOKEN");
  const std::string log = ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-candidate.out");
  EXPECT_THAT(log, Not(HasSubstr("TRICK"))) << log;
  EXPECT_THAT(log, Not(HasSubstr(secret)));
  EXPECT_NE(o.verdict.decision(), v1::ACCEPT) << Reasons(o.verdict);
  EXPECT_EQ(access((ws + "/escaped").c_str(), F_OK), -1);
  bool escaped = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(ws)) {
    escaped |= e.path().filename() == "escaped";
  }
  EXPECT_FALSE(escaped) << "a file written outside the candidate's arm reached the host";
  EXPECT_EQ(o.verdict.provenance().isolation(), "bubblewrap");
}

// The workload caches its build by the sources' digest under
// ~/.cache/densegate, as Bazel's disk cache does: a baseline build reuses the
// binary cached for its sources. A candidate's build writes a forged binary
// under the baseline's key; the next baseline build of the same sources
// still runs what a baseline build made (its binary's bytes before and
// after), while the candidate could read the trusted entry.
TEST_F(EvalTest, ACandidatesForgedCacheEntryChangesNothingTheBaselineRuns) {
  REQUIRE_SANDBOX();
  const std::string cached_build = R"sh(
set -e
key=$(cat bench.cc checksum.h | sha256sum | cut -c1-16)
entry="$HOME/.cache/densegate/bench-$key"
if [ -f "$entry" ]; then
  cp "$entry" bench && echo "CACHE-HIT"
else
  g++ -O2 -std=c++17 -o bench bench.cc -lbenchmark -lpthread
  cp bench "$entry.tmp" 2>/dev/null && mv "$entry.tmp" "$entry" || true
fi
sha256sum bench | sed 's/^/BENCH-DIGEST /'
g++ -O2 -std=c++17 -o check check.cc
)sh";
  Write("build.sh", "#!/bin/sh" + cached_build);
  Commit("build through a cache");
  Commit("the same sources");
  Eval(v1::NO_REGRESSION);
  // The evaluation cleans the worktrees: the build logs the digest.
  auto baseline_digest = [&] {
    const std::string log = ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-baseline.out");
    size_t at = log.find("BENCH-DIGEST ");
    return at == std::string::npos ? std::string() : log.substr(at, 13 + 64);
  };
  const std::string built = baseline_digest();
  ASSERT_FALSE(built.empty());
  EXPECT_THAT(ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-candidate.out"),
              HasSubstr("CACHE-HIT"))
      << "the candidate reads what the baseline cached";

  Write("build.sh", R"sh(#!/bin/sh
key=$(cat bench.cc checksum.h | sha256sum | cut -c1-16)
printf '#!/bin/sh\necho forged\n' > /tmp/forged
for entry in "$HOME/.cache/densegate/bench-$key" "$(readlink -f "$HOME/.cache/densegate")/bench-$key"; do
  cp /tmp/forged "$entry" 2>/dev/null && echo "TRICK-cache-written $entry"
  touch "$entry" 2>/dev/null && echo "TRICK-cache-touched $entry"
done)sh" + cached_build);
  Commit("forge the cache entry of the baseline");
  Eval(v1::NO_REGRESSION);
  const std::string log = ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-candidate.out");
  EXPECT_THAT(log, Not(HasSubstr("TRICK"))) << log;

  // Baselines build first: the next evaluation's baseline is the one the
  // forged entry was meant for.
  Write("build.sh", "#!/bin/sh" + cached_build);
  Commit("build through the cache again");
  Commit("the same sources again");
  Eval(v1::NO_REGRESSION);
  EXPECT_THAT(ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-baseline.out"), HasSubstr("CACHE-HIT"));
  EXPECT_EQ(baseline_digest(), built) << "the baseline ran a binary its build did not make";
}

// What a candidate leaves in its HOME, its cache or /tmp is gone for the next
// one.
TEST_F(EvalTest, NothingACandidateWritesReachesTheNextEvaluation) {
  REQUIRE_SANDBOX();
  auto with_build_prefix = [&](const std::string& lines) {
    Write("build.sh", "#!/bin/sh\n" + lines + R"sh(
set -e
g++ -O2 -std=c++17 -o bench bench.cc -lbenchmark -lpthread
g++ -O2 -std=c++17 -o check check.cc
)sh");
  };
  with_build_prefix(
      "echo kept > \"$HOME/note\"; echo kept > \"$HOME/.cache/note\"; echo kept > /tmp/note; "
      "echo kept > ../note");
  Commit("leave notes");
  Eval(v1::NO_REGRESSION);
  with_build_prefix(
      "cat \"$HOME/note\" \"$HOME/.cache/note\" /tmp/note ../note 2>/dev/null | "
      "sed 's/^/SEEN-/'; "
      "ls \"$HOME\" | sed 's/^/HOME-HAS-/'");
  Commit("read notes");
  Eval(v1::NO_REGRESSION);
  const std::string log = ReadFile(TestTmpDir() + "/out-" + name_ + "/logs/build-candidate.out");
  EXPECT_THAT(log, Not(HasSubstr("SEEN-"))) << log;
  EXPECT_THAT(log, Not(HasSubstr("HOME-HAS-"))) << log;
}

// Whatever either arm starts and leaves running (as Bazel leaves its
// server, detached in a session of its own) ends with `densegate eval`:
// each arm's sandbox is a PID namespace that dies with it.
TEST_F(EvalTest, NothingEitherArmStartsOutlivesDensegateEval) {
  REQUIRE_SANDBOX();
  Sh("sed -i '/^set -e/a setsid sleep 3141 </dev/null >/dev/null 2>&1 & echo left: sleep 3141' " +
     repo_ + "/build.sh");
  Commit("a build that leaves a process running");
  Sh("echo 'exit 1' >> " + repo_ + "/build.sh");
  Commit("and then fails");
  const std::string ws = TestTmpDir() + "/ws-" + name_, out = TestTmpDir() + "/out-" + name_;
  const std::string cli = Runfile("cli/densegate");
  // Users of their own, so that the fixture's evaluator (the same default
  // users) cannot be what is counted.
  const int rc = std::system(absl::StrCat(cli, " eval --repo ", repo_,
                                          " --baseline HEAD~1 --candidate HEAD --workspace ", ws,
                                          " --out ", out,
                                          " --sandbox_uid 59300 --candidate_uid 59301 > ", out,
                                          ".log 2>&1")
                                 .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 1) << ReadFile(out + ".log");
  // Both arms did start it.
  EXPECT_THAT(ReadFile(out + "/logs/build-baseline.out"), HasSubstr("left: sleep 3141"));
  EXPECT_THAT(ReadFile(out + "/logs/build-candidate.out"), HasSubstr("left: sleep 3141"));
  // A PID namespace's processes are killed as its init dies, which the
  // kernel finishes a moment after the exit.
  const std::string left = TestTmpDir() + "/left-" + name_;
  std::string count;
  WaitFor(
      [&] {
        // [1]: not this shell, whose own command line names the pattern.
        Sh("pgrep -c -f 'sleep 314[1]' > " + left + " || true; pgrep -c -U 59300,59301 >> " +
           left + " || true");
        count = ReadFile(left);
        return count == "0\n0\n";
      },
      absl::Seconds(5));
  EXPECT_EQ(count, "0\n0\n") << "processes of the arms still running after densegate eval";
}

}  // namespace densegate::harness
