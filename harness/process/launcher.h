// Running candidate-controlled commands: builds, tests, benchmarks, kernel
// runners.
//
// ProcessLauncher is the harness's only way to start a process (LevelDB's Env
// habit): tests substitute a fake, and the real one, SandboxLauncher, runs
// every command in a sandbox:
//   * its own process group, killed as a whole on timeout or cancellation;
//   * rlimits on CPU time, address space and file size;
//   * a network namespace with loopback only, where the kernel lets us
//     (root, or user namespaces), so a build cannot reach the network; one
//     per launcher, shared by the processes it starts, so that a build
//     tool's server left by one command (Bazel's) serves the next;
//   * a private, emptied temporary directory (TMPDIR, HOME);
//   * an environment built from an allow-list: nothing that says it is being
//     measured, no tokens, no CI variables;
//   * optional CPU affinity, so two nodes on one machine don't share cores.
// The harness's own clock times the process (wall and CPU from rusage), which
// is what self-reported benchmark times are checked against.
//
// Thread-safety: Run and Start may be called from several threads.
#ifndef DENSEGATE_HARNESS_PROCESS_LAUNCHER_H_
#define DENSEGATE_HARNESS_PROCESS_LAUNCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace densegate::harness {

struct ResourceLimits {
  // 0 means unlimited.
  int64_t cpu_seconds = 0;
  int64_t address_space_bytes = 0;
  int64_t file_size_bytes = 0;
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

  bool ok() const { return exit_code == 0 && !timed_out; }
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
};

std::unique_ptr<ProcessLauncher> NewSandboxLauncher(SandboxOptions options = {});

// The whole content of a file a process wrote (ProcessSpec::stdout_path or
// stderr_path); empty when it is missing.
std::string ReadOutputFile(const std::string& path);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_PROCESS_LAUNCHER_H_
