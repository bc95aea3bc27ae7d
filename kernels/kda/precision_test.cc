#include "kernels/kda/precision.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"
#include "kernels/kda/kda_testing.h"

namespace densegate::kernels::kda {
namespace {

float F(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t B(float x) { return std::bit_cast<uint32_t>(x); }

struct Case {
  uint32_t in;
  uint32_t tf32;
  uint32_t rna;
  const char* what;
};

// Crafted bit patterns with the exact expected results.
constexpr Case kCases[] = {
    {0x3F800000, 0x3F800000, 0x3F800000, "1.0 is already tf32"},
    {0x3F801FFF, 0x3F800000, 0x3F802000, "just below the next tf32 value"},
    {0x3F801000, 0x3F800000, 0x3F802000, "exact tie rounds away from zero"},
    {0x3F800FFF, 0x3F800000, 0x3F800000, "just below the tie rounds down"},
    {0xBF801000, 0xBF800000, 0xBF802000, "negative tie: away from zero"},
    {0xBF800FFF, 0xBF800000, 0xBF800000, "negative below tie"},
    {0x3FFFFFFF, 0x3FFFE000, 0x40000000, "mantissa all ones carries into exp"},
    {0xBFFFF000, 0xBFFFE000, 0xC0000000, "negative carry into exponent"},
    {0x7F7FFFFF, 0x7F7FE000, 0x7F800000, "FLT_MAX overflows to +Inf (RNA)"},
    {0xFF7FFFFF, 0xFF7FE000, 0xFF800000, "-FLT_MAX overflows to -Inf (RNA)"},
    {0x7F7FEFFF, 0x7F7FE000, 0x7F7FE000, "largest value that stays finite"},
    {0x00000000, 0x00000000, 0x00000000, "+0"},
    {0x80000000, 0x80000000, 0x80000000, "-0"},
    {0x00001000, 0x00000000, 0x00002000, "subnormal tie"},
    {0x00000FFF, 0x00000000, 0x00000000, "tiny subnormal flushes to 0"},
    {0x80000FFF, 0x80000000, 0x80000000, "tiny negative subnormal to -0"},
    {0x007FFFFF, 0x007FE000, 0x00800000, "largest subnormal rounds to FLT_MIN"},
    {0x00800000, 0x00800000, 0x00800000, "FLT_MIN"},
    {0x7F800000, 0x7F800000, 0x7F800000, "+Inf unchanged"},
    {0xFF800000, 0xFF800000, 0xFF800000, "-Inf unchanged"},
    {0x7FC00000, 0x7FC00000, 0x7FC00000, "quiet NaN unchanged"},
    // Without the NaN guard: & mask would give Inf; + 0x1000 would give Inf.
    {0x7F800001, 0x7F800001, 0x7F800001, "NaN with low payload stays NaN"},
    // Without the guard, 0x7FFFFFFF + 0x1000 wraps the sign: -0.
    {0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF, "all-ones NaN stays itself"},
    {0xFFC00001, 0xFFC00001, 0xFFC00001, "negative NaN unchanged"},
};

TEST(PrecisionTest, CraftedValuesAreBitExact) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(B(RoundTf32(F(c.in))), c.tf32) << std::hex << c.in;
    EXPECT_EQ(B(RoundTf32Rna(F(c.in))), c.rna) << std::hex << c.in;
    EXPECT_EQ(B(RoundOperand(Precision::kTf32, F(c.in))), c.tf32);
    EXPECT_EQ(B(RoundOperand(Precision::kTf32Rna, F(c.in))), c.rna);
    EXPECT_EQ(B(RoundOperand(Precision::kIeee, F(c.in))), c.in);
  }
}

TEST(PrecisionTest, NaNNeverBecomesInfOrNumber) {
  for (uint32_t payload :
       {1u, 0xFFFu, 0x1000u, 0x1FFFu, 0x3FFFFFu, 0x400000u, 0x7FFFFFu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float nan = F(sign | 0x7F800000u | payload);
      ASSERT_TRUE(std::isnan(nan));
      EXPECT_TRUE(std::isnan(RoundTf32(nan))) << std::hex << payload;
      EXPECT_TRUE(std::isnan(RoundTf32Rna(nan))) << std::hex << payload;
      EXPECT_TRUE(std::isnan(SplitTf32(nan).big));
    }
  }
}

// The formulas of the spec, checked over many random bit patterns.
TEST(PrecisionTest, RandomBitPatternsFollowTheFormulas) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (int n = 0; n < 200000; ++n) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float x = F(bits);
    const bool special = (bits & 0x7F800000u) == 0x7F800000u;
    const uint32_t t = B(RoundTf32(x));
    const uint32_t r = B(RoundTf32Rna(x));
    if (special) {
      ASSERT_EQ(t, bits);
      ASSERT_EQ(r, bits);
      continue;
    }
    ASSERT_EQ(t, bits & 0xFFFFE000u) << std::hex << bits;
    ASSERT_EQ(r, (bits + 0x1000u) & 0xFFFFE000u) << std::hex << bits;
    // Truncation never increases the magnitude; RNA is within half a
    // tf32 ulp (unless it overflowed to Inf).
    ASSERT_LE(std::fabs(F(t)), std::fabs(x));
    if (!std::isinf(F(r)) && std::fpclassify(x) == FP_NORMAL) {
      const double ulp = std::ldexp(1.0, std::ilogb(x) - 10);
      ASSERT_LE(std::fabs(double(F(r)) - double(x)), 0.5 * ulp)
          << std::hex << bits;
    }
  }
}

TEST(PrecisionTest, SplitRecoversTheValue) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (int n = 0; n < 100000; ++n) {
    const float x =
        normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
    const Tf32Split s = SplitTf32(x);
    // Both parts are TF32 values.
    ASSERT_EQ(B(s.big) & 0x1FFFu, 0u);
    ASSERT_EQ(B(s.small) & 0x1FFFu, 0u);
    // big + small keeps 22 of x's 24 bits: error < 2^-21 relative.
    const double err = std::fabs(double(s.big) + double(s.small) - double(x));
    ASSERT_LE(err, std::fabs(double(x)) * std::ldexp(1.0, -21));
  }
  // A value with at most 22 significant bits splits exactly.
  const float exact = 1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -21);
  const Tf32Split s = SplitTf32(exact);
  EXPECT_EQ(s.big + s.small, exact);
  EXPECT_EQ(s.big, 1.0f);
}

TEST(PrecisionTest, ProductsByMode) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  double worst_x3 = 0, worst_tf32 = 0, sum_tf32 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const float a = normal(rng), b = normal(rng);
    const double exact = double(a) * double(b);
    if (exact == 0) continue;
    const double e3 = std::fabs(MulOperands(Precision::kTf32x3, a, b) - exact) /
                      std::fabs(exact);
    const double e1 = std::fabs(MulOperands(Precision::kTf32, a, b) - exact) /
                      std::fabs(exact);
    worst_x3 = std::max(worst_x3, e3);
    worst_tf32 = std::max(worst_tf32, e1);
    sum_tf32 += e1;
    EXPECT_EQ(MulOperands(Precision::kIeee, a, b), a * b);
  }
  // tf32x3 is fp32-class (small*small dropped: ~2^-21); tf32 is ~2^-10.
  EXPECT_LT(worst_x3, 4e-6);
  EXPECT_LT(worst_tf32, 2.0 * std::ldexp(1.0, -10) + 1e-6);
  EXPECT_GT(sum_tf32 / n, 1e-4);
}

TEST(PrecisionTest, NamesRoundTrip) {
  for (Precision p : {Precision::kIeee, Precision::kTf32, Precision::kTf32Rna,
                      Precision::kTf32x3}) {
    auto parsed = ParsePrecision(PrecisionName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(PrecisionName(Precision::kTf32Rna), "tf32_rna");
  auto bad = ParsePrecision("fp16");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tf32_rna"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("fp16"), absl::string_view::npos);
}

}  // namespace
}  // namespace densegate::kernels::kda
