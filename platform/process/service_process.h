// ServiceProcess: a long-running trusted child (the demo's scheduler and
// node workers, the integration tests' `densegate serve` and `densegate
// node`): started in its own process group with its output in a log file,
// optionally pinned to CPUs (inherited by everything it starts), and
// stopped with SIGTERM, then SIGKILL for the whole group after a grace
// period. Candidate code never runs this way: it goes through
// ProcessLauncher (launcher.h) and its sandbox.
//
// Thread-compatible.
#ifndef DENSEGATE_PLATFORM_PROCESS_SERVICE_PROCESS_H_
#define DENSEGATE_PLATFORM_PROCESS_SERVICE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace densegate::platform {

class ServiceProcess {
 public:
  // argv[0] is an absolute path; stdout and stderr go to `log_path`.
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> Start(
      const std::vector<std::string>& argv, const std::string& log_path,
      const std::vector<int>& cpus = {});
  ~ServiceProcess();  // Stop(absl::Seconds(5)).

  // Whether it is still running (reaps it when it has exited).
  bool Running();
  // SIGTERM, up to `grace` for it to exit, then SIGKILL to the group.
  void Stop(absl::Duration grace);
  // SIGTERM to the process alone, as a service manager stops it, and waits
  // for it to exit; the rest of its group is left to its own shutdown.
  void Terminate();
  // SIGKILL to the whole group now (a crash), and reaps the process.
  void Kill();
  const std::string& log_path() const { return log_path_; }

 private:
  ServiceProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
};

}  // namespace densegate::platform

#endif  // DENSEGATE_PLATFORM_PROCESS_SERVICE_PROCESS_H_
