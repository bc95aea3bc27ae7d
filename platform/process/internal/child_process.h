// One child process of the launcher, both sides of its fork: RunChild, what
// the child does from fork to exec (process group, affinity, rlimits,
// network namespace, staged binds, descriptors, user), and ChildProcess, the
// parent's handle that waits for it, times it and reaps its process group.
// Private to platform/process.
//
// Thread-safety: RunChild runs in a child forked from a threaded process,
// so it makes only async-signal-safe calls on what ChildPlan prepared.
// A ChildProcess is used by one thread at a time.
#ifndef DENSEGATE_PLATFORM_PROCESS_INTERNAL_CHILD_PROCESS_H_
#define DENSEGATE_PLATFORM_PROCESS_INTERNAL_CHILD_PROCESS_H_

#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/process/internal/sandbox.h"
#include "platform/process/launcher.h"

namespace densegate::platform::internal {

// What the child reports through its close-on-exec status pipe before exec:
// whether the network namespace was entered, and if exec failed, why.
struct ChildReport {
  int failed_step = 0;  // 0: none; else a ChildStep.
  int error = 0;
  int network_isolated = 0;
};
enum ChildStep { kNone = 0, kChdir, kStdout, kStderr, kExec, kFds, kNetwork, kUser, kBind };

// Inside a sandbox, the trusted /bin/sh writes one byte to this descriptor
// just before it becomes the command: the proof that bwrap set the sandbox
// up. (A single digit: dash redirects only those; inherit_fds must not use
// it.)
constexpr int kReadyFd = 9;

// Everything RunChild needs, built before fork.
struct ChildPlan {
  const ProcessSpec* spec = nullptr;
  bool confined = false;
  // Stdin and stdout are the pipes below (Start), else files (Run).
  bool piped = false;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int report_fd = -1;  // The status pipe's write end (above kReadyFd).
  int network_namespace = -1;  // Entered when >= 0.
  const PreparedSandbox* sandbox = nullptr;
  const char* scratch = "";  // The working directory when the spec has none.
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  cpu_set_t cpus;
  uint32_t uid = 0;
  uint32_t gid = 0;
  int64_t max_processes = 0;
};

// The child's side, from fork to exec; never returns. A failed step is
// reported through plan.report_fd (ChildReport) before exit 127.
[[noreturn]] void RunChild(const ChildPlan& plan);

class ChildProcess : public RunningProcess {
 public:
  ChildProcess(pid_t pid, int pidfd, int stdin_fd, int stdout_fd, absl::Time start,
               std::string scratch, bool network_isolated, absl::Duration timeout,
               bool sandboxed)
      : pid_(pid), pidfd_(pidfd), stdin_fd_(stdin_fd), stdout_fd_(stdout_fd), start_(start),
        scratch_(std::move(scratch)), network_isolated_(network_isolated), sandboxed_(sandboxed),
        timeout_(timeout) {}
  ~ChildProcess() override {
    if (!finished_) Finish(absl::ZeroDuration());
  }

  int pid() const override { return pid_; }
  int stdin_fd() const override { return stdin_fd_; }
  int stdout_fd() const override { return stdout_fd_; }
  // Every process of the group: a sandboxed command runs below bwrap, and
  // work handed to a forked helper counts too.
  absl::StatusOr<double> CpuSeconds() const override;
  ProcessResult Finish(absl::Duration grace) override;

  // Waits for the exit for at most `wait` (infinite: until it exits), asking
  // `watch` (when set) about twice a second whether to stop it, then kills
  // the process group. `at_limit` (when set) is asked once more before that
  // kill, so that what ran into a limit is named even when the command
  // ended first (a fork bomb's script fails as its forks do).
  ProcessResult WaitAndReap(absl::Duration wait,
                            const std::function<std::string()>& watch = nullptr,
                            const std::function<std::string()>& at_limit = nullptr);
  absl::Duration RemainingTimeout() const {
    return std::max(absl::ZeroDuration(), timeout_ - (absl::Now() - start_));
  }

 private:
  pid_t pid_;
  int pidfd_;
  int stdin_fd_;
  int stdout_fd_;
  absl::Time start_;
  std::string scratch_;
  bool network_isolated_;
  bool sandboxed_;
  absl::Duration timeout_;
  bool finished_ = false;
};

}  // namespace densegate::platform::internal

#endif  // DENSEGATE_PLATFORM_PROCESS_INTERNAL_CHILD_PROCESS_H_
