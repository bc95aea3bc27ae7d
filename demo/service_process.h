// A long-running child of the demo (the scheduler, a node worker): started
// in its own process group with its output in a log file, optionally pinned
// to CPUs (the pinning is inherited by everything it starts), and stopped
// with SIGTERM, then SIGKILL for the whole group after a grace period.
//
// Thread-compatible.
#ifndef DENSEGATE_DEMO_SERVICE_PROCESS_H_
#define DENSEGATE_DEMO_SERVICE_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace densegate::demo {

class ServiceProcess {
 public:
  // argv[0] is an absolute path.
  static absl::StatusOr<std::unique_ptr<ServiceProcess>> Start(const std::vector<std::string>& argv,
                                                               const std::string& log_path,
                                                               const std::vector<int>& cpus);
  ~ServiceProcess();  // Stop(absl::Seconds(5)).

  // Whether it is still running (reaps it when it has exited).
  bool Running();
  // SIGTERM, up to `grace` for it to exit, then SIGKILL to the group.
  void Stop(absl::Duration grace);
  const std::string& log_path() const { return log_path_; }

 private:
  ServiceProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  std::string log_path_;
};

}  // namespace densegate::demo

#endif  // DENSEGATE_DEMO_SERVICE_PROCESS_H_
