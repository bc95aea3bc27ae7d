// Running candidate-controlled commands: builds, tests, benchmarks, kernel
// runners.
//
// ProcessLauncher is densegate's only way to start a process (LevelDB's Env
// habit): tests substitute a fake (testing/fake_launcher.h), and the real
// one, SandboxLauncher, gives
// every command:
//   * its own process group, killed as a whole on timeout or cancellation;
//   * rlimits on CPU time, address space, file size and processes;
//   * an environment built from an allow-list: nothing that says it is being
//     measured, no tokens, no CI variables;
//   * optional CPU affinity, so two nodes on one machine don't share cores.
// A command that runs code from a commit under evaluation carries a
// Confinement, and then runs in a bubblewrap sandbox (see Confinement):
// as an unprivileged user of its own with no capabilities, no_new_privs and
// a seccomp filter (seccomp_filter.h); new user, PID, IPC, UTS and network
// (loopback only) namespaces; a read-only system and only the paths it is
// given; a fresh size-limited /tmp; killed with the node. When the sandbox
// cannot be set up the command fails to start: there is no fallback to
// running it unconfined. The node's own tools (git) run without one.
// The harness's own clock times the process (wall and CPU from rusage), which
// is what self-reported benchmark times are checked against.
//
// Thread-safety: Run, Start and EndSandbox may be called from several threads.
#ifndef DENSEGATE_PLATFORM_PROCESS_LAUNCHER_H_
#define DENSEGATE_PLATFORM_PROCESS_LAUNCHER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace densegate::platform {

struct ResourceLimits {
  // 0 means unlimited.
  int64_t cpu_seconds = 0;
  int64_t address_space_bytes = 0;
  int64_t file_size_bytes = 0;
};

// What a sandboxed process may see and who it runs as.
struct Confinement {
  // Processes with the same non-empty name share one long-lived sandbox: its
  // user, PID and network namespaces, so that a server one command leaves
  // behind (Bazel's) serves the next; it lives until EndSandbox (or the
  // launcher's end) kills it and everything still running in it. Empty: a
  // sandbox of the process's own, ended with it (nothing it starts survives).
  std::string sandbox;
  // Host user and group the process runs as: never the node's own, and one
  // name's processes always use the same pair.
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Bound at their own paths, read-write or read-only. Nothing else of the
  // node's filesystem is visible besides the read-only system (/usr, /etc,
  // /sys), a new /proc and /dev, and the private /tmp. Each must exist.
  std::vector<std::string> writable;
  std::vector<std::string> read_only;
  // Size of the private /tmp (TMPDIR), a tmpfs new for each process.
  int64_t tmp_bytes = int64_t{1} << 30;
  // Processes and threads the user may have at once (RLIMIT_NPROC, counted
  // per host user, so per sandbox user): a fork bomb stops there. A command
  // of a shared sandbox whose user holds 90% of it is killed, and
  // ProcessResult::stopped says "a fork bomb".
  int64_t max_processes = 8192;
};

struct ProcessSpec {
  // argv[0] is an absolute path or a name looked up in the sandbox's PATH.
  std::vector<std::string> argv;
  std::string working_dir;
  // Added to the sandbox's base environment (PATH, LANG, HOME, TMPDIR).
  std::map<std::string, std::string> env;
  // Files receiving the output; empty discards it.
  std::string stdout_path;
  std::string stderr_path;
  // The whole process group is killed (SIGKILL) when it runs longer.
  absl::Duration wall_timeout = absl::Minutes(30);
  ResourceLimits limits;
  bool isolate_network = true;
  // CPU ids the process may run on; empty: any.
  std::vector<int> cpus;
  // File descriptors passed to the child, as (child fd number, parent fd).
  std::vector<std::pair<int, int>> inherit_fds;
  // Set: run sandboxed (see Confinement). isolate_network is then implied.
  std::optional<Confinement> confinement;
  // Run only: called about twice a second while the process runs; a
  // non-empty reason kills the process group (ProcessResult::stopped). E.g.
  // the evaluator's per-arm disk quota.
  std::function<std::string()> watch;
};

struct ProcessResult {
  // Exit status when it exited; -1 when it was killed by a signal.
  int exit_code = -1;
  int term_signal = 0;
  bool timed_out = false;
  // Measured by the harness.
  double wall_seconds = 0;
  double user_seconds = 0;
  double system_seconds = 0;
  int64_t max_rss_bytes = 0;
  // Whether the network namespace was actually entered.
  bool network_isolated = false;
  // Whether it ran in a bubblewrap sandbox (ProcessSpec::confinement).
  bool sandboxed = false;
  // Why ProcessSpec::watch had it killed; empty when it did not.
  std::string stopped;

  bool ok() const { return exit_code == 0 && !timed_out && stopped.empty(); }
  // "exited with 0 after 1.20 s", "killed by SIGKILL: wall timeout of 30 s".
  std::string Describe() const;
};

// A started process whose stdin and stdout are pipes to the harness.
class RunningProcess {
 public:
  virtual ~RunningProcess() = default;
  virtual int pid() const = 0;
  // Write end of the child's stdin and read end of its stdout.
  virtual int stdin_fd() const = 0;
  virtual int stdout_fd() const = 0;
  // CPU seconds (user + system) the process has used so far.
  virtual absl::StatusOr<double> CpuSeconds() const = 0;
  // Closes stdin, waits up to `grace` for the exit, then kills the group.
  virtual ProcessResult Finish(absl::Duration grace) = 0;
};

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Runs to completion. A non-zero exit, a signal or a timeout is a normal
  // result; the Status is for failures to start (missing binary, bad dir).
  virtual absl::StatusOr<ProcessResult> Run(const ProcessSpec& spec) = 0;
  // Starts with piped stdin/stdout (stdout_path is ignored).
  virtual absl::StatusOr<std::unique_ptr<RunningProcess>> Start(
      const ProcessSpec& spec) = 0;
  // Kills every process of the named shared sandbox (Confinement::sandbox)
  // and returns once they are gone; the next process naming it gets a new
  // one. No-op for a name with no sandbox.
  virtual void EndSandbox(const std::string& name) { (void)name; }
};

struct SandboxOptions {
  // Parent of each process's private temporary directory.
  std::string scratch_root = "/tmp";
  // PATH inside the sandbox.
  std::string path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  // Variables copied from the harness's environment when set (HOME is
  // replaced by the private directory). Build tools need a few of these.
  std::vector<std::string> pass_through = {"LANG", "LC_ALL", "TERM", "USER",
                                           "LOGNAME"};
  // bubblewrap, which sets up each Confinement.
  std::string bwrap = "/usr/bin/bwrap";
  // Development only: a Confinement is ignored and the command runs as the
  // node's user with only the network namespace and private temporary
  // directory (ProcessResult::sandboxed stays false, so verdicts say so).
  bool unsafe_no_sandbox = false;
};

std::unique_ptr<ProcessLauncher> NewSandboxLauncher(SandboxOptions options = {});

// Whether confined commands can run here: bubblewrap present, the node
// root (an arm runs as a user of its own), user namespaces allowed and a
// trial sandbox starting. FailedPrecondition says what is missing and what
// to do. Nodes call it before taking work.
absl::Status CheckSandbox(const SandboxOptions& options);

// The whole content of a file a process wrote (ProcessSpec::stdout_path or
// stderr_path); empty when it is missing.
std::string ReadOutputFile(const std::string& path);

// Writes all of `text` to `fd`, through short writes and EINTR; false on an
// error (errno tells which).
bool WriteAll(int fd, const std::string& text);

}  // namespace densegate::platform

#endif  // DENSEGATE_PLATFORM_PROCESS_LAUNCHER_H_
