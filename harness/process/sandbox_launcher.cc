// SandboxLauncher: fork + exec with a process group, rlimits and an
// allow-listed environment. A confined command is exec'd as bubblewrap
// (bwrap) under the arm's own user, which builds its sandbox and then runs
// the command; an unconfined one (the node's git) gets the launcher's network
// namespace, whose only interface is loopback, and a private temporary
// directory.
//
// How a shared sandbox (Confinement::sandbox) persists: a "holder" bwrap
// creates the user and PID namespaces and sleeps in them; each command's
// bwrap joins them (--userns/--userns2/--pidns) and the sandbox's network
// namespace, and mounts its own view. Daemons a command leaves behind are
// reparented to the holder's PID 1; killing the holder ends the namespace and
// everything in it.
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/nsfs.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "harness/process/launcher.h"
#include "harness/process/seccomp_filter.h"

extern char** environ;

namespace densegate::harness {
namespace {

// What the child reports through its close-on-exec status pipe before exec:
// whether the network namespace was entered, and if exec failed, why.
struct ChildReport {
  int failed_step = 0;  // 0: none; else the step below.
  int error = 0;
  int network_isolated = 0;
};
enum ChildStep { kNone = 0, kChdir, kStdout, kStderr, kExec, kFds, kNetwork, kUser, kBind };

// Inside a sandbox, the trusted /bin/sh writes one byte to this descriptor
// just before it becomes the command: the proof that bwrap set the sandbox
// up. (A single digit: dash redirects only those; inherit_fds must not use
// it.)
constexpr int kReadyFd = 9;

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

// Brings up loopback in a fresh network namespace (it starts down), so tools
// that talk to themselves over 127.0.0.1 still work.
void LoopbackUp() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &req) == 0) {
    req.ifr_flags |= IFF_UP | IFF_RUNNING;
    ioctl(s, SIOCSIFFLAGS, &req);
  }
  close(s);
}

// A new network namespace with loopback up, held by an fd (-1 where the
// kernel does not let us create one). A short-lived child creates it; the fd
// keeps it alive after the child is gone.
int NewNetworkNamespace() {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  if (pid == 0) {
    // Only async-signal-safe calls: the parent may have threads.
    char ok = unshare(CLONE_NEWNET) == 0 ? 1 : 0;
    if (ok) LoopbackUp();
    (void)!write(ready[1], &ok, 1);
    pause();  // Until the parent has opened the namespace and kills us.
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ssize_t n;
  do {
    n = read(ready[0], &ok, 1);
  } while (n < 0 && errno == EINTR);
  close(ready[0]);
  int fd = -1;
  if (n == 1 && ok == 1) {
    fd = open(absl::StrCat("/proc/", pid, "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return fd;
}

// Tasks (processes and threads) whose real user is `uid`: what RLIMIT_NPROC
// counts. A task that exits while it is read is skipped.
int64_t TasksOfUser(uint32_t uid) {
  int64_t tasks = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !absl::ascii_isdigit(name[0])) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    bool mine = false;
    while (std::getline(status, line)) {
      uint32_t real = 0;
      int64_t threads = 0;
      if (absl::StartsWith(line, "Uid:")) {
        std::vector<std::string> ids = absl::StrSplit(line.substr(4), absl::ByAnyChar(" \t"),
                                                      absl::SkipEmpty());
        mine = !ids.empty() && absl::SimpleAtoi(ids[0], &real) && real == uid;
        if (!mine) break;
      } else if (mine && absl::StartsWith(line, "Threads:") &&
                 absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8)), &threads)) {
        tasks += threads;
        break;
      }
    }
  }
  return tasks;
}

std::string RemoveTree(const std::string& dir) {
  if (dir.empty()) return "";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ec ? dir : "";
}

// A sealed-off copy of `content` for bwrap to read (--seccomp, --ro-bind-data).
absl::StatusOr<int> DataFd(const char* name, const std::string& content) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(name, ": ", std::strerror(errno)));
  if (!WriteAll(fd, content) || lseek(fd, 0, SEEK_SET) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(name, ": ", std::strerror(errno)));
  }
  return fd;
}

// The host's account file with the sandbox user's entry added: programs
// that look themselves up (getpwuid: Java takes user.home from it, so Bazel
// expands --disk_cache=~/... with it) find the arm's HOME.
std::string WithSandboxUser(const char* path, const std::string& entry) {
  std::string text = ReadOutputFile(path);
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text + entry + "\n";
}

// A /proc file's text; empty when it cannot be read (its process is gone).
std::string ReadProcFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      text.clear();
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

class ChildProcess : public RunningProcess {
 public:
  ChildProcess(pid_t pid, int pidfd, int stdin_fd, int stdout_fd,
               absl::Time start, std::string scratch, bool network_isolated,
               absl::Duration timeout, bool sandboxed)
      : pid_(pid), pidfd_(pidfd), stdin_fd_(stdin_fd), stdout_fd_(stdout_fd),
        start_(start), scratch_(std::move(scratch)),
        network_isolated_(network_isolated), sandboxed_(sandboxed), timeout_(timeout) {}
  ~ChildProcess() override {
    if (!finished_) Finish(absl::ZeroDuration());
  }

  int pid() const override { return pid_; }
  int stdin_fd() const override { return stdin_fd_; }
  int stdout_fd() const override { return stdout_fd_; }

  // Every process of the group: a sandboxed command runs below bwrap, and
  // work handed to a forked helper counts too.
  absl::StatusOr<double> CpuSeconds() const override {
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

  // Waits for the exit for at most `wait` (infinite: until it exits), asking
  // `watch` (when set) about twice a second whether to stop it, then kills
  // the process group. `at_limit` (when set) is asked once more before that
  // kill, so that what ran into a limit is named even when the command
  // ended first (a fork bomb's script fails as its forks do).
  ProcessResult WaitAndReap(absl::Duration wait,
                            const std::function<std::string()>& watch = nullptr,
                            const std::function<std::string()>& at_limit = nullptr) {
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

  ProcessResult Finish(absl::Duration grace) override {
    if (stdin_fd_ >= 0) {
      close(stdin_fd_);
      stdin_fd_ = -1;
    }
    return WaitAndReap(std::min(grace, RemainingTimeout()));
  }

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

// The system directories a sandbox sees read-only, at their own paths (a
// top-level symlink such as Debian's /bin -> usr/bin is recreated as one).
constexpr const char* kSystemPaths[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32",
                                        "/lib64", "/libx32", "/etc", "/sys"};

std::vector<std::string> SystemViewArgs() {
  std::vector<std::string> args;
  for (const char* path : kSystemPaths) {
    struct stat st;
    if (lstat(path, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(path, target, sizeof(target) - 1);
      if (n <= 0) continue;
      args.insert(args.end(), {"--symlink", std::string(target, n), path});
    } else {
      args.insert(args.end(), {"--ro-bind", path, path});
    }
  }
  args.insert(args.end(), {"--proc", "/proc", "--dev", "/dev"});
  return args;
}

// Reads bwrap's --info-fd JSON up to its end and returns "child-pid".
absl::StatusOr<pid_t> ReadChildPid(int fd, absl::Duration timeout) {
  std::string text;
  const absl::Time deadline = absl::Now() + timeout;
  while (text.find('}') == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0) return absl::DeadlineExceededError("bwrap reported no sandbox in time");
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, n);
  }
  size_t key = text.find("\"child-pid\":");
  int pid = 0;
  if (key == std::string::npos) {
    return absl::UnavailableError("bwrap exited before its sandbox was set up");
  }
  std::string rest = text.substr(key + 12);
  rest = rest.substr(0, rest.find_first_of(",}"));
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &pid)) {
    return absl::InternalError("unreadable bwrap info: " + text);
  }
  return pid;
}

// Becomes `uid`/`gid` with no supplementary groups and no way back
// (no_new_privs). Only raw system calls, so a child forked from a threaded
// process may call it: glibc's wrappers coordinate threads. Changing user
// makes a process undumpable, which hides its own /proc/self/fd from it;
// bwrap binds through that, so it is made dumpable again.
bool BecomeUser(uint32_t uid, uint32_t gid) {
  return syscall(SYS_setgroups, 0, nullptr) == 0 &&
         syscall(SYS_setresgid, gid, gid, gid) == 0 &&
         syscall(SYS_setresuid, uid, uid, uid) == 0 &&
         prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0;
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// A shared sandbox's namespaces, held by its holder process.
struct SharedSandbox {
  uint32_t uid = 0;
  uint32_t gid = 0;
  pid_t holder = -1;  // The holder's outer bwrap, our child.
  int holder_pidfd = -1;
  int init_pidfd = -1;    // PID 1 of its PID namespace.
  int outer_userns = -1;  // Owns the PID namespace: commands set up in it,
  int inner_userns = -1;  // then run in this one, without capabilities.
  int pidns = -1;
  int netns = -1;

  bool Alive() const {
    pollfd p{holder_pidfd, POLLIN, 0};
    return holder_pidfd >= 0 && poll(&p, 1, 0) == 0;
  }
  // Kills the holder and waits until every process of the namespace is gone.
  void End() {
    if (holder > 0) {
      kill(holder, SIGKILL);
      while (waitpid(holder, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    if (init_pidfd >= 0) {
      // PID 1 exits only once the kernel has killed and reaped the rest.
      pollfd p{init_pidfd, POLLIN, 0};
      while (poll(&p, 1, 30000) < 0 && errno == EINTR) {
      }
    }
    holder = -1;
    for (int* fd : {&holder_pidfd, &init_pidfd, &outer_userns, &inner_userns, &pidns, &netns}) {
      CloseFd(*fd);
    }
  }
};

// What a confined command's child needs, prepared before fork.
struct PreparedSandbox {
  std::vector<std::string> args;  // bwrap's arguments, up to "--".
  // (child fd, parent fd) pairs: the shared sandbox's namespaces, the
  // seccomp program, the ready pipe (at ready_high).
  std::vector<std::pair<int, int>> fds;
  int netns = -1;  // Entered before bwrap runs; -1: bwrap makes its own.
  int seccomp_fd = -1;
  int ready[2] = {-1, -1};
  int ready_high = -1;     // Where the child first places ready[1].
  std::vector<int> owned;  // Closed by the parent after fork.
  // bwrap runs as the arm's user, which may not reach a path to bind (a
  // node's workspace under /root): the child, still root, binds each path
  // onto staging/<i> in a mount namespace of its own, and bwrap binds from
  // there. On the host the staging entries stay empty.
  std::string staging;
  std::vector<std::pair<std::string, std::string>> stage;  // (path, staging/<i>)

  ~PreparedSandbox() {
    if (!staging.empty()) RemoveTree(staging);
    for (int fd : owned) close(fd);
    if (ready[0] >= 0) close(ready[0]);
    if (ready[1] >= 0) close(ready[1]);
  }
};

class SandboxLauncher : public ProcessLauncher {
 public:
  explicit SandboxLauncher(SandboxOptions options) : options_(std::move(options)) {}
  ~SandboxLauncher() override {
    if (network_namespace_ >= 0) close(network_namespace_);
    absl::MutexLock lock(&mu_);
    for (auto& [name, sandbox] : shared_) sandbox.End();
  }

  absl::StatusOr<ProcessResult> Run(const ProcessSpec& spec) override {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = Spawn(spec, false);
    if (!child.ok()) return child.status();
    const std::function<std::string()> at_limit = TaskLimit(spec);
    std::function<std::string()> watch = spec.watch;
    if (at_limit) {
      watch = [at_limit, watch]() {
        std::string reason = at_limit();
        return reason.empty() && watch ? watch() : reason;
      };
    }
    return (*child)->WaitAndReap(spec.wall_timeout, watch, at_limit);
  }

  absl::StatusOr<std::unique_ptr<RunningProcess>> Start(const ProcessSpec& spec) override {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = Spawn(spec, true);
    if (!child.ok()) return child.status();
    return std::unique_ptr<RunningProcess>(std::move(*child));
  }

  void EndSandbox(const std::string& name) override {
    absl::MutexLock lock(&mu_);
    auto it = shared_.find(name);
    if (it == shared_.end()) return;
    it->second.End();
    shared_.erase(it);
  }

 private:
  bool Confined(const ProcessSpec& spec) const {
    return spec.confinement.has_value() && !options_.unsafe_no_sandbox;
  }

  // Names a command of a shared sandbox (a build's, a test's) whose user is
  // at its process limit. Null for the rest: a sandbox of its own dies with
  // its command, and measured runs are not to be woken for this; and where
  // the user is the launcher's own, whose count is not the command's. Fork
  // fails at the limit itself; a sample may come just after a few failed
  // forks exited, so 90% of it counts.
  std::function<std::string()> TaskLimit(const ProcessSpec& spec) const {
    if (!Confined(spec) || spec.confinement->sandbox.empty() ||
        spec.confinement->max_processes <= 0) {
      return nullptr;
    }
    const uint32_t uid = spec.confinement->uid;
    if (uid == 0 || uid == geteuid()) return nullptr;
    const int64_t limit = spec.confinement->max_processes;
    return [uid, limit]() -> std::string {
      const int64_t tasks = TasksOfUser(uid);
      if (tasks * 10 < limit * 9) return "";
      return absl::StrFormat(
          "its user ran %d processes and threads, at its limit of %d: a fork bomb", tasks,
          limit);
    };
  }

  // Environment for the child: base, pass-through, then the spec's own.
  std::vector<std::string> Environment(const ProcessSpec& spec,
                                       const std::string& scratch) const {
    std::map<std::string, std::string> env = {
        {"PATH", options_.path}, {"HOME", scratch}, {"TMPDIR", scratch}};
    for (const std::string& name : options_.pass_through) {
      if (const char* v = std::getenv(name.c_str())) env[name] = v;
    }
    if (Confined(spec)) {
      // The sandbox user's name, as its passwd entry in the sandbox has it
      // (Bazel's client keys its output root by $USER).
      env["USER"] = env["LOGNAME"] = absl::StrCat("densegate-", spec.confinement->uid);
      // LeakSanitizer stops threads with ptrace, which the filter refuses:
      // without this an instrumented program dies at exit (a command may
      // still set its own).
      env["ASAN_OPTIONS"] = "detect_leaks=0";
    }
    for (const auto& [k, v] : spec.env) env[k] = v;
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
    return out;
  }

  absl::StatusOr<std::string> SeccompProgram() {
    absl::MutexLock lock(&mu_);
    if (seccomp_program_.empty()) {
      absl::StatusOr<std::string> program = SandboxSeccompProgram();
      if (!program.ok()) return program.status();
      seccomp_program_ = *program;
    }
    return seccomp_program_;
  }

  // Starts the holder of a shared sandbox. Called with mu_ held.
  absl::StatusOr<SharedSandbox> NewSharedSandbox(const Confinement& c) {
    SharedSandbox box;
    box.uid = c.uid;
    box.gid = c.gid;
    box.netns = NewNetworkNamespace();
    if (box.netns < 0) {
      return absl::FailedPreconditionError(
          "cannot create a network namespace for the sandbox (the node must run as root)");
    }
    int info[2];
    if (pipe2(info, O_CLOEXEC) != 0) {
      box.End();
      return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    std::vector<std::string> args = {options_.bwrap,  "--unshare-user", "--uid",
                                     absl::StrCat(c.uid), "--gid", absl::StrCat(c.gid),
                                     "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                                     "--unshare-cgroup-try", "--disable-userns",
                                     "--die-with-parent", "--info-fd", "3"};
    for (std::string& a : SystemViewArgs()) args.push_back(std::move(a));
    args.insert(args.end(), {"--", "/usr/bin/sleep", "infinity"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    const rlimit nproc{static_cast<rlim_t>(c.max_processes), static_cast<rlim_t>(c.max_processes)};
    pid_t pid = fork();
    if (pid < 0) {
      close(info[0]);
      close(info[1]);
      box.End();
      return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      setpgid(0, 0);
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(info[1], 3);
      if (c.max_processes > 0) setrlimit(RLIMIT_NPROC, &nproc);
      if (!BecomeUser(c.uid, c.gid)) _exit(126);
      syscall(SYS_close_range, 4, ~0U, CLOSE_RANGE_CLOEXEC);
      execve(argv[0], argv.data(), envp);
      _exit(127);
    }
    close(info[1]);
    box.holder = pid;
    box.holder_pidfd = PidfdOpen(pid);
    absl::StatusOr<pid_t> init = ReadChildPid(info[0], absl::Seconds(30));
    close(info[0]);
    if (!init.ok()) {
      box.End();
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot start a sandbox as uid %d with %s: %s", c.uid, options_.bwrap,
          init.status().message()));
    }
    box.init_pidfd = PidfdOpen(*init);
    box.pidns = open(absl::StrCat("/proc/", *init, "/ns/pid").c_str(), O_RDONLY | O_CLOEXEC);
    // Sandboxed processes live in the user namespace of the holder's
    // command (init's child), which bwrap may have nested in init's.
    std::string sleeper = absl::StrCat(*init);
    {
      std::ifstream children(absl::StrCat("/proc/", *init, "/task/", *init, "/children"));
      std::string first;
      for (absl::Time deadline = absl::Now() + absl::Seconds(10);
           !(children >> first) && absl::Now() < deadline;) {
        children.clear();
        children.seekg(0);
        absl::SleepFor(absl::Milliseconds(1));
      }
      if (!first.empty()) sleeper = first;
    }
    box.inner_userns = open(absl::StrCat("/proc/", sleeper, "/ns/user").c_str(), O_RDONLY | O_CLOEXEC);
    box.outer_userns = box.pidns >= 0 ? ioctl(box.pidns, NS_GET_USERNS) : -1;
    if (box.outer_userns >= 0) fcntl(box.outer_userns, F_SETFD, FD_CLOEXEC);
    if (box.init_pidfd < 0 || box.pidns < 0 || box.inner_userns < 0 || box.outer_userns < 0) {
      box.End();
      return absl::UnavailableError("cannot open the namespaces of a new sandbox");
    }
    return box;
  }

  // bwrap's arguments and descriptors for a confined command.
  // `min_fd`: above every descriptor the child still needs (its pipes).
  absl::Status PrepareSandbox(const ProcessSpec& spec, int min_fd, PreparedSandbox* p) {
    const Confinement& c = *spec.confinement;
    if (c.uid == 0 || c.uid == getuid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a sandboxed command must run as a user of its own, not uid %d", c.uid));
    }
    absl::StatusOr<std::string> program = SeccompProgram();
    if (!program.ok()) return program.status();
    absl::StatusOr<int> seccomp = DataFd("densegate-seccomp", *program);
    if (!seccomp.ok()) return seccomp.status();
    p->seccomp_fd = *seccomp;
    p->owned.push_back(p->seccomp_fd);
    auto home = spec.env.find("HOME");
    const std::string user = absl::StrCat("densegate-", c.uid);
    absl::StatusOr<int> passwd = DataFd(
        "densegate-passwd",
        WithSandboxUser("/etc/passwd",
                        absl::StrFormat("%s:x:%d:%d:densegate sandbox:%s:/bin/sh", user, c.uid,
                                        c.gid, home != spec.env.end() ? home->second : "/tmp")));
    if (!passwd.ok()) return passwd.status();
    p->owned.push_back(*passwd);
    absl::StatusOr<int> group = DataFd(
        "densegate-group",
        WithSandboxUser("/etc/group", absl::StrFormat("densegate-%d:x:%d:", c.gid, c.gid)));
    if (!group.ok()) return group.status();
    p->owned.push_back(*group);
    if (pipe2(p->ready, O_CLOEXEC) != 0) {
      return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    // Descriptors land above every descriptor the parent holds, so that
    // placing one never overwrites another's source.
    int next = std::max(16, min_fd);
    for (int fd : p->owned) next = std::max(next, fd + 1);
    next = std::max(next, p->ready[1] + 1);
    for (const auto& [child_fd, parent_fd] : spec.inherit_fds) next = std::max(next, parent_fd + 1);
    std::vector<std::pair<std::string, const char*>> binds;  // (staged, bwrap option)
    if (!c.read_only.empty() || !c.writable.empty()) {
      std::string tmpl = "/tmp/densegate-binds.XXXXXX";
      if (mkdtemp(tmpl.data()) == nullptr || chmod(tmpl.c_str(), 0755) != 0) {
        return absl::UnavailableError(absl::StrCat("cannot stage binds in /tmp: ",
                                                   std::strerror(errno)));
      }
      p->staging = tmpl;
    }
    auto bind = [&](const std::string& path, const char* option) -> absl::Status {
      struct stat st;
      if (stat(path.c_str(), &st) != 0) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "cannot give %s to the sandbox: %s", path, std::strerror(errno)));
      }
      const std::string staged = absl::StrCat(p->staging, "/", p->stage.size());
      int made = S_ISDIR(st.st_mode) ? mkdir(staged.c_str(), 0755)
                                     : close(open(staged.c_str(), O_CREAT | O_WRONLY, 0644));
      if (made != 0) {
        return absl::UnavailableError(absl::StrCat("cannot stage ", path, ": ", std::strerror(errno)));
      }
      p->stage.push_back({path, staged});
      binds.push_back({staged, option});
      return absl::OkStatus();
    };
    for (const std::string& path : c.read_only) {
      if (absl::Status s = bind(path, "--ro-bind"); !s.ok()) return s;
    }
    for (const std::string& path : c.writable) {
      if (absl::Status s = bind(path, "--bind"); !s.ok()) return s;
    }
    // Namespaces of a shared sandbox, started on first use.
    std::vector<std::pair<int, std::string>> namespaces;
    if (!c.sandbox.empty()) {
      absl::MutexLock lock(&mu_);
      auto it = shared_.find(c.sandbox);
      if (it != shared_.end() && (!it->second.Alive() || it->second.uid != c.uid)) {
        it->second.End();
        shared_.erase(it);
        it = shared_.end();
      }
      if (it == shared_.end()) {
        absl::StatusOr<SharedSandbox> box = NewSharedSandbox(c);
        if (!box.ok()) return box.status();
        it = shared_.emplace(c.sandbox, *box).first;
      }
      const SharedSandbox& box = it->second;
      std::vector<std::pair<int, const char*>> held = {{box.outer_userns, "--userns"},
                                                       {box.pidns, "--pidns"}};
      // bwrap nests a second user namespace only for some settings; where it
      // did, commands end in it too.
      struct stat outer, inner;
      if (fstat(box.outer_userns, &outer) == 0 && fstat(box.inner_userns, &inner) == 0 &&
          outer.st_ino != inner.st_ino) {
        held.push_back({box.inner_userns, "--userns2"});
      }
      // Duplicated, so that EndSandbox on another thread cannot close them
      // under this command.
      for (auto [fd, option] : held) {
        int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (copy < 0) return absl::UnavailableError("cannot hold the sandbox's namespaces");
        p->owned.push_back(copy);
        next = std::max(next, copy + 1);
        namespaces.push_back({copy, option});
      }
      p->netns = fcntl(box.netns, F_DUPFD_CLOEXEC, 0);
      if (p->netns < 0) return absl::UnavailableError("cannot hold the sandbox's network");
      p->owned.push_back(p->netns);
    }

    std::vector<std::string>& a = p->args;
    a = {options_.bwrap};
    auto place = [&](int parent_fd) {
      p->fds.push_back({next, parent_fd});
      return absl::StrCat(next++);
    };
    if (c.sandbox.empty()) {
      a.insert(a.end(), {"--unshare-user", "--unshare-pid", "--unshare-net",
                         "--unshare-cgroup-try", "--disable-userns", "--die-with-parent"});
    } else {
      // No --die-with-parent here: joining a PID namespace, bwrap starts the
      // command from an intermediate process that exits at once, and the
      // command's parent-death signal then sometimes killed it (about 1 run
      // in 20). The holder dies with the node and takes the namespace, and
      // so every process of the shared sandbox, with it.
      for (const auto& [fd, option] : namespaces) a.insert(a.end(), {option, place(fd)});
    }
    a.insert(a.end(), {"--uid", absl::StrCat(c.uid), "--gid", absl::StrCat(c.gid),
                       "--unshare-ipc", "--unshare-uts", "--hostname", "densegate-sandbox"});
    for (std::string& arg : SystemViewArgs()) a.push_back(std::move(arg));
    a.insert(a.end(), {"--ro-bind-data", place(*passwd), "/etc/passwd", "--ro-bind-data",
                       place(*group), "/etc/group"});
    a.insert(a.end(), {"--size", absl::StrCat(c.tmp_bytes), "--tmpfs", "/tmp"});
    // Bind mounts in the order given: a later, deeper path overlays.
    for (size_t i = 0; i < binds.size(); ++i) {
      a.insert(a.end(), {binds[i].second, binds[i].first, p->stage[i].first});
    }
    // The skeleton bwrap built around those paths (their parent
    // directories) is not a place to write either.
    a.insert(a.end(), {"--remount-ro", "/"});
    a.insert(a.end(), {"--chdir", spec.working_dir.empty() ? "/tmp" : spec.working_dir,
                       "--seccomp", place(p->seccomp_fd)});
    // Up high like the rest; moved down to kReadyFd last of all in the child.
    p->ready_high = next;
    place(p->ready[1]);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec,
                                                      bool piped) {
    if (spec.argv.empty()) return absl::InvalidArgumentError("empty command line");
    const bool confined = Confined(spec);
    int report_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    absl::Cleanup close_pipes = [&] {
      for (int* fd : {&report_pipe[0], &report_pipe[1], &in_pipe[0], &in_pipe[1], &out_pipe[0],
                      &out_pipe[1]}) {
        CloseFd(*fd);
      }
    };
    if (pipe2(report_pipe, O_CLOEXEC) != 0 ||
        (piped && (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0))) {
      return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    // The child writes its report last, after it has placed kReadyFd: the
    // report pipe must not be the descriptor that placement overwrites.
    for (int& fd : report_pipe) {
      int high = fcntl(fd, F_DUPFD_CLOEXEC, kReadyFd + 1);
      if (high < 0) return absl::UnavailableError(absl::StrCat("fcntl: ", std::strerror(errno)));
      close(fd);
      fd = high;
    }
    // Unconfined commands share the launcher's namespace; a confinement
    // ignored under unsafe_no_sandbox still keeps the network out.
    const bool launcher_network = !confined && (spec.isolate_network || spec.confinement.has_value());
    PreparedSandbox sandbox;
    if (confined) {
      const int min_fd =
          std::max({report_pipe[0], report_pipe[1], in_pipe[0], in_pipe[1], out_pipe[0],
                    out_pipe[1]}) + 1;
      if (absl::Status s = PrepareSandbox(spec, min_fd, &sandbox); !s.ok()) return s;
    } else if (launcher_network) {
      std::call_once(network_namespace_once_,
                     [this] { network_namespace_ = NewNetworkNamespace(); });
    }
    const int network_namespace =
        confined ? sandbox.netns : (launcher_network ? network_namespace_ : -1);
    // Unconfined processes get a private directory on the scratch root; a
    // sandbox has its own /tmp.
    std::string scratch;
    if (!confined) {
      std::string tmpl = absl::StrCat(options_.scratch_root, "/densegate-sandbox.XXXXXX");
      if (mkdtemp(tmpl.data()) == nullptr) {
        return absl::UnavailableError(absl::StrFormat(
            "cannot create a private temporary directory under %s: %s",
            options_.scratch_root, std::strerror(errno)));
      }
      scratch = tmpl;
    }
    std::vector<std::string> env_strings = Environment(spec, confined ? "/tmp" : scratch);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    // Resolve argv[0] against the sandbox PATH now: after fork only
    // async-signal-safe calls are allowed. (The system is the same inside.)
    std::string program = spec.argv[0];
    if (program.find('/') == std::string::npos) {
      for (absl::string_view dir : absl::StrSplit(options_.path, ':')) {
        std::string candidate = absl::StrCat(dir, "/", program);
        if (access(candidate.c_str(), X_OK) == 0) {
          program = candidate;
          break;
        }
      }
    }
    std::vector<std::string> args;
    if (confined) {
      // bwrap, then the trusted shell that reports the sandbox ready and
      // becomes the command.
      args = sandbox.args;
      args.insert(args.end(), {"--", "/bin/sh", "-c",
                               absl::StrFormat("printf . >&%d && exec %d>&- && exec \"$0\" \"$@\"",
                                               kReadyFd, kReadyFd),
                               program});
      args.insert(args.end(), spec.argv.begin() + 1, spec.argv.end());
      program = options_.bwrap;
    } else {
      args = spec.argv;
    }
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);

    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int c : spec.cpus) CPU_SET(c, &cpus);
    const uint32_t uid = confined ? spec.confinement->uid : 0;
    const uint32_t gid = confined ? spec.confinement->gid : 0;
    const int64_t max_processes = confined ? spec.confinement->max_processes : 0;

    absl::Time start = absl::Now();
    pid_t pid = fork();
    if (pid < 0) {
      RemoveTree(scratch);
      return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      // Child: only async-signal-safe calls from here to exec.
      ChildReport report;
      auto fail = [&](int step) {
        report.failed_step = step;
        report.error = errno;
        (void)!write(report_pipe[1], &report, sizeof(report));
        _exit(127);
      };
      setpgid(0, 0);
      if (!spec.cpus.empty()) sched_setaffinity(0, sizeof(cpus), &cpus);
      auto limit = [](int resource, int64_t value) {
        if (value <= 0) return;
        rlimit rl{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
        setrlimit(resource, &rl);
      };
      limit(RLIMIT_CPU, spec.limits.cpu_seconds);
      limit(RLIMIT_AS, spec.limits.address_space_bytes);
      limit(RLIMIT_FSIZE, spec.limits.file_size_bytes);
      limit(RLIMIT_NPROC, max_processes);
      if (network_namespace >= 0) {
        if (setns(network_namespace, CLONE_NEWNET) == 0) {
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
      if (chdir(spec.working_dir.empty() ? (confined ? "/" : scratch.c_str())
                                         : spec.working_dir.c_str()) != 0) {
        fail(kChdir);
      }
      if (piped) {
        dup2(in_pipe[0], 0);
        dup2(out_pipe[1], 1);
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
      if (confined && !BecomeUser(uid, gid)) fail(kUser);
      (void)!write(report_pipe[1], &report, sizeof(report));
      execve(program.c_str(), argv.data(), envp.data());
      report.network_isolated = 0;
      fail(kExec);
    }

    // Parent.
    setpgid(pid, pid);  // Also done by the child; whichever runs first wins.
    CloseFd(report_pipe[1]);
    CloseFd(in_pipe[0]);
    CloseFd(out_pipe[1]);
    if (confined) CloseFd(sandbox.ready[1]);
    // The child writes one report before exec and a second only if exec
    // failed; EOF comes when exec succeeds (close-on-exec).
    ChildReport first{}, second{};
    ssize_t n1 = read(report_pipe[0], &first, sizeof(first));
    ssize_t n2 = first.failed_step == 0 ? read(report_pipe[0], &second, sizeof(second)) : 0;
    CloseFd(report_pipe[0]);
    int pidfd = PidfdOpen(pid);
    auto child = std::make_unique<ChildProcess>(
        pid, pidfd, piped ? in_pipe[1] : -1, piped ? out_pipe[0] : -1, start,
        scratch, n1 == sizeof(first) && first.network_isolated != 0,
        spec.wall_timeout, confined);
    in_pipe[1] = out_pipe[0] = -1;  // The child process owns them now.
    const ChildReport& failure = first.failed_step != 0 ? first : second;
    if ((n1 == sizeof(first) && first.failed_step != 0) ||
        (n2 == sizeof(second) && second.failed_step != 0)) {
      child->WaitAndReap(absl::InfiniteDuration());
      const char* what = failure.failed_step == kChdir     ? "enter the working directory"
                         : failure.failed_step == kStdout  ? "open the stdout file"
                         : failure.failed_step == kStderr  ? "open the stderr file"
                         : failure.failed_step == kFds     ? "pass file descriptors"
                         : failure.failed_step == kNetwork ? "enter the sandbox's network"
                         : failure.failed_step == kUser    ? "switch to the sandbox's user"
                         : failure.failed_step == kBind    ? "stage the sandbox's paths"
                                                           : "execute";
      std::string target = failure.failed_step == kChdir ? spec.working_dir
                           : failure.failed_step == kExec ? program
                           : failure.failed_step == kUser ? absl::StrCat("uid ", uid)
                                                          : "";
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot %s %s: %s", what, target, std::strerror(failure.error)));
    }
    if (pidfd < 0) {
      child->WaitAndReap(absl::ZeroDuration());
      return absl::UnavailableError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
    }
    if (confined) {
      // One byte from inside: the sandbox is up and the command starting.
      // EOF, or bwrap gone first: it gave up; its reason is on stderr.
      char byte = 0;
      pollfd p[2] = {{sandbox.ready[0], POLLIN, 0}, {pidfd, POLLIN, 0}};
      int ready;
      do {
        ready = poll(p, 2, 60000);
      } while (ready < 0 && errno == EINTR);
      // Whichever woke us, only a byte written before bwrap exited counts.
      if (ready <= 0 || poll(p, 1, 0) != 1 || read(sandbox.ready[0], &byte, 1) != 1) {
        ProcessResult r = child->WaitAndReap(absl::ZeroDuration());
        std::string why = r.Describe();
        if (!spec.stderr_path.empty()) {
          absl::StrAppend(&why, ": ", absl::StripAsciiWhitespace(ReadOutputFile(spec.stderr_path)));
        }
        return absl::FailedPreconditionError(absl::StrFormat(
            "cannot set up the sandbox for %s: bwrap %s", spec.argv[0], why));
      }
    }
    return child;
  }

  SandboxOptions options_;
  // Shared by every unconfined isolated process this launcher starts, so
  // that a server one command leaves behind for the next (Bazel's, on a
  // loopback port) is reachable from it; a namespace per process made each
  // Bazel command kill and restart its server, 7 s instead of 0.5 s for a
  // no-op build. Shared sandboxes have one each.
  std::once_flag network_namespace_once_;
  int network_namespace_ = -1;
  absl::Mutex mu_;
  std::map<std::string, SharedSandbox> shared_ ABSL_GUARDED_BY(mu_);
  std::string seccomp_program_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::Status CheckSandbox(const SandboxOptions& options) {
  if (options.unsafe_no_sandbox) return absl::OkStatus();
  if (access(options.bwrap.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the sandbox needs bubblewrap at %s, which is missing: install Debian's bubblewrap "
        "(tools/bootstrap.sh does), or pass --unsafe_no_sandbox for development only",
        options.bwrap));
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "the sandbox runs each arm as a user of its own, which needs the node to run as "
        "root; run it as root, or pass --unsafe_no_sandbox for development only");
  }
  std::unique_ptr<ProcessLauncher> launcher = NewSandboxLauncher(options);
  char dir[] = "/tmp/densegate-sandbox-check.XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  ProcessSpec spec;
  spec.argv = {"/bin/true"};
  spec.stderr_path = std::string(dir) + "/err";
  spec.wall_timeout = absl::Seconds(30);
  spec.confinement = Confinement{.uid = 65534, .gid = 65534};
  absl::StatusOr<ProcessResult> r = launcher->Run(spec);
  std::string err = ReadOutputFile(spec.stderr_path);
  RemoveTree(dir);
  if (!r.ok() || !r->ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "a trial sandbox did not start (%s%s); this kernel must allow user namespaces "
        "(sysctl user.max_user_namespaces > 0)",
        r.ok() ? r->Describe() : std::string(r.status().message()),
        err.empty() ? "" : ": " + std::string(absl::StripAsciiWhitespace(err))));
  }
  return absl::OkStatus();
}

std::string ProcessResult::Describe() const {
  if (!stopped.empty()) return absl::StrFormat("killed: %s, after %.1f s", stopped, wall_seconds);
  if (timed_out) {
    return absl::StrFormat("killed: wall timeout after %.1f s", wall_seconds);
  }
  if (term_signal != 0) {
    return absl::StrFormat("killed by signal %d (%s) after %.2f s", term_signal,
                           strsignal(term_signal), wall_seconds);
  }
  return absl::StrFormat("exited with %d after %.2f s", exit_code, wall_seconds);
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadOutputFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<ProcessLauncher> NewSandboxLauncher(SandboxOptions options) {
  return std::make_unique<SandboxLauncher>(std::move(options));
}

}  // namespace densegate::harness
