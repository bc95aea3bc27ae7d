#include "harness/process/launcher.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Tmp() { return std::getenv("TEST_TMPDIR"); }

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.stdout_path = Tmp() + "/out.txt";
  spec.stderr_path = Tmp() + "/err.txt";
  spec.wall_timeout = absl::Seconds(30);
  return spec;
}

class LauncherTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProcessLauncher> launcher_ =
      NewSandboxLauncher(SandboxOptions{.scratch_root = Tmp()});
};

TEST_F(LauncherTest, RunsAndCapturesOutputAndExitCode) {
  auto r = launcher_->Run(Shell("echo hello; echo oops >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(Slurp(Tmp() + "/out.txt"), "hello\n");
  EXPECT_EQ(Slurp(Tmp() + "/err.txt"), "oops\n");
  EXPECT_THAT(r->Describe(), HasSubstr("exited with 3"));
}

TEST_F(LauncherTest, TimeoutKillsTheWholeProcessGroup) {
  // A background grandchild would touch its marker after 2 s unless the
  // whole group is killed at the 300 ms timeout.
  std::string pidfile = Tmp() + "/grandchild.pid";
  std::string marker = Tmp() + "/grandchild-survived";
  ProcessSpec spec = Shell(absl::StrCat("sh -c 'echo $$ > ", pidfile, "; sleep 2; touch ",
                                        marker, "' & sleep 60"));
  spec.wall_timeout = absl::Milliseconds(300);
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_THAT(r->Describe(), HasSubstr("wall timeout"));
  EXPECT_LT(r->wall_seconds, 5);
  pid_t grandchild = std::stoi(Slurp(pidfile));
  int fd = static_cast<int>(syscall(SYS_pidfd_open, grandchild, 0));
  if (fd >= 0) {
    // It must already be dying: its exit is reported long before its 2 s.
    pollfd p{fd, POLLIN, 0};
    absl::Time start = absl::Now();
    ASSERT_EQ(poll(&p, 1, 5000), 1);
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
    close(fd);
  }
  EXPECT_NE(access(marker.c_str(), F_OK), 0);
}

TEST_F(LauncherTest, EnvironmentIsScrubbedAndTempIsPrivate) {
  setenv("DENSEGATE_TOKEN", "secret", 1);
  setenv("CI", "true", 1);
  ProcessSpec spec = Shell("env; test -d \"$TMPDIR\" && echo tmp-ok");
  spec.env["MY_VAR"] = "1";
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  std::string out = Slurp(Tmp() + "/out.txt");
  EXPECT_THAT(out, Not(HasSubstr("DENSEGATE_TOKEN")));
  EXPECT_THAT(out, Not(HasSubstr("CI=")));
  EXPECT_THAT(out, HasSubstr("MY_VAR=1"));
  EXPECT_THAT(out, HasSubstr("tmp-ok"));
  // The private directory is removed afterwards.
  std::string tmpdir = out.substr(out.find("TMPDIR=") + 7);
  tmpdir = tmpdir.substr(0, tmpdir.find('\n'));
  EXPECT_NE(access(tmpdir.c_str(), F_OK), 0) << tmpdir;
}

TEST_F(LauncherTest, NetworkNamespaceHasOnlyLoopback) {
  auto r = launcher_->Run(Shell("cat /proc/net/dev"));
  ASSERT_TRUE(r.ok());
  if (!r->network_isolated) {
    GTEST_SKIP() << "this kernel does not let us create a network namespace";
  }
  std::string out = Slurp(Tmp() + "/out.txt");
  EXPECT_THAT(out, HasSubstr("lo:"));
  // Two header lines and loopback: no other interface.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
}

// One namespace per launcher: a server left by one command (Bazel's) must be
// reachable over loopback from the next.
TEST_F(LauncherTest, CommandsOfOneLauncherShareItsNetworkNamespace) {
  auto namespace_of_command = [&]() -> std::string {
    auto r = launcher_->Run(Shell("readlink /proc/self/ns/net"));
    if (!r.ok() || !r->ok()) return "failed";
    if (!r->network_isolated) return "not isolated";
    return Slurp(Tmp() + "/out.txt");
  };
  std::string first = namespace_of_command();
  if (first == "not isolated") {
    GTEST_SKIP() << "this kernel does not let us create a network namespace";
  }
  EXPECT_THAT(first, HasSubstr("net:["));
  EXPECT_EQ(namespace_of_command(), first);
  char own[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/net", own, sizeof(own) - 1), 0);
  EXPECT_NE(first, std::string(own) + "\n");
  std::unique_ptr<ProcessLauncher> other =
      NewSandboxLauncher(SandboxOptions{.scratch_root = Tmp()});
  auto r = other->Run(Shell("readlink /proc/self/ns/net"));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(Slurp(Tmp() + "/out.txt"), first);
}

TEST_F(LauncherTest, FileSizeLimitStopsRunawayOutput) {
  ProcessSpec spec = Shell(absl::StrCat("head -c 4000000 /dev/zero > ", Tmp(), "/big"));
  spec.limits.file_size_bytes = 1 << 20;
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok());
  std::ifstream big(Tmp() + "/big", std::ios::ate);
  EXPECT_LE(static_cast<int64_t>(big.tellg()), 1 << 20);
}

TEST_F(LauncherTest, MissingProgramAndDirectoryAreClearErrors) {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/tool"};
  auto r = launcher_->Run(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("cannot execute /nonexistent/tool: No such file"));
  ProcessSpec dir = Shell("true");
  dir.working_dir = "/nonexistent-dir";
  auto d = launcher_->Run(dir);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("/nonexistent-dir"));
}

TEST_F(LauncherTest, StartTalksOverPipes) {
  ProcessSpec spec;
  spec.argv = {"cat"};
  spec.wall_timeout = absl::Seconds(30);
  auto p = launcher_->Start(spec);
  ASSERT_TRUE(p.ok()) << p.status();
  const char msg[] = "ping\n";
  ASSERT_EQ(write((*p)->stdin_fd(), msg, 5), 5);
  char buf[5];
  ASSERT_EQ(read((*p)->stdout_fd(), buf, 5), 5);
  EXPECT_EQ(std::string(buf, 5), "ping\n");
  auto cpu = (*p)->CpuSeconds();
  ASSERT_TRUE(cpu.ok());
  EXPECT_GE(*cpu, 0);
  ProcessResult r = (*p)->Finish(absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 0) << r.Describe();
}

}  // namespace
}  // namespace densegate::harness
