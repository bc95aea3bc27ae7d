#include "platform/process/internal/child_process.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "platform/process/internal/linux.h"

namespace densegate::platform::internal {

void RunChild(const ChildPlan& plan) {
  const ProcessSpec& spec = *plan.spec;
  const PreparedSandbox& sandbox = *plan.sandbox;
  const bool confined = plan.confined;
  ChildReport report;
  auto fail = [&](int step) {
    report.failed_step = step;
    report.error = errno;
    (void)!write(plan.report_fd, &report, sizeof(report));
    _exit(127);
  };
  setpgid(0, 0);
  if (!spec.cpus.empty()) sched_setaffinity(0, sizeof(plan.cpus), &plan.cpus);
  auto limit = [](int resource, int64_t value) {
    if (value <= 0) return;
    rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
    setrlimit(resource, &rl);
  };
  limit(RLIMIT_CPU, spec.limits.cpu_seconds);
  limit(RLIMIT_AS, spec.limits.address_space_bytes);
  limit(RLIMIT_FSIZE, spec.limits.file_size_bytes);
  limit(RLIMIT_NPROC, plan.max_processes);
  if (plan.network_namespace >= 0) {
    if (setns(plan.network_namespace, CLONE_NEWNET) == 0) {
      report.network_isolated = 1;
    } else if (confined) {
      fail(kNetwork);
    }
  } else if (confined) {
    report.network_isolated = 1;  // bwrap --unshare-net.
  }
  if (!sandbox.stage.empty()) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail(kBind);
    }
    for (const auto& [path, staged] : sandbox.stage) {
      if (mount(path.c_str(), staged.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
        fail(kBind);
      }
    }
  }
  if (chdir(spec.working_dir.empty() ? (confined ? "/" : plan.scratch)
                                     : spec.working_dir.c_str()) != 0) {
    fail(kChdir);
  }
  if (plan.piped) {
    dup2(plan.stdin_fd, 0);
    dup2(plan.stdout_fd, 1);
  } else {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    int out = spec.stdout_path.empty()
                  ? open("/dev/null", O_WRONLY)
                  : open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0) fail(kStdout);
    dup2(out, 1);
  }
  int err = spec.stderr_path.empty()
                ? open("/dev/null", O_WRONLY)
                : open(spec.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err < 0) fail(kStderr);
  dup2(err, 2);
  // The sandbox's descriptors first: they are above every source.
  for (const auto& [child_fd, parent_fd] : sandbox.fds) {
    if (dup2(parent_fd, child_fd) < 0) fail(kFds);
  }
  for (const auto& [child_fd, parent_fd] : spec.inherit_fds) {
    if (parent_fd != child_fd && dup2(parent_fd, child_fd) < 0) fail(kFds);
  }
  if (confined && (dup2(sandbox.ready_high, kReadyFd) < 0 || close(sandbox.ready_high) != 0)) {
    fail(kFds);
  }
  // Nothing the node holds open reaches the command but what it is
  // given: every other descriptor closes on exec.
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) fail(kFds);
  using FdList = const std::vector<std::pair<int, int>>*;
  for (FdList fds : {FdList{&sandbox.fds}, FdList{&spec.inherit_fds}}) {
    for (const auto& [child_fd, parent_fd] : *fds) {
      if (child_fd != sandbox.ready_high && fcntl(child_fd, F_SETFD, 0) < 0) fail(kFds);
    }
  }
  if (confined && fcntl(kReadyFd, F_SETFD, 0) < 0) fail(kFds);
  if (confined && !BecomeUser(plan.uid, plan.gid)) fail(kUser);
  (void)!write(plan.report_fd, &report, sizeof(report));
  execve(plan.program, plan.argv, plan.envp);
  report.network_isolated = 0;
  fail(kExec);
  _exit(127);  // Not reached: fail() exits.
}

absl::StatusOr<double> ChildProcess::CpuSeconds() const {
  double ticks = 0;
  bool found = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    // read(2), not a stream: a process that exits meanwhile fails the
    // read with ESRCH, which libstdc++'s stream iterators throw on.
    std::string text = ReadProcFile(entry.path() / "stat");
    // Fields after the parenthesized command name: state is the 3rd
    // field of the line, pgrp the 5th, utime and stime the 14th and 15th.
    size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size()) continue;
    std::vector<std::string> fields =
        absl::StrSplit(text.substr(close + 2), ' ', absl::SkipEmpty());
    int pgrp = 0;
    if (fields.size() < 13 || !absl::SimpleAtoi(fields[2], &pgrp) || pgrp != pid_) continue;
    found = true;
    ticks += std::stod(fields[11]) + std::stod(fields[12]);
  }
  if (!found) return absl::NotFoundError(absl::StrFormat("process %d is gone", pid_));
  return ticks / sysconf(_SC_CLK_TCK);
}

ProcessResult ChildProcess::WaitAndReap(absl::Duration wait,
                                        const std::function<std::string()>& watch,
                                        const std::function<std::string()>& at_limit) {
  ProcessResult result;
  result.network_isolated = network_isolated_;
  result.sandboxed = sandboxed_;
  pollfd p{pidfd_, POLLIN, 0};
  // On the monotonic clock: a step of the wall clock must not move it.
  using Steady = std::chrono::steady_clock;
  const bool forever = wait == absl::InfiniteDuration();
  const Steady::time_point deadline = Steady::now() + absl::ToChronoNanoseconds(
                                                          forever ? absl::ZeroDuration() : wait);
  while (true) {
    const absl::Duration left =
        forever ? absl::InfiniteDuration() : absl::FromChrono(deadline - Steady::now());
    absl::Duration slice = watch ? std::min(left, absl::Milliseconds(500)) : left;
    const int timeout_ms = slice == absl::InfiniteDuration()
                               ? -1
                               : static_cast<int>(std::max<int64_t>(
                                     0, absl::ToInt64Milliseconds(absl::Ceil(
                                            slice, absl::Milliseconds(1)))));
    int ready;
    do {
      ready = poll(&p, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready != 0) break;
    if (!forever && Steady::now() >= deadline) {
      result.timed_out = true;
      break;
    }
    if (!watch) continue;  // Woken a little early: the timeout rounds down.
    if (std::string reason = watch(); !reason.empty()) {
      result.stopped = std::move(reason);
      break;
    }
  }
  if (result.stopped.empty() && at_limit) result.stopped = at_limit();
  // Whatever happened, nothing of the group may outlive the command.
  kill(-pid_, SIGKILL);
  int status = 0;
  rusage usage{};
  while (wait4(pid_, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  result.user_seconds = Seconds(usage.ru_utime);
  result.system_seconds = Seconds(usage.ru_stime);
  result.max_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  finished_ = true;
  close(pidfd_);
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdin_fd_ = stdout_fd_ = -1;
  RemoveTree(scratch_);
  return result;
}

ProcessResult ChildProcess::Finish(absl::Duration grace) {
  if (stdin_fd_ >= 0) {
    close(stdin_fd_);
    stdin_fd_ = -1;
  }
  return WaitAndReap(std::min(grace, RemainingTimeout()));
}

}  // namespace densegate::platform::internal
