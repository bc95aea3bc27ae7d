// Tests of the scalar format definitions (fp_convert.h) and of the vectorized
// array conversions built on them, against values computed independently from
// the bit fields (std::ldexp) and a brute-force nearest-even encoder.
#include "kernels/kvcache/fp_convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/kvcache/kv_quant.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {
namespace {

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// The available vector paths: portable always, AVX2 when the CPU has it.
std::vector<CpuPath> Paths() {
  std::vector<CpuPath> p = {CpuPath::kPortable};
  if (CpuSupportsAvx2()) p.push_back(CpuPath::kAvx2);
  return p;
}

// Fresh seed per run, printed with every failure through SCOPED_TRACE.
uint64_t FreshSeed() { return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}(); }

// An 8-bit float format described by its fields, decoded with std::ldexp.
struct Fp8Format {
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;  // E5M2: all-ones exponent with zero mantissa is Inf.
  KvFormat kv;
};
constexpr Fp8Format kE4M3 = {4, 3, 7, false, KvFormat::kFp8E4M3};
constexpr Fp8Format kE5M2 = {5, 2, 15, true, KvFormat::kFp8E5M2};

bool RefIsNaN(const Fp8Format& f, int c) {
  const int e = (c >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = c & ((1 << f.man_bits) - 1);
  const int emax = (1 << f.exp_bits) - 1;
  if (f.has_inf) return e == emax && m != 0;
  return e == emax && m == (1 << f.man_bits) - 1;
}

double RefDecode(const Fp8Format& f, int c) {
  const int sign = c >> 7;
  const int e = (c >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = c & ((1 << f.man_bits) - 1);
  const int emax = (1 << f.exp_bits) - 1;
  const double s = sign ? -1.0 : 1.0;
  if (RefIsNaN(f, c)) return std::numeric_limits<double>::quiet_NaN();
  if (f.has_inf && e == emax) return s * std::numeric_limits<double>::infinity();
  if (e == 0) return s * std::ldexp(m, 1 - f.bias - f.man_bits);
  return s * std::ldexp((1 << f.man_bits) + m, e - f.bias - f.man_bits);
}

// Brute force: nearest finite code, ties to the even code, beyond the largest
// finite value saturate, NaN -> canonical NaN with the input's sign.
int RefEncode(const Fp8Format& f, float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | (f.has_inf ? 0x7E : 0x7F);
  const double a = std::fabs(static_cast<double>(x));
  int best = -1;
  double best_d = 0;
  double max_finite = 0;
  int max_code = 0;
  for (int c = 0; c < 0x80; ++c) {
    const double v = RefDecode(f, c);
    if (std::isnan(v) || std::isinf(v)) continue;
    if (v > max_finite) {
      max_finite = v;
      max_code = c;
    }
    const double d = std::fabs(v - a);
    if (best < 0 || d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  if (a > max_finite) best = max_code;
  return sign | best;
}

uint8_t Encode(const Fp8Format& f, float x) {
  return f.has_inf ? FloatToFp8E5M2(x) : FloatToFp8E4M3(x);
}
float Decode(const Fp8Format& f, uint8_t c) {
  return f.has_inf ? Fp8E5M2ToFloat(c) : Fp8E4M3ToFloat(c);
}

// Encodes `xs` with the scalar definition and with Quantize on every path;
// all must agree with RefEncode.
void CheckEncodeAgainstReference(const Fp8Format& f,
                                 const std::vector<float>& xs) {
  std::vector<uint8_t> vec(xs.size());
  for (CpuPath path : Paths()) {
    ASSERT_TRUE(Quantize(f.kv, xs.data(), 1, xs.size(), vec.data(), {},
                         {.path = path})
                    .ok());
    for (size_t i = 0; i < xs.size(); ++i) {
      const int want = RefEncode(f, xs[i]);
      ASSERT_EQ(Encode(f, xs[i]), want)
          << "scalar, x=" << xs[i] << " bits=0x" << std::hex << Bits(xs[i]);
      ASSERT_EQ(vec[i], want) << CpuPathName(path) << ", x=" << xs[i]
                              << " bits=0x" << std::hex << Bits(xs[i]);
    }
  }
}

class Fp8Test : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8Test, DecodesAll256CodesLikeTheBitFields) {
  const Fp8Format f = GetParam();
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  int nan_codes = 0;
  for (CpuPath path : Paths()) {
    std::vector<float> out(256);
    ASSERT_TRUE(
        Dequantize(f.kv, codes.data(), {}, 1, 256, out.data(), {.path = path})
            .ok());
    for (int c = 0; c < 256; ++c) {
      const double want = RefDecode(f, c);
      const float scalar = Decode(f, static_cast<uint8_t>(c));
      ASSERT_EQ(Bits(out[c]), Bits(scalar)) << CpuPathName(path) << " code " << c;
      if (std::isnan(want)) {
        ++nan_codes;
        EXPECT_TRUE(std::isnan(scalar)) << "code " << c;
        EXPECT_EQ(Bits(scalar) & 0x7FFFFFFFu, 0x7FC00000u) << "quiet NaN, code " << c;
        EXPECT_EQ(std::signbit(scalar), c >= 0x80) << "NaN sign, code " << c;
      } else {
        EXPECT_EQ(static_cast<double>(scalar), want) << "code " << c;
        EXPECT_EQ(std::signbit(scalar), c >= 0x80) << "sign (incl. -0), code " << c;
      }
    }
  }
  EXPECT_EQ(nan_codes, (f.has_inf ? 6 : 2) * static_cast<int>(Paths().size()));
}

TEST_P(Fp8Test, EncodeOfDecodeIsIdentityForEveryNonNaNCode) {
  const Fp8Format f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const float v = Decode(f, static_cast<uint8_t>(c));
    const uint8_t back = Encode(f, v);
    if (std::isnan(v)) {
      // Canonical NaN with the sign kept.
      EXPECT_EQ(back, (c & 0x80) | (f.has_inf ? 0x7E : 0x7F)) << "code " << c;
    } else if (std::isinf(v)) {
      // E5M2 Inf codes: encoding saturates (documented choice).
      EXPECT_EQ(back, (c & 0x80) | 0x7B) << "code " << c;
    } else {
      EXPECT_EQ(back, c) << "code " << c << " value " << v;
    }
  }
  // The same through the vector paths.
  std::vector<float> values(256);
  for (int c = 0; c < 256; ++c) values[c] = Decode(f, static_cast<uint8_t>(c));
  CheckEncodeAgainstReference(f, values);
}

TEST_P(Fp8Test, RoundsMidpointsAndNeighboursLikeTheBruteForceEncoder) {
  const Fp8Format f = GetParam();
  std::vector<float> xs;
  for (int c = 0; c < 0x7F; ++c) {
    const double lo = RefDecode(f, c);
    const double hi = RefDecode(f, c + 1);
    if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
    const float mid = static_cast<float>((lo + hi) / 2);  // Exact in fp32.
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const float inf = std::numeric_limits<float>::infinity();
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf),
                    static_cast<float>(lo), std::nextafter(static_cast<float>(lo), inf)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  // Overflow region: the last midpoint (max + half a step) and beyond.
  const double max = RefDecode(f, f.has_inf ? 0x7B : 0x7E);
  const double step = max - RefDecode(f, f.has_inf ? 0x7A : 0x7D);
  const float over_mid = static_cast<float>(max + step / 2);
  for (float v : {over_mid, std::nextafter(over_mid, 0.0f),
                  std::nextafter(over_mid, 1e30f), static_cast<float>(max * 4),
                  std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), 1e-30f, 0.0f}) {
    xs.push_back(v);
    xs.push_back(-v);
  }
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  xs.push_back(-std::numeric_limits<float>::quiet_NaN());
  xs.push_back(FromBits(0x7F800001u));  // Signaling NaN.
  CheckEncodeAgainstReference(f, xs);
}

TEST_P(Fp8Test, RandomValuesMatchTheBruteForceEncoder) {
  const Fp8Format f = GetParam();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> log2mag(-22.0f, 18.0f);
  std::vector<float> xs(20000);
  for (float& x : xs) {
    x = std::exp2(log2mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  }
  CheckEncodeAgainstReference(f, xs);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) {
                           return std::string(info.param.has_inf ? "E5M2" : "E4M3");
                         });

TEST(Fp8E4M3Test, CraftedCases) {
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7E);   // Midpoint to (absent) 480.
  EXPECT_EQ(FloatToFp8E4M3(479.9f), 0x7E);   // Saturates rather than NaN.
  EXPECT_EQ(FloatToFp8E4M3(1e9f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-1e9f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(INFINITY), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-INFINITY), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(NAN), 0x7F);
  EXPECT_EQ(FloatToFp8E4M3(-NAN), 0xFF);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(-1e-30f), 0x80);   // Underflow keeps the sign.
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);   // Tie 1.0 / 1.125 -> even 1.0.
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);   // Tie 1.125 / 1.25 -> even 1.25.
  EXPECT_EQ(FloatToFp8E4M3(0x1p-9f), 0x01);   // Smallest subnormal.
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);  // Tie 0 / 2^-9 -> 0.
  EXPECT_EQ(FloatToFp8E4M3(0x1.000002p-10f), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(0x3p-10f), 0x02);  // Tie 1 / 2 steps -> 2.
  EXPECT_EQ(FloatToFp8E4M3(0x1p-6f - 0x1p-10f), 0x08);  // Tie 7 / 8 -> normal.
  EXPECT_EQ(FloatToFp8E4M3(0x1p-6f), 0x08);   // Smallest normal.
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x07), 7 * 0x1p-9f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToFloat(0x7F)));
  EXPECT_EQ(Fp8E4M3ToFloat(0x78), 256.0f);  // S.1111.000 is a number, not Inf.
}

TEST(Fp8E5M2Test, CraftedCases) {
  EXPECT_EQ(FloatToFp8E5M2(1.0f), 0x3C);
  EXPECT_EQ(FloatToFp8E5M2(57344.0f), 0x7B);
  EXPECT_EQ(FloatToFp8E5M2(61440.0f), 0x7B);  // Midpoint to 65536 (Inf code).
  EXPECT_EQ(FloatToFp8E5M2(1e9f), 0x7B);
  EXPECT_EQ(FloatToFp8E5M2(INFINITY), 0x7B);  // Saturating, by choice.
  EXPECT_EQ(FloatToFp8E5M2(-INFINITY), 0xFB);
  EXPECT_EQ(FloatToFp8E5M2(NAN), 0x7E);
  EXPECT_EQ(FloatToFp8E5M2(-NAN), 0xFE);
  EXPECT_EQ(FloatToFp8E5M2(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E5M2(1.125f), 0x3C);    // Tie 1.0 / 1.25 -> 1.0.
  EXPECT_EQ(FloatToFp8E5M2(1.375f), 0x3E);    // Tie 1.25 / 1.5 -> 1.5.
  EXPECT_EQ(FloatToFp8E5M2(0x1p-16f), 0x01);
  EXPECT_EQ(FloatToFp8E5M2(0x1p-17f), 0x00);  // Tie 0 / 1 step.
  EXPECT_EQ(FloatToFp8E5M2(0x3p-17f), 0x02);  // Tie 1 / 2 steps.
  EXPECT_EQ(FloatToFp8E5M2(0x7p-17f), 0x04);  // Tie 3 / 4 -> smallest normal.
  EXPECT_EQ(Fp8E5M2ToFloat(0x7C), INFINITY);
  EXPECT_EQ(Fp8E5M2ToFloat(0xFC), -INFINITY);
  EXPECT_EQ(Fp8E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(0x7D)));
}

// ------------------------------------------------------------------ bf16
// Nearest-even reference: the two bf16 neighbours by truncation, compared in
// double.
uint16_t RefBf16(float x) {
  const uint32_t u = Bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  if (std::isinf(x)) return static_cast<uint16_t>(u >> 16);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // Truncation (towards 0).
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // Next away from 0.
  const double a = std::fabs(static_cast<double>(x));
  const double vlo = std::fabs(static_cast<double>(Bf16ToFloat(lo)));
  // hi may be Inf: its "value" for rounding is the next power-of-two step.
  const double vhi = (hi & 0x7FFF) == 0x7F80
                         ? std::ldexp(1.0, 128)
                         : std::fabs(static_cast<double>(Bf16ToFloat(hi)));
  if (a - vlo < vhi - a) return lo;
  if (a - vlo > vhi - a) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16Test, CraftedCases) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3F80);          // Tie -> even.
  EXPECT_EQ(FloatToBf16(1.0f + 0x3p-8f), 0x3F82);          // Tie -> even (up).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3F81);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(INFINITY), 0x7F80);
  EXPECT_EQ(FloatToBf16(-INFINITY), 0xFF80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F800001u)), 0x7FC0);   // sNaN -> qNaN.
  EXPECT_EQ(FloatToBf16(FromBits(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(FloatToBf16(FromBits(0x7FFFFFFFu)), 0x7FFF);   // Not Inf, not +1.
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F8000u)), 0x7F80);   // Tie, odd -> Inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);   // Subnormal tie.
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(Bits(Bf16ToFloat(0x7FC1)), 0x7FC10000u);
}

TEST(Bf16Test, RandomBitPatternsMatchReferenceOnAllPaths) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> xs(1 << 16);
  for (size_t i = 0; i < xs.size(); ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 4 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // Exact ties.
    xs[i] = FromBits(u);
  }
  std::vector<uint16_t> out(xs.size());
  std::vector<float> back(xs.size());
  for (CpuPath path : Paths()) {
    ASSERT_TRUE(Quantize(KvFormat::kBf16, xs.data(), 1, xs.size(), out.data(),
                         {}, {.path = path})
                    .ok());
    ASSERT_TRUE(Dequantize(KvFormat::kBf16, out.data(), {}, 1, xs.size(),
                           back.data(), {.path = path})
                    .ok());
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(out[i], RefBf16(xs[i]))
          << CpuPathName(path) << " bits=0x" << std::hex << Bits(xs[i]);
      ASSERT_EQ(Bits(back[i]), uint32_t{out[i]} << 16);
      // NaN never becomes Inf.
      if (std::isnan(xs[i])) { ASSERT_TRUE(std::isnan(back[i])); }
    }
  }
}

// ------------------------------------------------------------------ fp16
double RefHalfDecode(uint16_t h) {
  const int e = (h >> 10) & 31;
  const int m = h & 1023;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) {
    return m ? std::numeric_limits<double>::quiet_NaN()
             : s * std::numeric_limits<double>::infinity();
  }
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

TEST(HalfTest, DecodesAllCodesAndPathsAgree) {
  std::vector<uint16_t> codes(65536);
  for (int i = 0; i < 65536; ++i) codes[i] = static_cast<uint16_t>(i);
  for (CpuPath path : Paths()) {
    std::vector<float> out(codes.size());
    ASSERT_TRUE(HalfToFloatArray(codes.data(), codes.size(), out.data(), path).ok());
    for (int i = 0; i < 65536; ++i) {
      const uint16_t h = static_cast<uint16_t>(i);
      const double want = RefHalfDecode(h);
      ASSERT_EQ(Bits(out[i]), Bits(HalfToFloat(h))) << CpuPathName(path) << " " << i;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i]));
      } else {
        ASSERT_EQ(static_cast<double>(out[i]), want) << i;
        ASSERT_EQ(std::signbit(out[i]), (i & 0x8000) != 0) << i;
        // Every non-NaN half survives the round trip.
        ASSERT_EQ(FloatToHalf(out[i]), h) << i;
      }
    }
  }
}

TEST(HalfTest, CraftedCases) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // Tie with odd 65504 -> Inf.
  EXPECT_EQ(FloatToHalf(1e6f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(FloatToHalf(FromBits(0x7F800001u)), 0x7E00);  // sNaN -> qNaN.
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // Tie -> 0.
  EXPECT_EQ(FloatToHalf(0x3p-25f), 0x0002);  // Tie 1 / 2 -> 2.
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);  // Tie 0x3FF/0x400.
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x3p-11f), 0x3C02);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
}

// Nearest-even by brute force over the neighbours of the truncated code.
uint16_t RefHalfEncode(float x) {
  if (std::isnan(x)) return FloatToHalf(x);  // NaN payload rule checked elsewhere.
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65520.0) return sign | 0x7C00;
  // Largest code whose value <= a, by scanning (monotone in the code).
  int lo = 0, hi = 0x7BFF;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (RefHalfDecode(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  if (lo == 0x7BFF) return sign | 0x7BFF;
  const double dlo = a - RefHalfDecode(static_cast<uint16_t>(lo));
  const double dhi = RefHalfDecode(static_cast<uint16_t>(lo + 1)) - a;
  const int c = dlo < dhi ? lo : dlo > dhi ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return static_cast<uint16_t>(sign | c);
}

TEST(HalfTest, EncodeMatchesReferenceAndF16c) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::vector<float> xs;
  // Every midpoint between adjacent positive halves, and its neighbours.
  for (int c = 0; c < 0x7BFF; ++c) {
    const float mid = static_cast<float>(
        (RefHalfDecode(static_cast<uint16_t>(c)) + RefHalfDecode(static_cast<uint16_t>(c + 1))) / 2);
    xs.push_back(mid);
    xs.push_back(-std::nextafter(mid, 0.0f));
    xs.push_back(std::nextafter(mid, 1e9f));
  }
  // Random bit patterns, NaNs included.
  for (int i = 0; i < 60000; ++i) xs.push_back(FromBits(static_cast<uint32_t>(rng())));
  for (CpuPath path : Paths()) {
    std::vector<uint16_t> out(xs.size());
    ASSERT_TRUE(FloatToHalfArray(xs.data(), xs.size(), out.data(), path).ok());
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_EQ(out[i], FloatToHalf(xs[i]))
          << CpuPathName(path) << " bits=0x" << std::hex << Bits(xs[i]);
      ASSERT_EQ(out[i], RefHalfEncode(xs[i])) << "bits=0x" << std::hex << Bits(xs[i]);
    }
  }
}

}  // namespace
}  // namespace densegate::kernels
