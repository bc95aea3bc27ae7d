#include "platform/process/service_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace densegate::platform {

absl::StatusOr<std::unique_ptr<ServiceProcess>> ServiceProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path,
    const std::vector<int>& cpus) {
  if (argv.empty()) return absl::InvalidArgumentError("no command");
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    return absl::InternalError(absl::StrFormat("cannot open %s: %s", log_path, strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError(absl::StrFormat("fork: %s", strerror(errno)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    setpgid(0, 0);
    if (!cpus.empty()) sched_setaffinity(0, sizeof set, &set);
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log);
  setpgid(pid, pid);  // Also from the parent, so a Stop() right away finds the group.
  return std::unique_ptr<ServiceProcess>(new ServiceProcess(pid, log_path));
}

ServiceProcess::~ServiceProcess() { Stop(absl::Seconds(5)); }

void ServiceProcess::Terminate() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void ServiceProcess::Kill() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool ServiceProcess::Running() {
  if (pid_ <= 0) return false;
  int status;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    kill(-pid_, SIGKILL);  // Whatever it left behind.
    pid_ = -1;
    return false;
  }
  return true;
}

void ServiceProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  int status;
  while (waitpid(pid_, &status, WNOHANG) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(-pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace densegate::platform
