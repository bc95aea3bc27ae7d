// Clock: where the store (and the scheduler) read the time.
//
// Lease expiry, heartbeats and every timestamp the store writes come from a
// Clock, so tests move time by hand (ManualClock) instead of sleeping.
// Implementations are thread-safe.
#ifndef DENSEGATE_RESULTS_STORE_CLOCK_H_
#define DENSEGATE_RESULTS_STORE_CLOCK_H_

#include <mutex>

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
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = t;
  }

 private:
  // Guards now_. std::mutex so that ThreadSanitizer sees it.
  mutable std::mutex mu_;
  absl::Time now_;
};

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STORE_CLOCK_H_
