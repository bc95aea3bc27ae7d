#include "harness/workspace/workspace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "harness/workspace/git_tree.h"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::ReadFile;
using test::Sh;
using test::TestTmpDir;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// A repository with two commits: v1 (baseline) and v2 (candidate) which
// edits kernel.cc, adds tests/new_test.cc and renames old.txt.
class WorkspaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = TestTmpDir() + "/repo-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string git = "git -c user.name=t -c user.email=t@t -C " + repo_;
    Sh("rm -rf " + repo_ + " && mkdir -p " + repo_ + "/tests && git init -q " + repo_);
    Sh("echo v1 > " + repo_ + "/kernel.cc && echo x > " + repo_ + "/old.txt && echo t > " +
       repo_ + "/tests/a_test.cc && echo '{}' > " + repo_ + "/densegate.json");
    Sh(git + " add -A && " + git + " commit -q -m v1 && " + git + " tag v1");
    Sh("echo v2 > " + repo_ + "/kernel.cc && echo n > " + repo_ + "/tests/new_test.cc && " +
       git + " mv old.txt new.txt");
    Sh(git + " add -A && " + git + " commit -q -m v2");
  }

  std::unique_ptr<platform::ProcessLauncher> launcher_ =
      platform::NewSandboxLauncher(platform::SandboxOptions{.scratch_root = TestTmpDir()});
  platform::Git git_{launcher_.get()};
  std::string repo_;
};

TEST_F(WorkspaceTest, ResolvesAndShowsFilesAtCommits) {
  auto head = git_.ResolveCommit(repo_, "HEAD");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size(), 40);
  auto v1 = git_.ShowFile(repo_, "v1", "kernel.cc");
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(*v1, "v1\n");
  EXPECT_EQ(git_.ShowFile(repo_, "v1", "missing.json").status().code(),
            absl::StatusCode::kNotFound);
  auto bad = git_.ResolveCommit(repo_, "no-such-branch");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("no-such-branch"));
}

TEST_F(WorkspaceTest, ChangedPathsIncludeBothSidesOfARename) {
  auto changed = git_.ChangedPaths(repo_, "v1", "HEAD");
  ASSERT_TRUE(changed.ok());
  EXPECT_THAT(*changed, UnorderedElementsAre("kernel.cc", "new.txt", "old.txt",
                                             "tests/new_test.cc"));
}

TEST_F(WorkspaceTest, GitTreeKnowsFilesAndDirectories) {
  auto files = git_.ListFiles(repo_, "HEAD");
  ASSERT_TRUE(files.ok());
  GitTree tree(*files);
  EXPECT_TRUE(tree.Exists("tests"));
  EXPECT_TRUE(tree.Exists("tests/"));
  EXPECT_TRUE(tree.Exists("tests/new_test.cc"));
  EXPECT_TRUE(tree.Exists("densegate.json"));
  EXPECT_FALSE(tree.Exists("old.txt"));
  EXPECT_FALSE(tree.Exists("test"));
}

TEST(IsUnderPathTest, MatchesFilesAndDirectoriesOnly) {
  EXPECT_TRUE(IsUnderPath("tests/a_test.cc", "tests"));
  EXPECT_TRUE(IsUnderPath("tests/a_test.cc", "tests/"));
  EXPECT_TRUE(IsUnderPath("densegate.json", "densegate.json"));
  EXPECT_FALSE(IsUnderPath("tests2/a.cc", "tests"));
  EXPECT_FALSE(IsUnderPath("test", "tests"));
}

TEST_F(WorkspaceTest, PreparesCleanWorktreesAndReusesThem) {
  Workspace ws(TestTmpDir() + "/ws", 0, &git_);
  auto c = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(ReadFile(c->baseline_dir + "/kernel.cc"), "v1\n");
  EXPECT_EQ(ReadFile(c->candidate_dir + "/kernel.cc"), "v2\n");
  // A run leaves junk behind; Clean removes it, Prepare reuses the paths.
  Sh("echo junk > " + c->candidate_dir + "/build.out && echo edit > " + c->candidate_dir +
     "/kernel.cc");
  ASSERT_TRUE(ws.Clean(*c).ok());
  EXPECT_NE(access((c->candidate_dir + "/build.out").c_str(), F_OK), 0);
  EXPECT_EQ(ReadFile(c->candidate_dir + "/kernel.cc"), "v2\n");
  auto again = ws.Prepare(repo_, "v1", "v1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->candidate_dir, c->candidate_dir);
  EXPECT_EQ(ReadFile(again->candidate_dir + "/kernel.cc"), "v1\n");
}

// Each arm's HOME starts empty but for .cache, which persists; only the
// baseline's build cache is the node's trusted one.
TEST_F(WorkspaceTest, ArmsGetFreshHomesAndOnlyTheBaselineWritesTheTrustedCache) {
  const std::string root = TestTmpDir() + "/ws-arms";
  const std::string trusted = Workspace::TrustedCache(root);
  Workspace ws(root, 0, &git_);
  auto c = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(c.ok()) << c.status();
  for (const ArmArea* area : {&c->baseline, &c->candidate}) {
    Sh("echo left > " + area->home + "/note && echo kept > " + area->home +
       "/.cache/state && mkdir " + area->home + "/dir && touch " + area->home + "/.hidden");
  }
  // Held open like a server's bind mount of it.
  const int held = open(c->baseline.home.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  auto again = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(again.ok()) << again.status();
  // The same directory, emptied, not a new one beside a deleted one.
  struct stat held_home;
  ASSERT_EQ(fstat(held, &held_home), 0);
  close(held);
  EXPECT_GT(held_home.st_nlink, 0u) << "the held HOME was deleted";
  for (const ArmArea* area : {&again->baseline, &again->candidate}) {
    EXPECT_NE(access((area->home + "/dir").c_str(), F_OK), 0);
    EXPECT_NE(access((area->home + "/.hidden").c_str(), F_OK), 0);
    EXPECT_NE(access((area->home + "/note").c_str(), F_OK), 0);
  }
  // The baseline's build state persists; nothing the candidate left does.
  EXPECT_EQ(ReadFile(again->baseline.home + "/.cache/state"), "kept\n");
  EXPECT_NE(access((again->candidate.home + "/.cache/state").c_str(), F_OK), 0);
  // Both see the trusted cache at .cache/densegate; only the baseline may
  // write it, the candidate reads it.
  for (const ArmArea* area : {&again->baseline, &again->candidate}) {
    char target[4096] = {};
    ASSERT_GT(readlink((area->cache + "/densegate").c_str(), target, sizeof target - 1), 0);
    EXPECT_EQ(std::string(target), trusted);
  }
  EXPECT_THAT(again->baseline.writable, testing::Contains(trusted));
  EXPECT_THAT(again->candidate.writable, testing::Not(testing::Contains(trusted)));
  EXPECT_THAT(again->candidate.read_only, testing::ElementsAre(trusted));
  EXPECT_THAT(ReadFile(again->candidate.home + "/.bazelrc"),
              HasSubstr("--noremote_upload_local_results"));
}

// Each arm's Bazel keeps its output base where its .bazelrc says; the
// candidate's becomes a copy of the baseline's (without its server's state),
// and what the candidate wrote there is gone at the next Prepare.
TEST_F(WorkspaceTest, TheCandidatesOutputBaseStartsAsACopyOfTheBaselines) {
  const bool root = geteuid() == 0;
  Workspace ws(TestTmpDir() + "/ws-seed", 0, &git_,
               root ? ArmUsers{.baseline = 59013, .candidate = 59014} : ArmUsers{});
  auto c = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string base = c->baseline.cache + "/bazel-output-base";
  const std::string cand = c->candidate.cache + "/bazel-output-base";
  EXPECT_THAT(ReadFile(c->baseline.home + "/.bazelrc"), HasSubstr("startup --output_base=" + base));
  EXPECT_THAT(ReadFile(c->candidate.home + "/.bazelrc"), HasSubstr("startup --output_base=" + cand));
  ASSERT_TRUE(ws.SeedCandidate(*c).ok());
  EXPECT_NE(access(cand.c_str(), F_OK), 0) << "no baseline build yet: nothing to copy";
  // What a baseline build leaves: outputs, a link, its server's state.
  Sh("mkdir -p " + base + "/execroot/ws/bazel-out " + base + "/server && echo out > " + base +
     "/execroot/ws/bazel-out/bin && chmod 555 " + base + "/execroot/ws/bazel-out/bin && ln -s " +
     "/usr/share/bazel " + base + "/install && echo 1 > " + base + "/server/server.pid.txt && " +
     "touch " + base + "/lock " + base + "/java.log");
  auto again = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(ws.SeedCandidate(*again).ok());
  EXPECT_EQ(ReadFile(cand + "/execroot/ws/bazel-out/bin"), "out\n");
  struct stat st;
  ASSERT_EQ(lstat((cand + "/execroot/ws/bazel-out/bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);
  if (root) {
    EXPECT_EQ(st.st_uid, 59014u);
  }
  char target[256] = {};
  ASSERT_GT(readlink((cand + "/install").c_str(), target, sizeof(target) - 1), 0);
  EXPECT_EQ(std::string(target), "/usr/share/bazel");
  for (const char* gone : {"/server", "/lock", "/java.log"}) {
    EXPECT_NE(access((cand + gone).c_str(), F_OK), 0) << gone;
  }
  // The candidate writes into its copy; the next Prepare starts over.
  Sh("echo forged > " + cand + "/execroot/ws/bazel-out/extra");
  ASSERT_TRUE(ws.Prepare(repo_, "HEAD~1", "HEAD").ok());
  EXPECT_NE(access(cand.c_str(), F_OK), 0);
  EXPECT_NE(access((base + "/execroot/ws/bazel-out/extra").c_str(), F_OK), 0);
}

// A candidate may rewrite its worktree's .git to point the node's git at
// another repository; the reset must ignore it and restore the real one.
TEST_F(WorkspaceTest, ResetIgnoresAWorktreeGitFileTheCandidateRewrote) {
  Workspace ws(TestTmpDir() + "/ws-git", 0, &git_);
  auto c = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string decoy = TestTmpDir() + "/decoy";
  Sh("rm -rf " + decoy + " && git init -q " + decoy);
  Sh("echo 'gitdir: " + decoy + "/.git' > " + c->candidate_dir + "/.git && echo edit > " +
     c->candidate_dir + "/kernel.cc");
  ASSERT_TRUE(ws.Clean(*c).ok());
  EXPECT_EQ(ReadFile(c->candidate_dir + "/kernel.cc"), "v2\n");
  auto again = ws.Prepare(repo_, "v1", "v1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ReadFile(again->candidate_dir + "/kernel.cc"), "v1\n");
  EXPECT_THAT(ReadFile(again->candidate_dir + "/.git"), HasSubstr(again->mirror));
}

// Run as root (CI), the arms' files belong to their sandbox users.
TEST_F(WorkspaceTest, ArmFilesBelongToTheirSandboxUsers) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give files away";
  Workspace ws(TestTmpDir() + "/ws-owners", 0, &git_, ArmUsers{.baseline = 59010, .candidate = 59011});
  auto c = ws.Prepare(repo_, "HEAD~1", "HEAD");
  ASSERT_TRUE(c.ok()) << c.status();
  auto owner = [](const std::string& path) {
    struct stat st;
    return lstat(path.c_str(), &st) == 0 ? st.st_uid : 0u;
  };
  EXPECT_EQ(owner(c->baseline_dir + "/kernel.cc"), 59010u);
  EXPECT_EQ(owner(c->candidate_dir + "/kernel.cc"), 59011u);
  EXPECT_EQ(owner(c->candidate_dir + "/tests/new_test.cc"), 59011u);
  EXPECT_EQ(owner(c->candidate.home), 59011u);
  EXPECT_EQ(owner(c->candidate.cache), 59011u);
  EXPECT_EQ(owner(Workspace::TrustedCache(TestTmpDir() + "/ws-owners")), 59010u);

  // A trusted cache shared through a link: its directory goes to the
  // baseline user (the link's owner does not decide who may write there).
  const std::string shared = TestTmpDir() + "/shared-trusted";
  Sh("rm -rf " + shared + " && mkdir -p " + shared + "/ac " + TestTmpDir() + "/ws-linked && ln -sfn " +
     shared + " " + Workspace::TrustedCache(TestTmpDir() + "/ws-linked"));
  Workspace linked(TestTmpDir() + "/ws-linked", 0, &git_, ArmUsers{.baseline = 59010, .candidate = 59012});
  ASSERT_TRUE(linked.Prepare(repo_, "HEAD~1", "HEAD").ok());
  EXPECT_EQ(owner(shared), 59010u);
  EXPECT_EQ(owner(shared + "/ac"), 59010u);
}

TEST_F(WorkspaceTest, UnknownRefIsNotFound) {
  Workspace ws(TestTmpDir() + "/ws2", 0, &git_);
  auto c = ws.Prepare(repo_, "HEAD", "feature/nope");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("feature/nope"));
}

TEST_F(WorkspaceTest, NotARepositoryIsAClearError) {
  Workspace ws(TestTmpDir() + "/ws3", 0, &git_);
  Sh("mkdir -p " + TestTmpDir() + "/plain");
  auto c = ws.Prepare(TestTmpDir() + "/plain", "HEAD", "HEAD");
  EXPECT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("HEAD"));
}

}  // namespace
}  // namespace densegate::harness
