// DENSEGATE_KERNELS_PATH=portable forces kAuto to the portable path. The
// variable is set before the first resolution (it is read once per process).
#include <cstdlib>

#include "gtest/gtest.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {
namespace {

TEST(CpuPathEnvTest, PortableForcedByEnvironment) {
  ASSERT_EQ(setenv("DENSEGATE_KERNELS_PATH", "portable", 1), 0);
  EXPECT_EQ(DefaultCpuPath(), CpuPath::kPortable);
  EXPECT_EQ(*ResolveCpuPath(CpuPath::kAuto), CpuPath::kPortable);
  // An explicit request still wins.
  if (CpuSupportsAvx2()) {
    EXPECT_EQ(*ResolveCpuPath(CpuPath::kAvx2), CpuPath::kAvx2);
  }
}

}  // namespace
}  // namespace densegate::kernels
