#include "harness/process/machine_probe.h"

#include <sched.h>

#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

TEST(MachineProbeTest, TimesItsWorkAndLeavesTheThreadWhereItWas) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  std::unique_ptr<MachineProbe> probe = NewCacheSweepProbe({0});
  for (int i = 0; i < 3; ++i) {
    const double s = probe->Seconds();
    EXPECT_GT(s, 0.0);
    EXPECT_LT(s, 5.0);  // ~3 ms; a loaded test machine stays far below.
  }
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
  EXPECT_GT(NewCacheSweepProbe({})->Seconds(), 0.0);
}

}  // namespace
}  // namespace densegate::harness
