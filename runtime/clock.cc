#include "runtime/clock.h"

#include <chrono>

namespace densegate::runtime {

int64_t SteadyClock::NowNanos() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

SteadyClock* SteadyClock::Get() {
  static SteadyClock* clock = new SteadyClock();
  return clock;
}

}  // namespace densegate::runtime
