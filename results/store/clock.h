// Clock: where the store (and the scheduler) read the time.
//
// Lease expiry, heartbeats and every timestamp the store writes come from a
// Clock, so tests move time by hand (ManualClock) instead of sleeping.
// Implementations are thread-safe.
#ifndef DENSEGATE_RESULTS_STORE_CLOCK_H_
#define DENSEGATE_RESULTS_STORE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace densegate::results {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The wall clock. Never null; lives for the whole program.
Clock* SystemClock();

// A clock that moves only when told to. Starts at `start`.
class ManualClock : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STORE_CLOCK_H_
