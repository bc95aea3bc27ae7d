// Time source of the runtime: every timestamp the engine, the tracer, the
// logger and the serving benchmark take goes through Clock, so a test can
// drive time by hand (ManualClock) and read exact latencies.
//
// Thread-safety: all implementations are thread-safe.
#ifndef DENSEGATE_RUNTIME_CLOCK_H_
#define DENSEGATE_RUNTIME_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace densegate::runtime {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds on a monotonic time line (its origin is arbitrary).
  virtual int64_t NowNanos() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock : public Clock {
 public:
  int64_t NowNanos() const override;
  // A process-wide instance.
  static SteadyClock* Get();
};

// Time stands still until a test moves it.
class ManualClock : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 0) : now_ns_(start_ns) {}
  int64_t NowNanos() const override { return now_ns_.load(); }
  void Advance(int64_t ns) { now_ns_.fetch_add(ns); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_CLOCK_H_
