#include "platform/process/seccomp_filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace densegate::platform {
namespace {

// Refused with EPERM whatever their arguments.
constexpr const char* kRefused[] = {
    // Other processes' memory and control.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    // Namespaces.
    "setns",
    // Mounting, old and new interfaces.
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr",
    // The kernel itself.
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "bpf", "perf_event_open", "reboot", "swapon", "swapoff", "acct", "quotactl",
    // Shared kernel state no namespace covers.
    "add_key", "request_key", "keyctl", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex",
    // File handles open any file of a mounted filesystem, bind mount or not.
    "open_by_handle_at", "name_to_handle_at",
    "userfaultfd",
};

constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,
                                        CLONE_NEWNET, CLONE_NEWIPC,  CLONE_NEWUTS,
                                        CLONE_NEWCGROUP};

struct ContextDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

}  // namespace

std::vector<std::string> RefusedSystemCalls() {
  return std::vector<std::string>(std::begin(kRefused), std::end(kRefused));
}

absl::StatusOr<std::string> SandboxSeccompProgram() {
  std::unique_ptr<void, ContextDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return absl::InternalError("seccomp_init failed");
  auto add = [&](const char* name, uint32_t action, unsigned count,
                 const scmp_arg_cmp* cmp) -> absl::Status {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return absl::OkStatus();  // Not on this architecture.
    int rc = seccomp_rule_add_array(ctx.get(), action, nr, count, cmp);
    if (rc != 0) {
      return absl::InternalError(
          absl::StrCat("seccomp rule for ", name, ": ", std::strerror(-rc)));
    }
    return absl::OkStatus();
  };
  for (const char* name : kRefused) {
    if (absl::Status s = add(name, SCMP_ACT_ERRNO(EPERM), 0, nullptr); !s.ok()) return s;
  }
  // clone and unshare carry their namespace flags in the first argument:
  // one rule per flag, since a rule compares (arg & mask) == value.
  for (const char* name : {"clone", "unshare"}) {
    for (uint64_t flag : kNamespaceFlags) {
      scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
      if (absl::Status s = add(name, SCMP_ACT_ERRNO(EPERM), 1, &cmp); !s.ok()) return s;
    }
  }
  // clone3 passes its flags in memory the filter cannot read.
  if (absl::Status s = add("clone3", SCMP_ACT_ERRNO(ENOSYS), 0, nullptr); !s.ok()) return s;

  int fd = memfd_create("densegate-seccomp", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  int rc = seccomp_export_bpf(ctx.get(), fd);
  std::string program;
  if (rc == 0) {
    off_t size = lseek(fd, 0, SEEK_END);
    program.resize(size > 0 ? static_cast<size_t>(size) : 0);
    if (pread(fd, program.data(), program.size(), 0) != static_cast<ssize_t>(program.size())) {
      rc = -EIO;
    }
  }
  close(fd);
  if (rc != 0 || program.empty()) {
    return absl::InternalError(absl::StrCat("seccomp_export_bpf: ", std::strerror(-rc)));
  }
  return program;
}

}  // namespace densegate::platform
