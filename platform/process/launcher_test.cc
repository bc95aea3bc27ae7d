#include "platform/process/launcher.h"

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
#include "testing/test_util.h"

namespace densegate::platform {
namespace {

using test::ReadFile;
using test::TestTmpDir;

using ::testing::HasSubstr;
using ::testing::Not;

ProcessSpec Shell(const std::string& script) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.stdout_path = TestTmpDir() + "/out.txt";
  spec.stderr_path = TestTmpDir() + "/err.txt";
  spec.wall_timeout = absl::Seconds(30);
  return spec;
}

class LauncherTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProcessLauncher> launcher_ =
      NewSandboxLauncher(SandboxOptions{.scratch_root = TestTmpDir()});
};

TEST_F(LauncherTest, RunsAndCapturesOutputAndExitCode) {
  auto r = launcher_->Run(Shell("echo hello; echo oops >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "hello\n");
  EXPECT_EQ(ReadFile(TestTmpDir() + "/err.txt"), "oops\n");
  EXPECT_THAT(r->Describe(), HasSubstr("exited with 3"));
}

TEST_F(LauncherTest, TimeoutKillsTheWholeProcessGroup) {
  // A background grandchild would touch its marker after 2 s unless the
  // whole group is killed at the 300 ms timeout.
  std::string pidfile = TestTmpDir() + "/grandchild.pid";
  std::string marker = TestTmpDir() + "/grandchild-survived";
  ProcessSpec spec = Shell(absl::StrCat("sh -c 'echo $$ > ", pidfile, "; sleep 2; touch ",
                                        marker, "' & sleep 60"));
  spec.wall_timeout = absl::Milliseconds(300);
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_THAT(r->Describe(), HasSubstr("wall timeout"));
  EXPECT_LT(r->wall_seconds, 5);
  pid_t grandchild = std::stoi(ReadFile(pidfile));
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

TEST_F(LauncherTest, AWatchStopsTheCommandAndSaysWhy) {
  // The watch is asked while the command runs; its third answer stops it.
  ProcessSpec spec = Shell("sleep 60");
  int asked = 0;
  spec.watch = [&asked]() -> std::string { return ++asked < 3 ? "" : "over its disk quota"; };
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(r->stopped, "over its disk quota");
  EXPECT_FALSE(r->ok());
  EXPECT_FALSE(r->timed_out);
  EXPECT_THAT(r->Describe(), HasSubstr("killed: over its disk quota"));
  EXPECT_LT(r->wall_seconds, 10);
}

TEST_F(LauncherTest, EnvironmentIsScrubbedAndTempIsPrivate) {
  setenv("DENSEGATE_TOKEN", "secret", 1);
  setenv("CI", "true", 1);
  ProcessSpec spec = Shell("env; test -d \"$TMPDIR\" && echo tmp-ok");
  spec.env["MY_VAR"] = "1";
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  std::string out = ReadFile(TestTmpDir() + "/out.txt");
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
  std::string out = ReadFile(TestTmpDir() + "/out.txt");
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
    return ReadFile(TestTmpDir() + "/out.txt");
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
      NewSandboxLauncher(SandboxOptions{.scratch_root = TestTmpDir()});
  auto r = other->Run(Shell("readlink /proc/self/ns/net"));
  ASSERT_TRUE(r.ok());
  EXPECT_NE(ReadFile(TestTmpDir() + "/out.txt"), first);
}

TEST_F(LauncherTest, FileSizeLimitStopsRunawayOutput) {
  ProcessSpec spec = Shell(absl::StrCat("head -c 4000000 /dev/zero > ", TestTmpDir(), "/big"));
  spec.limits.file_size_bytes = 1 << 20;
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok());
  std::ifstream big(TestTmpDir() + "/big", std::ios::ate);
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

// --- The bubblewrap sandbox (ProcessSpec::confinement). ---

// Skips where a sandbox cannot be had (not root, no bubblewrap) unless under
// CI, where that is a failure.
#define REQUIRE_SANDBOX()                                                         \
  do {                                                                            \
    absl::Status available = CheckSandbox(SandboxOptions{});                      \
    if (!available.ok()) {                                                        \
      if (std::getenv("CI") != nullptr) FAIL() << available;                      \
      GTEST_SKIP() << available;                                                  \
    }                                                                             \
  } while (0)

constexpr uint32_t kUid = 59031;

std::string MakeDir(const std::string& name) {
  std::string dir = TestTmpDir() + "/" + name;
  std::string cmd = "rm -rf " + dir + " && mkdir -p " + dir + " && chown " +
                    std::to_string(kUid) + " " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

ProcessSpec Confined(const std::string& script, Confinement c = {}) {
  ProcessSpec spec = Shell(script);
  c.uid = c.uid == 0 ? kUid : c.uid;
  c.gid = c.gid == 0 ? kUid : c.gid;
  spec.confinement = c;
  return spec;
}

TEST_F(LauncherTest, ConfinedProcessRunsAsItsOwnUserWithNothingToEscalate) {
  REQUIRE_SANDBOX();
  auto r = launcher_->Run(Confined(
      "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; "
      "hostname; ls /proc/self/fd"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->Describe() << ReadFile(TestTmpDir() + "/err.txt");
  EXPECT_TRUE(r->sandboxed);
  std::string out = ReadFile(TestTmpDir() + "/out.txt");
  EXPECT_THAT(out, HasSubstr(absl::StrCat(kUid, "\n", kUid, "\n")));
  EXPECT_THAT(out, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(out, HasSubstr("CapPrm:\t0000000000000000"));
  EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_THAT(out, HasSubstr("Seccomp:\t2"));
  EXPECT_THAT(out, HasSubstr("densegate-sandbox"));
  // No descriptor of the launcher's (bind sources, namespaces, the seccomp
  // program, the ready pipe) reaches the command: only stdio and ls's own.
  std::string fds = out.substr(out.find("densegate-sandbox\n") + 18);
  EXPECT_EQ(fds, "0\n1\n2\n3\n") << fds;
}

// The sandbox user has an account inside: a program that looks itself up
// (Java's user.home, which Bazel expands `~/` in --disk_cache with) finds
// its name and the HOME it was given.
TEST_F(LauncherTest, ConfinedUserLooksItselfUpAndFindsItsHome) {
  REQUIRE_SANDBOX();
  const std::string home = MakeDir("home");
  Confinement c;
  c.writable = {home};
  ProcessSpec spec = Confined("id -un; id -gn; getent passwd \"$(id -u)\" | cut -d: -f6", c);
  spec.env["HOME"] = home;
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->Describe() << ReadFile(TestTmpDir() + "/err.txt");
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"),
            absl::StrCat("densegate-", kUid, "\ndensegate-", kUid, "\n", home, "\n"));
}

TEST_F(LauncherTest, ConfinedProcessSeesOnlyWhatItIsGiven) {
  REQUIRE_SANDBOX();
  const std::string writable = MakeDir("writable");
  const std::string read_only = MakeDir("read_only");
  const std::string hidden = MakeDir("hidden");
  ASSERT_EQ(std::system(("echo secret > " + hidden + "/token").c_str()), 0);
  ASSERT_EQ(std::system(("echo data > " + read_only + "/data").c_str()), 0);
  Confinement c;
  c.writable = {writable};
  c.read_only = {read_only};
  auto r = launcher_->Run(Confined(
      absl::StrCat("echo ok > ", writable, "/out && echo wrote; ",
                   "cat ", read_only, "/data; ",
                   "echo x > ", read_only, "/data 2>/dev/null || echo read-only-refused; ",
                   "test -e ", hidden, "/token || echo hidden-invisible; ",
                   "touch /usr/evil 2>/dev/null || echo system-read-only; ",
                   "test -e /work || echo no-work; ",
                   "ls /proc | grep -c '^[0-9]'"),
      c));
  ASSERT_TRUE(r.ok()) << r.status();
  std::string out = ReadFile(TestTmpDir() + "/out.txt");
  EXPECT_THAT(out, HasSubstr("wrote\ndata\nread-only-refused\nhidden-invisible\n"
                             "system-read-only\nno-work\n"));
  // Its own PID namespace: bwrap's init, the shell, ls and grep at most.
  EXPECT_LE(std::stoi(out.substr(out.rfind("no-work\n") + 8)), 4) << out;
  EXPECT_EQ(ReadFile(writable + "/out"), "ok\n");
  EXPECT_EQ(ReadFile(read_only + "/data"), "data\n");
}

TEST_F(LauncherTest, SeccompRefusesWhatWouldReachPastTheSandbox) {
  REQUIRE_SANDBOX();
  std::string probe = TestTmpDir() + "/sandbox_probe";
  ASSERT_EQ(std::system(("cp platform/process/sandbox_probe " + probe).c_str()), 0);
  auto r = launcher_->Run(Confined(probe, Confinement{.read_only = {probe}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok()) << r->Describe() << ReadFile(TestTmpDir() + "/err.txt");
  std::string out = ReadFile(TestTmpDir() + "/out.txt");
  for (const char* call : {"ptrace", "setns", "unshare", "unshare_user", "clone_newnet",
                           "mount", "kexec_load", "bpf", "perf_event_open"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat(call, "=refused\n"))) << out;
  }
  EXPECT_THAT(out, HasSubstr("fork=allowed\n"));
}

// A number for `sleep` that no other test process uses.
std::string Tag(int base) { return absl::StrCat(base, getpid()); }

// Starts `sleep <tag>` in a session of its own (as Bazel's server daemonizes)
// and returns once it has left the command's process group, which the
// launcher kills when the command ends.
std::string Daemon(const std::string& tag) {
  return absl::StrCat("setsid sleep ", tag, " </dev/null >/dev/null 2>&1 & p=$!; ",
                      "while [ \"$(cut -d' ' -f6 /proc/$p/stat)\" != \"$p\" ]; do :; done; echo up");
}

// A command printing how many processes it sees running `sleep <tag>` (the
// bracket keeps the command's own line from matching).
std::string CountSleeping(const std::string& tag) {
  return absl::StrCat("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep [",
                      tag.substr(0, 1), "]", tag.substr(1), "'; true");
}

TEST_F(LauncherTest, SharedSandboxKeepsItsDaemonsUntilEnded) {
  REQUIRE_SANDBOX();
  Confinement shared{.sandbox = "arm"};
  const std::string tag = Tag(4242);
  const std::string count = CountSleeping(tag);
  auto first = launcher_->Run(Confined(Daemon(tag), shared));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = launcher_->Run(Confined(
      absl::StrCat("id -u; grep CapEff /proc/self/status; ", count), shared));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), absl::StrCat(kUid, "\nCapEff:\t0000000000000000\n1\n"))
      << "the next command of the arm sees its daemon, as the same user; "
      << second->Describe() << ": " << ReadFile(TestTmpDir() + "/err.txt");
  // Another sandbox sees nothing of it, and ending the arm kills it.
  auto other = launcher_->Run(Confined(count, Confinement{.sandbox = "other", .uid = kUid + 1,
                                                           .gid = kUid + 1}));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n");
  launcher_->EndSandbox("arm");
  auto after = launcher_->Run(Confined(count, shared));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n") << after->Describe() << ReadFile(TestTmpDir() + "/err.txt");
  // Nothing of it is left on the host either.
  auto host = launcher_->Run(Shell(count));
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n");
}

TEST_F(LauncherTest, OwnSandboxTakesItsDaemonsWithIt) {
  REQUIRE_SANDBOX();
  const std::string tag = Tag(4343);
  auto r = launcher_->Run(Confined(Daemon(tag)));
  ASSERT_TRUE(r.ok()) << r.status();
  auto host = launcher_->Run(Shell(CountSleeping(tag)));
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n");
}

TEST_F(LauncherTest, SharedSandboxCommandsShareANetworkOthersDoNot) {
  REQUIRE_SANDBOX();
  auto net = [&](Confinement c) -> std::string {
    auto r = launcher_->Run(Confined("readlink /proc/self/ns/net; cat /proc/net/dev | wc -l", c));
    if (!r.ok()) return std::string(r.status().message());
    return r->network_isolated ? ReadFile(TestTmpDir() + "/out.txt") : "not isolated " + r->Describe();
  };
  std::string a1 = net({.sandbox = "a"}), a2 = net({.sandbox = "a"});
  std::string b = net({.sandbox = "b", .uid = kUid + 1, .gid = kUid + 1});
  std::string own = net({});
  EXPECT_THAT(a1, HasSubstr("net:["));
  EXPECT_THAT(a1, HasSubstr("\n3\n")) << "loopback only";
  EXPECT_THAT(own, HasSubstr("\n3\n")) << "loopback only";
  EXPECT_EQ(a1, a2);
  EXPECT_NE(a1, b);
  EXPECT_NE(a1, own);
}

TEST_F(LauncherTest, PrivateTmpIsFreshAndBounded) {
  REQUIRE_SANDBOX();
  Confinement small{.tmp_bytes = 1 << 20};
  auto fill = launcher_->Run(Confined(
      "echo $TMPDIR; echo left > /tmp/left; head -c 3000000 /dev/zero > /tmp/big || echo full",
      small));
  ASSERT_TRUE(fill.ok()) << fill.status();
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "/tmp\nfull\n");
  auto next = launcher_->Run(Confined("test -e /tmp/left && echo seen || echo fresh", small));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "fresh\n");
}

TEST_F(LauncherTest, ForkBombStopsAtTheProcessLimit) {
  REQUIRE_SANDBOX();
  // Bounded: 200 sleepers at most; the shell notes each one started (a
  // builtin redirection, no fork) until fork fails and it gives up.
  const uint32_t uid = kUid + 7;
  const std::string dir = TestTmpDir() + "/bomb";
  ASSERT_EQ(std::system(absl::StrCat("rm -rf ", dir, " && mkdir ", dir, " && chown ", uid, " ",
                                     dir).c_str()), 0);
  auto r = launcher_->Run(Confined(
      absl::StrCat("for i in $(seq 200); do sleep 30 & echo $i > ", dir, "/started; done"),
      Confinement{.uid = uid, .gid = uid, .writable = {dir}, .max_processes = 40}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok());
  EXPECT_THAT(ReadFile(TestTmpDir() + "/err.txt"), HasSubstr("fork"));
  const std::string started = ReadFile(dir + "/started");
  ASSERT_FALSE(started.empty());
  EXPECT_LT(std::stoi(started), 40) << started;
  // The launcher goes on.
  auto after = launcher_->Run(Confined("echo alive"));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "alive\n");
}

// In a shared sandbox (a build's), a bomb that goes on forking (bash
// retries a failed fork) is stopped while it runs, long before its wall
// timeout, and named; ending the sandbox leaves none of its processes.
TEST_F(LauncherTest, ABombInASharedSandboxIsStoppedWhileItRuns) {
  REQUIRE_SANDBOX();
  const uint32_t uid = kUid + 8;
  ProcessSpec spec = Confined("bash -c 'while :; do sleep 60 & done'",
                              Confinement{.sandbox = "bomb", .uid = uid, .gid = uid,
                                          .max_processes = 40});
  spec.wall_timeout = absl::Seconds(50);
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->timed_out);
  EXPECT_THAT(r->Describe(), HasSubstr("at its limit of 40: a fork bomb"))
      << ReadFile(TestTmpDir() + "/err.txt");
  EXPECT_LT(r->wall_seconds, 30);
  launcher_->EndSandbox("bomb");
  auto left = launcher_->Run(Shell(absl::StrCat("pgrep -c -u ", uid, " || true")));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n");
  auto after = launcher_->Run(Confined("echo alive"));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "alive\n");
}

TEST_F(LauncherTest, TimeoutKillsAConfinedCommandAndItsChildren) {
  REQUIRE_SANDBOX();
  const std::string tag = Tag(4444);
  ProcessSpec spec = Confined(absl::StrCat("sleep ", tag, " & sleep ", tag));
  spec.wall_timeout = absl::Milliseconds(500);
  auto r = launcher_->Run(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->timed_out);
  auto host = launcher_->Run(Shell(CountSleeping(tag)));
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), "0\n");
}

TEST_F(LauncherTest, CpuSecondsCountsTheConfinedCommand) {
  REQUIRE_SANDBOX();
  ProcessSpec spec = Confined("");
  spec.argv = {"/bin/sh", "-c", "while :; do :; done"};
  auto p = launcher_->Start(spec);
  ASSERT_TRUE(p.ok()) << p.status();
  double cpu = 0;
  for (absl::Time deadline = absl::Now() + absl::Seconds(20); cpu < 0.2 && absl::Now() < deadline;) {
    auto c = (*p)->CpuSeconds();
    ASSERT_TRUE(c.ok()) << c.status();
    cpu = *c;
  }
  EXPECT_GE(cpu, 0.2);
  (*p)->Finish(absl::ZeroDuration());
}

TEST_F(LauncherTest, SandboxFailuresAreErrorsNeverAFallback) {
  REQUIRE_SANDBOX();
  // The node's own user (root): refused before anything runs.
  ProcessSpec root_spec = Shell("true");
  root_spec.confinement = Confinement{};
  auto refused = launcher_->Run(root_spec);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("user of its own"));
  // A path that is not there: the sandbox cannot be set up.
  auto missing = launcher_->Run(
      Confined("true", Confinement{.read_only = {TestTmpDir() + "/no-such-dir"}}));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no-such-dir"));
  // A working directory the sandbox does not contain: bwrap gives up.
  ProcessSpec outside = Confined("true");
  outside.working_dir = TestTmpDir();
  auto unset = launcher_->Run(outside);
  ASSERT_FALSE(unset.ok());
  EXPECT_THAT(std::string(unset.status().message()), HasSubstr("cannot set up the sandbox"));
  // bubblewrap missing.
  SandboxOptions no_bwrap{.scratch_root = TestTmpDir(), .bwrap = "/nonexistent/bwrap"};
  EXPECT_THAT(std::string(CheckSandbox(no_bwrap).message()), HasSubstr("bubblewrap"));
  auto r = NewSandboxLauncher(no_bwrap)->Run(Confined("true"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/nonexistent/bwrap"));
}

TEST_F(LauncherTest, UnsafeNoSandboxRunsUnconfinedAndSaysSo) {
  auto launcher = NewSandboxLauncher(SandboxOptions{.scratch_root = TestTmpDir(), .unsafe_no_sandbox = true});
  auto r = launcher->Run(Confined("id -u"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->sandboxed);
  EXPECT_EQ(ReadFile(TestTmpDir() + "/out.txt"), absl::StrCat(getuid(), "\n"));
}

}  // namespace
}  // namespace densegate::platform
