#include "kernels/ops/cpu_path.h"

#include "gtest/gtest.h"

namespace densegate::kernels {
namespace {

TEST(CpuPathTest, ResolvesToAConcretePath) {
  absl::StatusOr<CpuPath> p = ResolveCpuPath(CpuPath::kAuto);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(*p, CpuPath::kAuto);
  EXPECT_EQ(*p, DefaultCpuPath());
  EXPECT_EQ(*ResolveCpuPath(CpuPath::kPortable), CpuPath::kPortable);
  absl::StatusOr<CpuPath> avx2 = ResolveCpuPath(CpuPath::kAvx2);
  EXPECT_EQ(avx2.ok(), CpuSupportsAvx2());
  if (!avx2.ok()) {
    EXPECT_EQ(avx2.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(CpuPathName(CpuPath::kAvx2), "avx2");
  EXPECT_EQ(CpuPathName(CpuPath::kPortable), "portable");
}

}  // namespace
}  // namespace densegate::kernels
