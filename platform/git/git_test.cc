#include "platform/git/git.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "platform/process/testing/fake_launcher.h"

namespace densegate::platform {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Pair;

class GitTest : public ::testing::Test {
 protected:
  FakeLauncher launcher_;
  Git git_{&launcher_};
};

TEST_F(GitTest, RunsGitInTheRepositoryWithoutPromptsOrSystemConfig) {
  launcher_.On(FakeLauncher::ArgvContains("rev-parse"), {0, "0123abcd\n", ""});
  ASSERT_EQ(git_.ResolveCommit("/repo", "main").value(), "0123abcd");
  const std::vector<ProcessSpec> runs = launcher_.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_THAT(runs[0].argv, ElementsAre("git", "-c", "safe.directory=*", "-C", "/repo",
                                        "rev-parse", "--verify", "--quiet", "main^{commit}"));
  EXPECT_THAT(runs[0].env, IsSupersetOf({Pair("GIT_TERMINAL_PROMPT", "0"),
                                         Pair("GIT_CONFIG_NOSYSTEM", "1")}));
  // Git runs on the host, never in a sandbox: it executes no candidate code.
  EXPECT_FALSE(runs[0].confinement.has_value());
}

TEST_F(GitTest, AnUnknownRefIsNotFound) {
  launcher_.On(FakeLauncher::ArgvContains("rev-parse"), {1, "", ""});
  absl::StatusOr<std::string> sha = git_.ResolveCommit("/repo", "no-such-branch");
  EXPECT_EQ(sha.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(sha.status().message(), HasSubstr("no-such-branch"));
}

TEST_F(GitTest, AFailureQuotesGitsOwnError) {
  launcher_.On(FakeLauncher::ArgvContains("ls-tree"),
               {128, "", "fatal: not a tree object\n"});
  absl::StatusOr<std::vector<std::string>> files = git_.ListFiles("/repo", "deadbeef");
  EXPECT_EQ(files.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(files.status().message(), HasSubstr("ls-tree"));
  EXPECT_THAT(files.status().message(), HasSubstr("exited with 128"));
  EXPECT_THAT(files.status().message(), HasSubstr("fatal: not a tree object"));
}

TEST_F(GitTest, PathListsAreNulSeparatedSoAnyFileNameSurvives) {
  launcher_.On(FakeLauncher::ArgvContains("diff"),
               {0, std::string("a b.txt\0new\nline\0dir/c.cc\0", 26), ""});
  EXPECT_THAT(git_.ChangedPaths("/repo", "v1", "v2").value(),
              ElementsAre("a b.txt", "new\nline", "dir/c.cc"));
  EXPECT_THAT(launcher_.runs()[0].argv, IsSupersetOf({"--no-renames", "-z", "v1", "v2"}));
}

TEST_F(GitTest, ShowFileOfAPathTheCommitLacksIsNotFound) {
  launcher_.On(FakeLauncher::ArgvContains("ls-tree"), {0, "", ""});
  absl::StatusOr<std::string> text = git_.ShowFile("/repo", "0123456789abcdef", "missing.json");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(text.status().message(), HasSubstr("missing.json"));
  EXPECT_EQ(launcher_.runs().size(), 1u);  // No `git show` of a file that is not there.
}

TEST_F(GitTest, ShowFileReturnsTheContentAtTheCommit) {
  launcher_.On(FakeLauncher::ArgvContains("ls-tree"), {0, std::string("densegate.json\0", 15), ""});
  launcher_.On(FakeLauncher::ArgvContains("show abc:densegate.json"), {0, "{}\n", ""});
  EXPECT_EQ(git_.ShowFile("/repo", "abc", "densegate.json").value(), "{}\n");
}

}  // namespace
}  // namespace densegate::platform
