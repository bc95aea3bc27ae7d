#include "kernels/kda/kda_internal.h"

#include <cmath>
#include <limits>
#include <random>

#include "gtest/gtest.h"
#include "kernels/kda/kda_testing.h"

namespace densegate::kernels::kda::internal {
namespace {

double UlpsFrom(float got, double exact) {
  const float e = static_cast<float>(exact);
  const float ulp = std::nextafter(e, INFINITY) - e;
  return std::fabs(double(got) - exact) / ulp;
}

TEST(ExpFTest, WithinTwoUlpOverTheDecayRange) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-87.3f, 88.0f);
  double worst = 0;
  for (int i = 0; i < 300000; ++i) {
    const float x = i < 1000 ? -1e-3f * i : u(rng);
    worst = std::max(worst, UlpsFrom(ExpF(x), std::exp(double(x))));
  }
  EXPECT_LT(worst, 2.0);
  EXPECT_EQ(ExpF(0.0f), 1.0f);
  EXPECT_EQ(ExpF(-0.0f), 1.0f);
  EXPECT_EQ(ExpF(-100.0f), 0.0f);
  EXPECT_EQ(ExpF(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(ExpF(NAN)));
  EXPECT_LT(UlpsFrom(ExpF(-87.3f), std::exp(double(-87.3f))), 2.0);
  EXPECT_GE(ExpF(-87.3f), std::numeric_limits<float>::min());
}

TEST(SumSquaresTest, MatchesExactSum) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int n : {1, 2, 7, 8, 9, 37, 128, 255, 256}) {
    std::vector<float> x(n);
    double exact = 0;
    for (float& v : x) {
      v = normal(rng);
      exact += double(v) * v;
    }
    EXPECT_NEAR(SumSquares(x.data(), n), exact, 1e-6 * exact) << n;
    EXPECT_EQ(
        SumSquares<double>(std::vector<double>(x.begin(), x.end()).data(), n),
        SumSquares<double>(std::vector<double>(x.begin(), x.end()).data(), n));
  }
}

TEST(AccumTermTest, Tf32TermsAreExactProducts) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 20000; ++i) {
    const float acc = normal(rng), x = normal(rng), y = normal(rng);
    Operand op;
    MakeOperand(Precision::kTf32, &y, 1, &op);
    // The FMA of the SIMD path and the portable add-after-multiply agree.
    EXPECT_EQ(AccumTerm<Precision::kTf32>(acc, x, op.big[0], op.small[0]),
              std::fma(RoundTf32(x), op.big[0], acc));
    MakeOperand(Precision::kTf32x3, &y, 1, &op);
    const Tf32Split xs = SplitTf32(x);
    float want = std::fma(xs.small, op.big[0], acc);
    want = std::fma(xs.big, op.small[0], want);
    want = std::fma(xs.big, op.big[0], want);
    EXPECT_EQ(AccumTerm<Precision::kTf32x3>(acc, x, op.big[0], op.small[0]),
              want);
    MakeOperand(Precision::kIeee, &y, 1, &op);
    EXPECT_EQ(op.big[0], y);
    EXPECT_EQ(op.small[0], 0.0f);
  }
}

}  // namespace
}  // namespace densegate::kernels::kda::internal
