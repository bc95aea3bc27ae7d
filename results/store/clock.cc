#include "results/store/clock.h"

#include "absl/time/clock.h"

namespace densegate::results {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

Clock* SystemClock() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace densegate::results
