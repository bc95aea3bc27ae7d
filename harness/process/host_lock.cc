#include "harness/process/host_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace densegate::harness {
namespace {

// flock, retried when a signal interrupts the wait.
bool Flock(int fd, int op) {
  while (flock(fd, op) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

int LockOp(HostLock::Mode mode) { return mode == HostLock::Mode::kShared ? LOCK_SH : LOCK_EX; }

}  // namespace

absl::StatusOr<std::unique_ptr<HostLock>> HostLock::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open the host lock %s: %s", path, strerror(errno)));
  }
  const std::string turnstile = path + ".turnstile";
  int tfd = open(turnstile.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (tfd < 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open the host lock %s: %s", turnstile, strerror(errno)));
  }
  return std::unique_ptr<HostLock>(new HostLock(fd, tfd));
}

HostLock::~HostLock() {
  close(fd_);
  close(turnstile_fd_);
}

void HostLock::Acquire(Mode mode) {
  // Through the turnstile: while an exclusive request waits in it, newcomers
  // of either mode queue behind it.
  Flock(turnstile_fd_, LOCK_EX);
  Flock(fd_, LockOp(mode));
  Flock(turnstile_fd_, LOCK_UN);
}

bool HostLock::TryAcquire(Mode mode) {
  if (!Flock(turnstile_fd_, LOCK_EX | LOCK_NB)) return false;
  const bool got = Flock(fd_, LockOp(mode) | LOCK_NB);
  Flock(turnstile_fd_, LOCK_UN);
  return got;
}

void HostLock::Release() { Flock(fd_, LOCK_UN); }

HostLock::Guard::Guard(HostLock* lock, Mode mode) : lock_(lock) {
  if (lock_ != nullptr) lock_->Acquire(mode);
}

HostLock::Guard::~Guard() {
  if (lock_ != nullptr) lock_->Release();
}

}  // namespace densegate::harness
