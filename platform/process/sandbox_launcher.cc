// SandboxLauncher: fork + exec with a process group, rlimits and an
// allow-listed environment. A confined command is exec'd as bubblewrap
// (bwrap) under the arm's own user, which builds its sandbox and then runs
// the command; an unconfined one (the node's git) gets the launcher's network
// namespace, whose only interface is loopback, and a private temporary
// directory. The child's side of the fork is internal/child_process.h; a
// shared sandbox's namespaces are internal/sandbox.h.
#include <fcntl.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "platform/process/internal/child_process.h"
#include "platform/process/internal/linux.h"
#include "platform/process/internal/sandbox.h"
#include "platform/process/launcher.h"
#include "platform/process/seccomp_filter.h"

namespace densegate::platform {
namespace {

// The child's side, the sandbox state and the system helpers.
using namespace internal;  // NOLINT(build/namespaces)

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
    if (absl::Status s = StageBinds(c, p, &binds); !s.ok()) return s;
    std::vector<std::pair<int, std::string>> namespaces;
    if (!c.sandbox.empty()) {
      if (absl::Status s = HoldSharedSandbox(c, p, &namespaces); !s.ok()) return s;
      for (const auto& [fd, option] : namespaces) next = std::max(next, fd + 1);
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

  // Stages each path the confinement gives (read-only, then writable) under
  // p->staging, for the child to bind there as root; *binds gets bwrap's
  // option for each, in p->stage's order.
  static absl::Status StageBinds(const Confinement& c, PreparedSandbox* p,
                                 std::vector<std::pair<std::string, const char*>>* binds) {
    if (c.read_only.empty() && c.writable.empty()) return absl::OkStatus();
    std::string tmpl = "/tmp/densegate-binds.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr || chmod(tmpl.c_str(), 0755) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot stage binds in /tmp: ",
                                                 std::strerror(errno)));
    }
    p->staging = tmpl;
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
      binds->push_back({staged, option});
      return absl::OkStatus();
    };
    for (const std::string& path : c.read_only) {
      if (absl::Status s = bind(path, "--ro-bind"); !s.ok()) return s;
    }
    for (const std::string& path : c.writable) {
      if (absl::Status s = bind(path, "--bind"); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // The namespaces of the shared sandbox c.sandbox, started on first use
  // (or again when its holder is gone): copies of their descriptors, owned
  // by *p, with bwrap's option for each in *namespaces, and its network
  // namespace in p->netns.
  absl::Status HoldSharedSandbox(const Confinement& c, PreparedSandbox* p,
                                 std::vector<std::pair<int, std::string>>* namespaces) {
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
      namespaces->push_back({copy, option});
    }
    p->netns = fcntl(box.netns, F_DUPFD_CLOEXEC, 0);
    if (p->netns < 0) return absl::UnavailableError("cannot hold the sandbox's network");
    p->owned.push_back(p->netns);
    return absl::OkStatus();
  }

  // A child's pipes: the status report (both ends above kReadyFd), and for
  // Start its stdin and stdout. Closed here unless taken.
  struct Pipes {
    int report[2] = {-1, -1}, in[2] = {-1, -1}, out[2] = {-1, -1};
    Pipes() = default;
    Pipes(const Pipes&) = delete;
    Pipes& operator=(const Pipes&) = delete;
    ~Pipes() {
      for (int* fd : {&report[0], &report[1], &in[0], &in[1], &out[0], &out[1]}) CloseFd(*fd);
    }
    absl::Status Open(bool piped) {
      if (pipe2(report, O_CLOEXEC) != 0 ||
          (piped && (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0))) {
        return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
      }
      // The child writes its report last, after it has placed kReadyFd: the
      // report pipe must not be the descriptor that placement overwrites.
      for (int& fd : report) {
        int high = fcntl(fd, F_DUPFD_CLOEXEC, kReadyFd + 1);
        if (high < 0) return absl::UnavailableError(absl::StrCat("fcntl: ", std::strerror(errno)));
        close(fd);
        fd = high;
      }
      return absl::OkStatus();
    }
    int Highest() const { return std::max({report[0], report[1], in[0], in[1], out[0], out[1]}); }
  };

  // The command line a child execs, and its environment, kept alive here
  // for the char* arrays RunChild is given.
  struct CommandLine {
    std::string program;
    std::vector<std::string> args, env;
    std::vector<char*> argv, envp;
  };

  // argv[0] resolved against the sandbox PATH now (after fork only
  // async-signal-safe calls are allowed; the system is the same inside),
  // and for a confined command bwrap's arguments, then the trusted shell
  // that reports the sandbox ready and becomes the command.
  CommandLine MakeCommandLine(const ProcessSpec& spec, bool confined,
                              const PreparedSandbox& sandbox, const std::string& scratch) const {
    CommandLine line;
    line.env = Environment(spec, confined ? "/tmp" : scratch);
    line.program = spec.argv[0];
    if (line.program.find('/') == std::string::npos) {
      for (absl::string_view dir : absl::StrSplit(options_.path, ':')) {
        std::string candidate = absl::StrCat(dir, "/", line.program);
        if (access(candidate.c_str(), X_OK) == 0) {
          line.program = candidate;
          break;
        }
      }
    }
    if (confined) {
      line.args = sandbox.args;
      line.args.insert(line.args.end(),
                       {"--", "/bin/sh", "-c",
                        absl::StrFormat("printf . >&%d && exec %d>&- && exec \"$0\" \"$@\"",
                                        kReadyFd, kReadyFd),
                        line.program});
      line.args.insert(line.args.end(), spec.argv.begin() + 1, spec.argv.end());
      line.program = options_.bwrap;
    } else {
      line.args = spec.argv;
    }
    for (std::string& s : line.args) line.argv.push_back(s.data());
    line.argv.push_back(nullptr);
    for (std::string& s : line.env) line.envp.push_back(s.data());
    line.envp.push_back(nullptr);
    return line;
  }

  absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const ProcessSpec& spec, bool piped) {
    if (spec.argv.empty()) return absl::InvalidArgumentError("empty command line");
    const bool confined = Confined(spec);
    Pipes pipes;
    if (absl::Status s = pipes.Open(piped); !s.ok()) return s;
    // Unconfined commands share the launcher's namespace; a confinement
    // ignored under unsafe_no_sandbox still keeps the network out.
    const bool launcher_network = !confined && (spec.isolate_network || spec.confinement.has_value());
    PreparedSandbox sandbox;
    if (confined) {
      if (absl::Status s = PrepareSandbox(spec, pipes.Highest() + 1, &sandbox); !s.ok()) return s;
    } else if (launcher_network) {
      std::call_once(network_namespace_once_,
                     [this] { network_namespace_ = NewNetworkNamespace(); });
    }
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
    CommandLine line = MakeCommandLine(spec, confined, sandbox, scratch);
    ChildPlan plan;
    plan.spec = &spec;
    plan.confined = confined;
    plan.piped = piped;
    plan.stdin_fd = pipes.in[0];
    plan.stdout_fd = pipes.out[1];
    plan.report_fd = pipes.report[1];
    plan.network_namespace = confined ? sandbox.netns : (launcher_network ? network_namespace_ : -1);
    plan.sandbox = &sandbox;
    plan.scratch = scratch.c_str();
    plan.program = line.program.c_str();
    plan.argv = line.argv.data();
    plan.envp = line.envp.data();
    CPU_ZERO(&plan.cpus);
    for (int c : spec.cpus) CPU_SET(c, &plan.cpus);
    if (confined) {
      plan.uid = spec.confinement->uid;
      plan.gid = spec.confinement->gid;
      plan.max_processes = spec.confinement->max_processes;
    }

    const absl::Time start = absl::Now();
    const pid_t pid = fork();
    if (pid < 0) {
      RemoveTree(scratch);
      return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    if (pid == 0) RunChild(plan);
    setpgid(pid, pid);  // Also done by the child; whichever runs first wins.
    CloseFd(pipes.report[1]);
    CloseFd(pipes.in[0]);
    CloseFd(pipes.out[1]);
    if (confined) CloseFd(sandbox.ready[1]);
    // The child writes one report before exec and a second only if exec
    // failed; EOF comes when exec succeeds (close-on-exec).
    ChildReport first{}, second{};
    ssize_t n1 = read(pipes.report[0], &first, sizeof(first));
    ssize_t n2 = first.failed_step == 0 ? read(pipes.report[0], &second, sizeof(second)) : 0;
    CloseFd(pipes.report[0]);
    const int pidfd = PidfdOpen(pid);
    auto child = std::make_unique<ChildProcess>(
        pid, pidfd, piped ? pipes.in[1] : -1, piped ? pipes.out[0] : -1, start, scratch,
        n1 == sizeof(first) && first.network_isolated != 0, spec.wall_timeout, confined);
    pipes.in[1] = pipes.out[0] = -1;  // The child process owns them now.
    if ((n1 == sizeof(first) && first.failed_step != 0) ||
        (n2 == sizeof(second) && second.failed_step != 0)) {
      child->WaitAndReap(absl::InfiniteDuration());
      return ChildFailed(first.failed_step != 0 ? first : second, spec, line.program, plan.uid);
    }
    if (pidfd < 0) {
      child->WaitAndReap(absl::ZeroDuration());
      return absl::UnavailableError(absl::StrCat("pidfd_open: ", std::strerror(errno)));
    }
    if (confined) {
      if (absl::Status s = AwaitSandbox(spec, sandbox.ready[0], pidfd, child.get()); !s.ok()) {
        return s;
      }
    }
    return child;
  }

  // What a child's report of a failed step before exec says.
  static absl::Status ChildFailed(const ChildReport& failure, const ProcessSpec& spec,
                                  const std::string& program, uint32_t uid) {
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
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot %s %s: %s", what, target, std::strerror(failure.error)));
  }

  // Waits for the one byte the trusted shell writes from inside the
  // sandbox: it is up and the command starting. EOF, or bwrap gone first:
  // it gave up, and its reason is on stderr.
  static absl::Status AwaitSandbox(const ProcessSpec& spec, int ready_fd, int pidfd,
                                   ChildProcess* child) {
    char byte = 0;
    pollfd p[2] = {{ready_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int ready;
    do {
      ready = poll(p, 2, 60000);
    } while (ready < 0 && errno == EINTR);
    // Whichever woke us, only a byte written before bwrap exited counts.
    if (ready > 0 && poll(p, 1, 0) == 1 && read(ready_fd, &byte, 1) == 1) return absl::OkStatus();
    ProcessResult r = child->WaitAndReap(absl::ZeroDuration());
    std::string why = r.Describe();
    if (!spec.stderr_path.empty()) {
      absl::StrAppend(&why, ": ", absl::StripAsciiWhitespace(ReadOutputFile(spec.stderr_path)));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot set up the sandbox for %s: bwrap %s", spec.argv[0], why));
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
std::unique_ptr<ProcessLauncher> NewSandboxLauncher(SandboxOptions options) {
  return std::make_unique<SandboxLauncher>(std::move(options));
}

}  // namespace densegate::platform

