#include "platform/process/internal/linux.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "platform/process/launcher.h"

namespace densegate::platform::internal {

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

// Brings up loopback in a fresh network namespace (it starts down), so tools
// that talk to themselves over 127.0.0.1 still work.
static void LoopbackUp() {
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

}  // namespace densegate::platform::internal
