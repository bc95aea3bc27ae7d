// Runs without a GPU and without the CUDA toolkit: checks the host launch
// code's error paths (the stub entry points are linked) and that the
// device-side math header rounds exactly like kernels/kda/precision.h.
#include "kernels/cuda/kda_decode_cuda.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/kda_cuda_math.h"
#include "kernels/kda/kda_testing.h"
#include "kernels/kda/precision.h"

namespace densegate::kernels::cuda {
namespace {

static_assert(kDgIeee == static_cast<int>(kda::Precision::kIeee));
static_assert(kDgTf32 == static_cast<int>(kda::Precision::kTf32));
static_assert(kDgTf32Rna == static_cast<int>(kda::Precision::kTf32Rna));
static_assert(kDgTf32x3 == static_cast<int>(kda::Precision::kTf32x3));

TEST(KdaDecodeCudaTest, ReportsBuiltWithoutCuda) {
  const absl::Status s = KdaCudaStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("built without CUDA"), absl::string_view::npos)
      << s;
}

TEST(KdaDecodeCudaTest, HostCallFailsCleanlyAndLeavesStateAlone) {
  const kda::KdaDims dims{2, 3, 16, 24};
  const kda::testing::KdaHostInputs in =
      kda::testing::MakeRandomInputs(dims, 5);
  std::vector<float> state =
      kda::testing::RandomVector(2 * 3 * 16 * 24, 6, 0.5);
  const std::vector<float> before = state;
  std::vector<float> out(2 * 3 * 24, 1.0f);
  const absl::Status s =
      KdaDecodeCudaHost(dims, in.F(), state.data(), out.data(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("built without CUDA"), absl::string_view::npos);
  EXPECT_NE(s.message().find("kda_decode_cuda_gpu"), absl::string_view::npos);
  EXPECT_EQ(std::memcmp(state.data(), before.data(), state.size() * 4), 0);
  // The device entry reports the same.
  const absl::Status d =
      KdaDecodeCudaDevice(dims, in.F(), state.data(), out.data(), {});
  EXPECT_EQ(d.code(), absl::StatusCode::kUnimplemented) << d;
}

TEST(KdaDecodeCudaTest, BadShapesRejectedBeforeCuda) {
  const kda::KdaDims good{1, 1, 8, 8};
  const kda::testing::KdaHostInputs in =
      kda::testing::MakeRandomInputs(good, 5);
  std::vector<float> state(64), out(8);
  for (const kda::KdaDims& bad :
       {kda::KdaDims{1, 1, 257, 8}, kda::KdaDims{1, 1, 8, 0},
        kda::KdaDims{0, 1, 8, 8}}) {
    const absl::Status s =
        KdaDecodeCudaHost(bad, in.F(), state.data(), out.data(), {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("KDA CUDA decode"), absl::string_view::npos);
  }
  kda::KdaMath raw;
  raw.gate_mode = kda::KdaGateMode::kFromRaw;  // a_log / dt_bias missing.
  const absl::Status s =
      KdaDecodeCudaHost(good, in.F(), state.data(), out.data(), raw);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// The device rounding helpers are the CPU ones, bit for bit.
TEST(KdaCudaMathTest, RoundingMatchesCpuBitForBit) {
  const uint64_t seed = kda::testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> patterns = {
      0x3F801000u, 0xBF801000u, 0x3FFFFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu,
      0x00001000u, 0x007FFFFFu, 0x7F800000u, 0xFF800000u, 0x7F800001u,
      0x7FFFFFFFu, 0x7FC00000u, 0x00000000u, 0x80000000u};
  for (int i = 0; i < 100000; ++i)
    patterns.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t b : patterns) {
    const float x = std::bit_cast<float>(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(DgTf32(x)),
              std::bit_cast<uint32_t>(kda::RoundTf32(x)))
        << std::hex << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(DgTf32Rna(x)),
              std::bit_cast<uint32_t>(kda::RoundTf32Rna(x)))
        << std::hex << b;
  }
}

TEST(KdaCudaMathTest, AccumulateFollowsThePrecisionMode) {
  const uint64_t seed = kda::testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 10000; ++i) {
    const float acc = normal(rng), x = normal(rng), y = normal(rng);
    float yb, ys;
    DgSplitOperand(kDgTf32, y, &yb, &ys);
    EXPECT_EQ(ys, 0.0f);
    // TF32 x TF32 products are exact, so the FMA equals add-after-multiply.
    EXPECT_EQ(DgAccum<kDgTf32>(acc, x, yb, ys),
              acc + kda::RoundTf32(x) * kda::RoundTf32(y));
    DgSplitOperand(kDgTf32Rna, y, &yb, &ys);
    EXPECT_EQ(DgAccum<kDgTf32Rna>(acc, x, yb, ys),
              acc + kda::RoundTf32Rna(x) * kda::RoundTf32Rna(y));
    DgSplitOperand(kDgTf32x3, y, &yb, &ys);
    const kda::Tf32Split s = kda::SplitTf32(y);
    EXPECT_EQ(yb, s.big);
    EXPECT_EQ(ys, s.small);
    const double exact = double(acc) + double(x) * double(y);
    EXPECT_NEAR(DgAccum<kDgTf32x3>(acc, x, yb, ys), exact,
                4e-6 * (std::fabs(acc) + std::fabs(x * y)) + 1e-30);
    DgSplitOperand(kDgIeee, y, &yb, &ys);
    EXPECT_EQ(DgAccum<kDgIeee>(acc, x, yb, ys), std::fma(x, y, acc));
  }
}

}  // namespace
}  // namespace densegate::kernels::cuda
