// The system-call filter every sandboxed arm process runs under.
//
// A candidate's build rules and binaries run arbitrary code. Namespaces and
// an unprivileged user already keep them out of the node's files and
// processes; this filter refuses the calls that would reach past those
// walls or the kernel's shared state: ptrace and cross-process memory
// access, entering or creating namespaces (setns, unshare, clone with a
// namespace flag; clone3 answers ENOSYS so that libc falls back to clone,
// whose flags the filter can read), every way of mounting, kexec, bpf,
// perf_event_open, kernel modules, keyrings, file handles
// (open_by_handle_at escapes a bind mount), and the clock. Everything else
// is allowed: refused calls fail with EPERM, they do not kill the process,
// so a tool that probes for a feature keeps working.
//
// Thread-safety: a pure function.
#ifndef DENSEGATE_PLATFORM_PROCESS_SECCOMP_FILTER_H_
#define DENSEGATE_PLATFORM_PROCESS_SECCOMP_FILTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace densegate::platform {

// The filter as a classic BPF program for this machine's architecture, in
// the form bubblewrap's --seccomp reads (an array of sock_filter).
absl::StatusOr<std::string> SandboxSeccompProgram();

// Names of the system calls the filter refuses outright (documentation and
// tests; clone and unshare are refused only with a namespace flag).
std::vector<std::string> RefusedSystemCalls();

}  // namespace densegate::platform

#endif  // DENSEGATE_PLATFORM_PROCESS_SECCOMP_FILTER_H_
