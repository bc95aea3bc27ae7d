// A machine-wide lock that node workers sharing one host use to take turns:
// a measured process (a benchmark repetition) runs while no other node runs
// anything, and unmeasured work (builds, tests, precision sweeps) of
// several nodes runs side by side. Pinning gives each node its own cores,
// but not its own caches and memory bandwidth: without the lock, one node's
// compile moved the other's benchmarks by up to 20% (demo/README.md).
//
// Readers-writer on flock(2) of one file, with a turnstile file taken
// briefly before either mode, so a waiting exclusive holder blocks new
// shared holders instead of starving behind them. flock locks belong to an
// open file description: two HostLock objects (in one process or two)
// exclude each other; one object must not nest its own guards.
//
// Thread-compatible: one guard at a time per object.
#ifndef DENSEGATE_HARNESS_PROCESS_HOST_LOCK_H_
#define DENSEGATE_HARNESS_PROCESS_HOST_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace densegate::harness {

class HostLock {
 public:
  enum class Mode { kShared, kExclusive };

  // Opens (creating) `path` and `path`.turnstile.
  static absl::StatusOr<std::unique_ptr<HostLock>> Open(const std::string& path);
  ~HostLock();

  // Held from construction to destruction. A null lock makes a no-op guard,
  // so callers need no branch for nodes that do not share a host.
  class Guard {
   public:
    Guard(HostLock* lock, Mode mode);
    ~Guard();
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    HostLock* lock_;
  };

  // Without waiting: false when another holder is in the way (for tests
  // and diagnostics). Release() undoes a successful TryAcquire.
  bool TryAcquire(Mode mode);
  void Release();

 private:
  HostLock(int fd, int turnstile_fd) : fd_(fd), turnstile_fd_(turnstile_fd) {}
  void Acquire(Mode mode);
  int fd_;
  int turnstile_fd_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_PROCESS_HOST_LOCK_H_
