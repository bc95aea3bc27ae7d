// The Linux system-call helpers the sandbox launcher builds on: pidfds,
// network namespaces, bwrap's handshake, user switching, /proc reads.
// Private to platform/process.
//
// Thread-safety: free functions without shared state. BecomeUser is called
// between fork and exec, and uses raw system calls only.
#ifndef DENSEGATE_PLATFORM_PROCESS_INTERNAL_LINUX_H_
#define DENSEGATE_PLATFORM_PROCESS_INTERNAL_LINUX_H_

#include <sys/time.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace densegate::platform::internal {

int PidfdOpen(pid_t pid);
double Seconds(const timeval& tv);
// A new network namespace with loopback up, held by an fd (-1 where the
// kernel does not let us create one).
int NewNetworkNamespace();
// Tasks (processes and threads) whose real user is `uid`: what RLIMIT_NPROC
// counts.
int64_t TasksOfUser(uint32_t uid);
// Removes `dir` and everything under it; returns it when that failed, else
// empty. An empty `dir` is nothing to remove.
std::string RemoveTree(const std::string& dir);
// A sealed-off copy of `content` for bwrap to read (--seccomp, --ro-bind-data).
absl::StatusOr<int> DataFd(const char* name, const std::string& content);
// The host's account file at `path` with the sandbox user's `entry` added.
std::string WithSandboxUser(const char* path, const std::string& entry);
// A /proc file's text; empty when it cannot be read (its process is gone).
std::string ReadProcFile(const std::string& path);
// bwrap's arguments for the read-only system view, /proc and /dev.
std::vector<std::string> SystemViewArgs();
// Reads bwrap's --info-fd JSON up to its end and returns "child-pid".
absl::StatusOr<pid_t> ReadChildPid(int fd, absl::Duration timeout);
// Becomes `uid`/`gid` for good (no supplementary groups, no_new_privs).
bool BecomeUser(uint32_t uid, uint32_t gid);
// Closes `fd` when open and sets it to -1.
void CloseFd(int& fd);

}  // namespace densegate::platform::internal

#endif  // DENSEGATE_PLATFORM_PROCESS_INTERNAL_LINUX_H_
