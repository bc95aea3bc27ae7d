// Test helper run inside the sandbox: tries each system call the seccomp
// filter must refuse and prints "name=result" per line, where result is
// "refused" (EPERM or ENOSYS), "allowed" or another errno's name.
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace {

void Report(const char* name, long rc) {
  if (rc >= 0) {
    std::printf("%s=allowed\n", name);
  } else if (errno == EPERM || errno == ENOSYS) {
    std::printf("%s=refused\n", name);
  } else {
    std::printf("%s=%s\n", name, strerrorname_np(errno));
  }
}

}  // namespace

int main() {
  Report("ptrace", ptrace(PTRACE_TRACEME, 0, nullptr, nullptr));
  int ns = open("/proc/self/ns/net", O_RDONLY);
  Report("setns", setns(ns, 0));
  Report("unshare", unshare(CLONE_NEWNS));
  Report("unshare_user", unshare(CLONE_NEWUSER));
  Report("clone_newnet", syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0));
  Report("mount", mount("none", "/tmp", "tmpfs", 0, nullptr));
  Report("kexec_load", syscall(SYS_kexec_load, 0, 0, nullptr, 0));
  bpf_attr attr;
  std::memset(&attr, 0, sizeof attr);
  Report("bpf", syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
  perf_event_attr pe;
  std::memset(&pe, 0, sizeof pe);
  pe.size = sizeof pe;
  pe.type = PERF_TYPE_SOFTWARE;
  pe.config = PERF_COUNT_SW_CPU_CLOCK;
  Report("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
  // An ordinary fork must still work (clone3 falls back to clone).
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
  Report("fork", child);
  std::fflush(stdout);
  return 0;
}
