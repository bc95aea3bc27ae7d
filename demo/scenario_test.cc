// The demo's scenario against this checkout: it parses, every patch still
// applies to the workload (each candidate branch changes what its patch
// says), and the scratch repository's manifest is valid, quick mode
// included.
#include "demo/scenario.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_split.h"
#include "demo/scratch_repo.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "manifest/manifest.h"
#include "testing/test_util.h"

namespace densegate::demo {
namespace {

using test::Runfile;
using test::TestTmpDir;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The runfile links back into the checkout, which holds the workload.
fs::path ScenarioInCheckout() {
  return fs::canonical(Runfile("examples/scenario.json"));
}

v1::Manifest LoadValid(const std::string& repo) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = LoadManifestFile(repo + "/densegate.json", &errors);
  for (const ManifestError& e : errors) ADD_FAILURE() << e.ToString();
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : v1::Manifest();
}

TEST(ScenarioTest, EveryPatchAppliesToThisCheckoutsWorkload) {
  const fs::path scenario_path = ScenarioInCheckout();
  const std::string source_root = scenario_path.parent_path().parent_path();
  absl::StatusOr<Scenario> scenario = LoadScenario(scenario_path);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  ASSERT_EQ(scenario->candidates.size(), 7u);

  std::unique_ptr<platform::ProcessLauncher> launcher = platform::NewSandboxLauncher();
  platform::Git git(launcher.get());
  for (bool quick : {false, true}) {
    SCOPED_TRACE(quick ? "quick" : "full");
    ScratchRepoOptions o;
    o.source_root = source_root;
    o.workload_dir = source_root + "/examples/workload";
    o.dir = TestTmpDir() + "/repo";
    o.quick = quick;
    absl::StatusOr<ScratchRepo> repo = CreateScratchRepo(o, *scenario, git);
    ASSERT_TRUE(repo.ok()) << repo.status();
    v1::Manifest manifest = LoadValid(repo->dir);
    EXPECT_EQ(manifest.gate().min_pairs(), quick ? 8 : 10);
    // quick.json patches the serving benchmark by name and leaves the others.
    ASSERT_EQ(manifest.benchmarks_size(), 2);
    EXPECT_EQ(manifest.benchmarks(0).name(), "kda-decode");
    EXPECT_THAT(manifest.benchmarks(0).command(), HasSubstr("--benchmark_repetitions=12"));
    EXPECT_EQ(manifest.benchmarks(1).name(), "serve");
    EXPECT_THAT(manifest.benchmarks(1).command(),
                HasSubstr(quick ? "--num_prompts=6 " : "--num_prompts=12 "));
    EXPECT_EQ(manifest.benchmarks(1).metrics_size(), 1);
    EXPECT_TRUE(fs::exists(repo->dir + "/kernels/kda/kda_decode.cc"));
    EXPECT_TRUE(fs::exists(repo->dir + "/runtime/serve_bench.cc"));

    for (const ScenarioCandidate& c : scenario->candidates) {
      SCOPED_TRACE(c.name);
      ASSERT_EQ(repo->candidate_sha.count(c.name), 1u);
      absl::StatusOr<std::vector<std::string>> changed =
          git.ChangedPaths(repo->dir, repo->first_version_sha, repo->candidate_sha.at(c.name));
      ASSERT_TRUE(changed.ok()) << changed.status();
      // Exactly the files the patch names.
      std::ifstream patch(c.patch);
      std::set<std::string> named;
      for (std::string line; std::getline(patch, line);) {
        if (line.rfind("+++ b/", 0) == 0) named.insert(line.substr(6));
      }
      EXPECT_EQ(std::set<std::string>(changed->begin(), changed->end()), named);
    }
    ASSERT_TRUE(scenario->bisection.has_value());
    EXPECT_EQ(repo->bisection_shas.size(), scenario->bisection->commits.size());
    absl::StatusOr<std::string> tip = git.ResolveCommit(repo->dir, scenario->bisection->branch);
    ASSERT_TRUE(tip.ok()) << tip.status();
    EXPECT_EQ(*tip, repo->bisection_shas.back());
  }
}

TEST(ScenarioTest, BadScenariosNameTheField) {
  const std::string dir = TestTmpDir() + "/bad";
  fs::create_directories(dir);
  std::ofstream(dir + "/p.diff") << "";
  auto load = [&](const std::string& text) {
    std::ofstream(dir + "/s.json") << text;
    return LoadScenario(dir + "/s.json").status();
  };
  const std::string first = R"("first_version": {"patch": "p.diff", "message": "m"}, "target_branch": "main")";
  EXPECT_NE(load("[]").message().find("not a JSON object"), std::string::npos);
  EXPECT_NE(load("{" + first + R"(, "candidates": []})").message().find("candidates"),
            std::string::npos);
  EXPECT_NE(load(R"({"first_version": {"patch": "missing.diff", "message": "m"}})")
                .message()
                .find("first_version.patch"),
            std::string::npos);
  const std::string candidate =
      R"({"name": "x", "patch": "p.diff", "message": "m", "submitter": "agent", "kind": "experiment", )";
  absl::Status s = load("{" + first + R"(, "candidates": [)" + candidate +
                        R"("merge": true, "expect": {"decision": "ACCEPT"}}]})");
  EXPECT_NE(s.message().find("candidates[0].merge"), std::string::npos) << s;
  s = load("{" + first + R"(, "candidates": [)" + candidate +
           R"("expect": {"decision": "ACCEPT", "reason": "SLOW"}}]})");
  EXPECT_NE(s.message().find("candidates[0].expect.reason"), std::string::npos) << s;
  const std::string one = "{" + first + R"(, "candidates": [)" + candidate +
                          R"("expect": {"decision": "ACCEPT"}}], "bisection": )";
  s = load(one + R"({"branch": "r", "metric": "m", "commits": [{"patch": "p.diff", "message": "a"}]}})");
  EXPECT_NE(s.message().find("bisection.commits: must be an array of at least two"),
            std::string::npos)
      << s;
  s = load(one + R"({"branch": "r", "metric": "m", "culprit": 3, "commits": [)" +
           R"({"patch": "p.diff", "message": "a"}, {"patch": "p.diff", "message": "b"}]}})");
  EXPECT_NE(s.message().find("bisection.culprit: a 1-based index into commits (1 to 2)"),
            std::string::npos)
      << s;
}

TEST(ScenarioTest, QuickPatchOfABenchmarkNoManifestDeclaresIsAnError) {
  const fs::path scenario_path = ScenarioInCheckout();
  const std::string source_root = scenario_path.parent_path().parent_path();
  absl::StatusOr<Scenario> scenario = LoadScenario(scenario_path);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  const std::string tmp = TestTmpDir();
  const fs::path workload = fs::path(tmp) / "workload";
  fs::create_directories(workload);
  for (const char* file : {"densegate.json", "bazelrc"}) {
    fs::copy_file(source_root + "/examples/workload/" + file, workload / file,
                  fs::copy_options::overwrite_existing);
  }
  std::ofstream(workload / "quick.json")
      << R"({"benchmarks": [{"name": "serving", "timeout_s": 9}]})";

  std::unique_ptr<platform::ProcessLauncher> launcher = platform::NewSandboxLauncher();
  platform::Git git(launcher.get());
  ScratchRepoOptions o;
  o.source_root = source_root;
  o.workload_dir = workload.string();
  o.dir = tmp + "/repo-bad-quick";
  o.quick = true;
  absl::StatusOr<ScratchRepo> repo = CreateScratchRepo(o, *scenario, git);
  EXPECT_EQ(repo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(repo.status().message(), HasSubstr("patches benchmark \"serving\""));
}

}  // namespace
}  // namespace densegate::demo
