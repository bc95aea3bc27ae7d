// SandboxLauncher: fork + exec with a process group, rlimits, a private
// temporary directory, an allow-listed environment and, where permitted, the
// launcher's network namespace, whose only interface is loopback.
#include <fcntl.h>
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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "harness/process/launcher.h"

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
enum ChildStep { kNone = 0, kChdir, kStdout, kStderr, kExec, kFds };

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

std::string RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ec ? dir : "";
}

class ChildProcess : public RunningProcess {
 public:
  ChildProcess(pid_t pid, int pidfd, int stdin_fd, int stdout_fd,
               absl::Time start, std::string scratch, bool network_isolated,
               absl::Duration timeout)
      : pid_(pid), pidfd_(pidfd), stdin_fd_(stdin_fd), stdout_fd_(stdout_fd),
        start_(start), scratch_(std::move(scratch)),
        network_isolated_(network_isolated), timeout_(timeout) {}
  ~ChildProcess() override {
    if (!finished_) Finish(absl::ZeroDuration());
  }

  int pid() const override { return pid_; }
  int stdin_fd() const override { return stdin_fd_; }
  int stdout_fd() const override { return stdout_fd_; }

  absl::StatusOr<double> CpuSeconds() const override {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    // Fields after the parenthesized command name; utime and stime are the
    // 14th and 15th fields of the line.
    size_t close = text.rfind(')');
    if (close == std::string::npos) {
      return absl::NotFoundError(absl::StrFormat("process %d is gone", pid_));
    }
    std::vector<std::string> fields =
        absl::StrSplit(text.substr(close + 2), ' ', absl::SkipEmpty());
    if (fields.size() < 13) return absl::InternalError("short /proc stat");
    double ticks = std::stod(fields[11]) + std::stod(fields[12]);
    return ticks / sysconf(_SC_CLK_TCK);
  }

  // Waits for the exit for at most `wait` (infinite: until it exits), then
  // kills the process group.
  ProcessResult WaitAndReap(absl::Duration wait) {
    ProcessResult result;
    result.network_isolated = network_isolated_;
    pollfd p{pidfd_, POLLIN, 0};
    int timeout_ms = wait == absl::InfiniteDuration()
                         ? -1
                         : static_cast<int>(absl::ToInt64Milliseconds(wait));
    int ready;
    do {
      ready = poll(&p, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready == 0) result.timed_out = true;
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
  absl::Duration timeout_;
  bool finished_ = false;
};

class SandboxLauncher : public ProcessLauncher {
 public:
  explicit SandboxLauncher(SandboxOptions options) : options_(std::move(options)) {}
  ~SandboxLauncher() override {
    if (network_namespace_ >= 0) close(network_namespace_);
  }

  absl::StatusOr<ProcessResult> Run(const ProcessSpec& spec) override {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = Spawn(spec, false);
    if (!child.ok()) return child.status();
    return (*child)->WaitAndReap(spec.wall_timeout);
  }

  absl::StatusOr<std::unique_ptr<RunningProcess>> Start(const ProcessSpec& spec) override {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = Spawn(spec, true);
    if (!child.ok()) return child.status();
    return std::unique_ptr<RunningProcess>(std::move(*child));
  }

 private:
  // Environment for the child: base, pass-through, then the spec's own.
  std::vector<std::string> Environment(const ProcessSpec& spec,
                                       const std::string& scratch) const {
    std::map<std::string, std::string> env = {
        {"PATH", options_.path}, {"HOME", scratch}, {"TMPDIR", scratch}};
    for (const std::string& name : options_.pass_through) {
      if (const char* v = std::getenv(name.c_str())) env[name] = v;
    }
    for (const auto& [k, v] : spec.env) env[k] = v;
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
    return out;
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec,
                                                      bool piped) {
    if (spec.argv.empty()) return absl::InvalidArgumentError("empty command line");
    if (spec.isolate_network) {
      std::call_once(network_namespace_once_,
                     [this] { network_namespace_ = NewNetworkNamespace(); });
    }
    const int network_namespace = spec.isolate_network ? network_namespace_ : -1;
    std::string tmpl = absl::StrCat(options_.scratch_root, "/densegate-sandbox.XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot create a private temporary directory under %s: %s",
          options_.scratch_root, std::strerror(errno)));
    }
    std::string scratch = tmpl;
    std::vector<std::string> env_strings = Environment(spec, scratch);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = spec.argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    // Resolve argv[0] against the sandbox PATH now: after fork only
    // async-signal-safe calls are allowed.
    std::string program = args[0];
    if (program.find('/') == std::string::npos) {
      for (absl::string_view dir : absl::StrSplit(options_.path, ':')) {
        std::string candidate = absl::StrCat(dir, "/", program);
        if (access(candidate.c_str(), X_OK) == 0) {
          program = candidate;
          break;
        }
      }
    }

    int report_pipe[2], in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    if (pipe2(report_pipe, O_CLOEXEC) != 0 ||
        (piped && (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0))) {
      RemoveTree(scratch);
      return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    for (int c : spec.cpus) CPU_SET(c, &cpus);

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
      if (network_namespace >= 0 && setns(network_namespace, CLONE_NEWNET) == 0) {
        report.network_isolated = 1;
      }
      if (chdir(spec.working_dir.empty() ? scratch.c_str() : spec.working_dir.c_str()) != 0) {
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
      for (const auto& [child_fd, parent_fd] : spec.inherit_fds) {
        if (parent_fd == child_fd) {
          // dup2 onto itself is a no-op that keeps CLOEXEC: clear it.
          if (fcntl(child_fd, F_SETFD, 0) < 0) fail(kFds);
        } else if (dup2(parent_fd, child_fd) < 0) {
          fail(kFds);  // dup2 clears CLOEXEC on the copy.
        }
      }
      (void)!write(report_pipe[1], &report, sizeof(report));
      execve(program.c_str(), argv.data(), envp.data());
      report.network_isolated = 0;
      fail(kExec);
    }

    // Parent.
    setpgid(pid, pid);  // Also done by the child; whichever runs first wins.
    close(report_pipe[1]);
    if (piped) {
      close(in_pipe[0]);
      close(out_pipe[1]);
    }
    // The child writes one report before exec and a second only if exec
    // failed; EOF comes when exec succeeds (close-on-exec).
    ChildReport first{}, second{};
    ssize_t n1 = read(report_pipe[0], &first, sizeof(first));
    ssize_t n2 = first.failed_step == 0 ? read(report_pipe[0], &second, sizeof(second)) : 0;
    close(report_pipe[0]);
    int pidfd = PidfdOpen(pid);
    auto child = std::make_unique<ChildProcess>(
        pid, pidfd, piped ? in_pipe[1] : -1, piped ? out_pipe[0] : -1, start,
        scratch, n1 == sizeof(first) && first.network_isolated != 0,
        spec.wall_timeout);
    const ChildReport& failure = first.failed_step != 0 ? first : second;
    if ((n1 == sizeof(first) && first.failed_step != 0) ||
        (n2 == sizeof(second) && second.failed_step != 0)) {
      child->WaitAndReap(absl::InfiniteDuration());
      const char* what = failure.failed_step == kChdir    ? "enter the working directory"
                         : failure.failed_step == kStdout ? "open the stdout file"
                         : failure.failed_step == kStderr ? "open the stderr file"
                         : failure.failed_step == kFds    ? "pass file descriptors"
                                                          : "execute";
      std::string target = failure.failed_step == kChdir ? spec.working_dir
                           : failure.failed_step == kExec ? program
                                                          : "";
      return absl::FailedPreconditionError(absl::StrFormat(
          "cannot %s %s: %s", what, target, std::strerror(failure.error)));
    }
    if (pidfd < 0) {
      child->WaitAndReap(absl::ZeroDuration());
      return absl::UnavailableError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
    }
    return child;
  }

  SandboxOptions options_;
  // Shared by every isolated process this launcher starts, so that a server
  // one command leaves behind for the next (Bazel's, on a loopback port) is
  // reachable from it; a namespace per process made each Bazel command kill
  // and restart its server, 7 s instead of 0.5 s for a no-op build.
  std::once_flag network_namespace_once_;
  int network_namespace_ = -1;
};

}  // namespace

std::string ProcessResult::Describe() const {
  if (timed_out) {
    return absl::StrFormat("killed: wall timeout after %.1f s", wall_seconds);
  }
  if (term_signal != 0) {
    return absl::StrFormat("killed by signal %d (%s) after %.2f s", term_signal,
                           strsignal(term_signal), wall_seconds);
  }
  return absl::StrFormat("exited with %d after %.2f s", exit_code, wall_seconds);
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
