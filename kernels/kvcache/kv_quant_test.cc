// Tests of the array API in kv_quant.h: names and sizes, argument checks,
// portable vs AVX2 agreement (bit for bit), documented error bounds on random
// data, and the INT8 parameter rules.
#include "kernels/kvcache/kv_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kvcache/fp_convert.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {
namespace {

using ::testing::HasSubstr;

constexpr KvFormat kFormats[] = {KvFormat::kFp32, KvFormat::kBf16,
                                 KvFormat::kFp8E4M3, KvFormat::kFp8E5M2,
                                 KvFormat::kInt8};

uint64_t FreshSeed() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Quantized form of a batch: codes plus parameters.
struct Encoded {
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
};

Encoded Encode(KvFormat f, ScaleDtype dt, const std::vector<float>& x,
               size_t n_vectors, size_t dim, CpuPath path) {
  Encoded e;
  e.codes.assign(KvCodeBytes(f, n_vectors, dim), 0xAB);
  e.scales.assign(std::max<size_t>(KvScaleBytes(f, dt, n_vectors), 1), 0xCD);
  absl::Status s = Quantize(f, x.data(), n_vectors, dim, e.codes.data(),
                            {dt, e.scales.data()}, {.path = path});
  EXPECT_TRUE(s.ok()) << s;
  return e;
}

std::vector<float> Decode(KvFormat f, ScaleDtype dt, const Encoded& e,
                          size_t n_vectors, size_t dim, CpuPath path) {
  std::vector<float> out(n_vectors * dim, -12345.0f);
  absl::Status s = Dequantize(f, e.codes.data(), {dt, e.scales.data()},
                              n_vectors, dim, out.data(), {.path = path});
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Random K/V-like data: per-vector offset and spread over many magnitudes, with
// a few outliers.
std::vector<float> RandomVectors(std::mt19937_64& rng, size_t n_vectors,
                                 size_t dim) {
  std::vector<float> x(n_vectors * dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-8.0f, 8.0f);
  for (size_t v = 0; v < n_vectors; ++v) {
    const float spread = std::exp2(log_scale(rng));
    const float offset = normal(rng) * spread * ((v % 3 == 0) ? 10.0f : 0.5f);
    for (size_t i = 0; i < dim; ++i) {
      float val = offset + spread * normal(rng);
      if ((rng() % 97) == 0) val *= 20.0f;
      x[v * dim + i] = val;
    }
  }
  return x;
}

// ----------------------------------------------------------------- names
TEST(KvFormatTest, NamesRoundTrip) {
  for (KvFormat f : kFormats) {
    absl::StatusOr<KvFormat> parsed = ParseKvFormat(KvFormatName(f));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(KvFormatName(KvFormat::kFp8E4M3), "fp8_e4m3");
  EXPECT_EQ(*ParseScaleDtype("fp16"), ScaleDtype::kFp16);
  EXPECT_EQ(*ParseScaleDtype("fp32"), ScaleDtype::kFp32);
}

TEST(KvFormatTest, UnknownNameNamesTheValueAndTheValidOnes) {
  absl::StatusOr<KvFormat> parsed = ParseKvFormat("fp8");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("\"fp8\""));
  for (KvFormat f : kFormats) {
    EXPECT_THAT(parsed.status().message(), HasSubstr(std::string(KvFormatName(f))));
  }
  absl::StatusOr<ScaleDtype> dt = ParseScaleDtype("bf16");
  ASSERT_FALSE(dt.ok());
  EXPECT_THAT(dt.status().message(), HasSubstr("\"bf16\""));
}

TEST(KvFormatTest, StorageSizes) {
  EXPECT_EQ(BytesPerElement(KvFormat::kFp32), 4u);
  EXPECT_EQ(BytesPerElement(KvFormat::kBf16), 2u);
  EXPECT_EQ(BytesPerElement(KvFormat::kFp8E4M3), 1u);
  EXPECT_EQ(BytesPerElement(KvFormat::kFp8E5M2), 1u);
  EXPECT_EQ(BytesPerElement(KvFormat::kInt8), 1u);
  // 8 KV heads x 128: one token's K.
  EXPECT_EQ(KvStorageBytes(KvFormat::kBf16, ScaleDtype::kFp32, 8, 128), 2048u);
  EXPECT_EQ(KvStorageBytes(KvFormat::kFp8E4M3, ScaleDtype::kFp16, 8, 128), 1024u);
  EXPECT_EQ(KvStorageBytes(KvFormat::kInt8, ScaleDtype::kFp32, 8, 128),
            1024u + 8 * 8);
  EXPECT_EQ(KvStorageBytes(KvFormat::kInt8, ScaleDtype::kFp16, 8, 128),
            1024u + 8 * 4);
  EXPECT_EQ(ScaleBytesPerVector(KvFormat::kBf16, ScaleDtype::kFp32), 0u);
}

// ------------------------------------------------------------- arguments
TEST(KvQuantTest, RejectsBadArgumentsWithoutWriting) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> codes(64, 0xAB);
  EXPECT_EQ(Quantize(KvFormat::kBf16, x.data(), 2, 0, codes.data(), {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quantize(KvFormat::kBf16, nullptr, 2, 8, codes.data(), {}).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status no_scales =
      Quantize(KvFormat::kInt8, x.data(), 2, 8, codes.data(), {});
  EXPECT_EQ(no_scales.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_scales.message(), HasSubstr("scales"));
  EXPECT_TRUE(std::all_of(codes.begin(), codes.end(),
                          [](uint8_t b) { return b == 0xAB; }));
  std::vector<float> out(64, 7.0f);
  EXPECT_EQ(Dequantize(KvFormat::kInt8, codes.data(), {}, 2, 8, out.data())
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(),
                          [](float f) { return f == 7.0f; }));
  // Nothing to do is fine, even with null buffers.
  EXPECT_TRUE(Quantize(KvFormat::kInt8, nullptr, 0, 0, nullptr, {}).ok());
  if (!CpuSupportsAvx2()) {
    EXPECT_EQ(Quantize(KvFormat::kBf16, x.data(), 1, 8, codes.data(), {},
                       {.path = CpuPath::kAvx2})
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

// ------------------------------------------------- portable == AVX2 bits
TEST(KvQuantTest, AvxAndPortablePathsAgreeBitForBit) {
  if (!CpuSupportsAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                            std::bit_cast<float>(0x7F800001u),  // sNaN
                            std::bit_cast<float>(0x00000001u),  // denormal
                            1e-40f, 448.0f, 464.0f, 57344.0f, 61440.0f, 65520.0f,
                            3e38f, -3e38f, 0x1p-10f, 0x1p-17f};
  for (size_t dim : {1u, 7u, 8u, 16u, 31u, 32u, 33u, 67u, 128u, 200u}) {
    const size_t nv = 5;
    std::vector<float> x = RandomVectors(rng, nv, dim);
    // Sprinkle special values into the first vector only, so the INT8 vectors
    // after it stay finite (a special value poisons its INT8 vector).
    for (size_t i = 0; i < dim && i < 24; ++i) {
      if (rng() % 2) x[i] = specials[rng() % std::size(specials)];
    }
    for (KvFormat f : kFormats) {
      for (ScaleDtype dt : {ScaleDtype::kFp32, ScaleDtype::kFp16}) {
        SCOPED_TRACE(::testing::Message() << KvFormatName(f) << " scales="
                                          << ScaleDtypeName(dt) << " dim=" << dim);
        const Encoded p = Encode(f, dt, x, nv, dim, CpuPath::kPortable);
        const Encoded a = Encode(f, dt, x, nv, dim, CpuPath::kAvx2);
        ASSERT_EQ(p.codes, a.codes);
        ASSERT_EQ(p.scales, a.scales);
        const std::vector<float> dp = Decode(f, dt, p, nv, dim, CpuPath::kPortable);
        const std::vector<float> da = Decode(f, dt, p, nv, dim, CpuPath::kAvx2);
        ASSERT_EQ(std::memcmp(dp.data(), da.data(), dp.size() * sizeof(float)), 0);
      }
    }
  }
}

// ------------------------------------------------- float format bounds
// Checks the per-element bounds documented in kv_quant.h.
TEST(KvQuantTest, FloatFormatsMeetDocumentedErrorBounds) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> log2mag(-30.0f, 30.0f);
  const size_t n = 50000;
  std::vector<float> x(n);
  for (float& v : x) v = std::exp2(log2mag(rng)) * ((rng() & 1) ? -1.0f : 1.0f);
  for (CpuPath path : {CpuPath::kAuto, CpuPath::kPortable}) {
    for (KvFormat f : {KvFormat::kFp32, KvFormat::kBf16, KvFormat::kFp8E4M3,
                       KvFormat::kFp8E5M2}) {
      const Encoded e = Encode(f, ScaleDtype::kFp32, x, 1, n, path);
      const std::vector<float> y = Decode(f, ScaleDtype::kFp32, e, 1, n, path);
      double worst_rel = 0;
      for (size_t i = 0; i < n; ++i) {
        const double a = std::fabs(static_cast<double>(x[i]));
        const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
        ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << x[i];
        switch (f) {
          case KvFormat::kFp32:
            ASSERT_EQ(Bits(y[i]), Bits(x[i]));
            break;
          case KvFormat::kBf16:
            ASSERT_LE(err, std::ldexp(a, -8)) << "x=" << x[i];
            worst_rel = std::max(worst_rel, err / a);
            break;
          case KvFormat::kFp8E4M3:
            if (a > 448) {
              ASSERT_EQ(std::fabs(y[i]), 448.0f);
            } else if (a >= 0x1p-6) {
              ASSERT_LE(err, std::ldexp(a, -4)) << "x=" << x[i];
              worst_rel = std::max(worst_rel, err / a);
            } else {
              ASSERT_LE(err, 0x1p-10) << "x=" << x[i];
            }
            break;
          case KvFormat::kFp8E5M2:
            if (a > 57344) {
              ASSERT_EQ(std::fabs(y[i]), 57344.0f);
            } else if (a >= 0x1p-14) {
              ASSERT_LE(err, std::ldexp(a, -3)) << "x=" << x[i];
              worst_rel = std::max(worst_rel, err / a);
            } else {
              ASSERT_LE(err, 0x1p-17) << "x=" << x[i];
            }
            break;
          case KvFormat::kInt8:
            break;
        }
      }
      // The bounds are tight: random data comes close to them.
      if (f == KvFormat::kBf16) { EXPECT_GT(worst_rel, 0x1p-9); }
      if (f == KvFormat::kFp8E4M3) { EXPECT_GT(worst_rel, 0x1p-5); }
      if (f == KvFormat::kFp8E5M2) { EXPECT_GT(worst_rel, 0x1p-4); }
    }
  }
}

TEST(KvQuantTest, Bf16SubnormalsWithinHalfAStep) {
  std::vector<float> x;
  for (uint32_t u = 1; u < 0x00800000u; u += 997) x.push_back(std::bit_cast<float>(u));
  const Encoded e = Encode(KvFormat::kBf16, ScaleDtype::kFp32, x, 1, x.size(),
                           CpuPath::kAuto);
  const std::vector<float> y =
      Decode(KvFormat::kBf16, ScaleDtype::kFp32, e, 1, x.size(), CpuPath::kAuto);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), 0x1p-134) << x[i];
  }
}

// ------------------------------------------------------------------ INT8
struct Params {
  float scale;
  float zp;
};

Params StoredParams(const Encoded& e, ScaleDtype dt, size_t v) {
  if (dt == ScaleDtype::kFp32) {
    Params p;
    std::memcpy(&p.scale, e.scales.data() + 8 * v, 4);
    std::memcpy(&p.zp, e.scales.data() + 8 * v + 4, 4);
    return p;
  }
  uint16_t h[2];
  std::memcpy(h, e.scales.data() + 4 * v, 4);
  return {HalfToFloat(h[0]), HalfToFloat(h[1])};
}

TEST(KvInt8Test, FullRangeTiesAndEndsOnACraftedVector) {
  // min 0, max 255: zp = 127.5, scale = 1; t = x - 127.5.
  std::vector<float> x = {0.0f, 255.0f, 1.0f, 2.0f, 127.0f, 128.0f, 127.5f, 254.0f};
  for (CpuPath path : {CpuPath::kAuto, CpuPath::kPortable}) {
    const Encoded e = Encode(KvFormat::kInt8, ScaleDtype::kFp32, x, 1, x.size(), path);
    const Params p = StoredParams(e, ScaleDtype::kFp32, 0);
    EXPECT_EQ(p.scale, 1.0f);
    EXPECT_EQ(p.zp, 127.5f);
    const int8_t* q = reinterpret_cast<const int8_t*>(e.codes.data());
    EXPECT_EQ(q[0], -128);  // t = -127.5: tie -> even -128.
    EXPECT_EQ(q[1], 127);   // t = 127.5: tie -> 128, clamped.
    EXPECT_EQ(q[2], -126);  // t = -126.5 -> even -126.
    EXPECT_EQ(q[3], -126);  // t = -125.5 -> even -126.
    EXPECT_EQ(q[4], 0);     // t = -0.5 -> 0.
    EXPECT_EQ(q[5], 0);     // t = 0.5 -> 0.
    EXPECT_EQ(q[6], 0);
    EXPECT_EQ(q[7], 126);   // t = 126.5 -> 126.
    const std::vector<float> y =
        Decode(KvFormat::kInt8, ScaleDtype::kFp32, e, 1, x.size(), path);
    EXPECT_EQ(y[0], -0.5f);
    EXPECT_EQ(y[1], 254.5f);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f);
  }
}

TEST(KvInt8Test, ConstantVectorsAreExactWithoutDivision) {
  std::vector<float> x(2 * 40);
  std::fill(x.begin(), x.begin() + 40, 3.25f);
  std::fill(x.begin() + 40, x.end(), -0.0f);
  x[45] = 0.0f;  // Mixed-sign zeros are still constant.
  for (ScaleDtype dt : {ScaleDtype::kFp32, ScaleDtype::kFp16}) {
    for (CpuPath path : {CpuPath::kAuto, CpuPath::kPortable}) {
      const Encoded e = Encode(KvFormat::kInt8, dt, x, 2, 40, path);
      for (size_t v = 0; v < 2; ++v) {
        const Params p = StoredParams(e, dt, v);
        EXPECT_EQ(Bits(p.scale), 0u);
        EXPECT_EQ(p.zp, v == 0 ? 3.25f : 0.0f);
      }
      EXPECT_TRUE(std::all_of(e.codes.begin(), e.codes.end(),
                              [](uint8_t b) { return b == 0; }));
      const std::vector<float> y = Decode(KvFormat::kInt8, dt, e, 2, 40, path);
      for (size_t i = 0; i < 80; ++i) EXPECT_EQ(y[i], x[i]) << i;
    }
  }
}

TEST(KvInt8Test, NonFiniteOrUnrepresentableVectorsArePoisoned) {
  const size_t dim = 20;
  std::vector<float> x(4 * dim);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i);
  x[3] = NAN;                  // Vector 0: NaN.
  x[dim + 19] = -INFINITY;     // Vector 1: -Inf.
  x[2 * dim + 5] = 2e5f;       // Vector 2: fine in fp32, zp beyond fp16.
  for (ScaleDtype dt : {ScaleDtype::kFp32, ScaleDtype::kFp16}) {
    for (CpuPath path : {CpuPath::kAuto, CpuPath::kPortable}) {
      SCOPED_TRACE(ScaleDtypeName(dt));
      const Encoded e = Encode(KvFormat::kInt8, dt, x, 4, dim, path);
      const std::vector<float> y = Decode(KvFormat::kInt8, dt, e, 4, dim, path);
      for (size_t v = 0; v < 4; ++v) {
        const bool poisoned = v < 2 || (v == 2 && dt == ScaleDtype::kFp16);
        const Params p = StoredParams(e, dt, v);
        EXPECT_EQ(std::isnan(p.scale), poisoned) << v;
        EXPECT_EQ(std::isnan(p.zp), poisoned) << v;
        for (size_t i = 0; i < dim; ++i) {
          EXPECT_EQ(std::isnan(y[v * dim + i]), poisoned) << v << "," << i;
          if (poisoned) { EXPECT_EQ(e.codes[v * dim + i], 0); }
        }
      }
    }
  }
}

TEST(KvInt8Test, RandomVectorsMeetDocumentedBounds) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t nv = 300, dim = 96;
  const std::vector<float> x = RandomVectors(rng, nv, dim);
  for (ScaleDtype dt : {ScaleDtype::kFp32, ScaleDtype::kFp16}) {
    for (CpuPath path : {CpuPath::kAuto, CpuPath::kPortable}) {
      SCOPED_TRACE(ScaleDtypeName(dt));
      const Encoded e = Encode(KvFormat::kInt8, dt, x, nv, dim, path);
      const std::vector<float> y = Decode(KvFormat::kInt8, dt, e, nv, dim, path);
      const int8_t* q = reinterpret_cast<const int8_t*>(e.codes.data());
      for (size_t v = 0; v < nv; ++v) {
        const float* xv = x.data() + v * dim;
        const auto [mn, mx] = std::minmax_element(xv, xv + dim);
        // The exact (fp32-computed) parameters the bounds refer to.
        const double zp = (static_cast<double>(*mn) + *mx) / 2;
        const double scale = (static_cast<double>(*mx) - *mn) / 255;
        const Params p = StoredParams(e, dt, v);
        if (std::fabs(zp) > 65504 && dt == ScaleDtype::kFp16) continue;
        ASSERT_TRUE(std::isfinite(p.scale) && std::isfinite(p.zp)) << v;
        for (size_t i = 0; i < dim; ++i) {
          const double err = std::fabs(static_cast<double>(y[v * dim + i]) - xv[i]);
          // Dequantization is exactly q * scale + zp with the stored params.
          ASSERT_EQ(y[v * dim + i], static_cast<float>(q[v * dim + i]) * p.scale + p.zp);
          if (dt == ScaleDtype::kFp32) {
            ASSERT_LE(err, 0.5 * scale * (1 + 0x1p-12) + 0x1p-23 * std::fabs(zp))
                << "vector " << v << " element " << i;
          } else {
            // Tight form, in the stored params...
            const double clamp_excess = std::max(
                {0.0, xv[i] - (p.zp + 127.5 * static_cast<double>(p.scale)),
                 (p.zp - 128.5 * static_cast<double>(p.scale)) - xv[i]});
            ASSERT_LE(err, 0.5 * p.scale * (1 + 0x1p-12) + 0x1p-23 * std::fabs(p.zp) +
                               clamp_excess)
                << "vector " << v << " element " << i;
            // ...and the documented one, in the exact params.
            ASSERT_LE(err, 0.57 * scale + 0x1p-10 * std::fabs(zp) + 0x1p-17)
                << "vector " << v << " element " << i;
          }
        }
        // The codes span the int8 range: max -> 127 and min -> -128 (or -127
        // when fp32 rounding of zp / scale puts t just inside -127.5).
        if (dt == ScaleDtype::kFp32 && scale > 0 && std::fabs(zp) < 1e3 * scale) {
          EXPECT_EQ(q[v * dim + (mx - xv)], 127) << "vector " << v;
          EXPECT_LE(q[v * dim + (mn - xv)], -127) << "vector " << v;
        }
      }
    }
  }
}

TEST(KvInt8Test, RoundingIsUnbiased) {
  // Mean signed error over many uniform values is ~0 relative to the scale
  // (a biased rounding, e.g. floor or half-up, would show ~0.5 or a tie bias).
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(0, 255 * 4);  // Many exact ties.
  const size_t nv = 400, dim = 256;
  std::vector<float> x(nv * dim);
  for (size_t v = 0; v < nv; ++v) {
    for (size_t i = 0; i < dim; ++i) x[v * dim + i] = grid(rng) * 0.25f;
    x[v * dim] = 0.0f;          // Pin min and max so scale == 1.
    x[v * dim + 1] = 255.0f;
  }
  const Encoded e = Encode(KvFormat::kInt8, ScaleDtype::kFp32, x, nv, dim,
                           CpuPath::kAuto);
  const std::vector<float> y =
      Decode(KvFormat::kInt8, ScaleDtype::kFp32, e, nv, dim, CpuPath::kAuto);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += y[i] - x[i];
  EXPECT_LT(std::fabs(sum / x.size()), 0.01);  // Scale is 1.
}

TEST(KvInt8Test, PerVectorIndependenceForPagedUse) {
  // Quantizing one token (all heads) at a time gives the same bytes as a batch.
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t tokens = 9, heads = 4, dim = 64;
  const std::vector<float> x = RandomVectors(rng, tokens * heads, dim);
  for (KvFormat f : kFormats) {
    const Encoded batch = Encode(f, ScaleDtype::kFp16, x, tokens * heads, dim,
                                 CpuPath::kAuto);
    for (size_t t = 0; t < tokens; ++t) {
      std::vector<float> tok(x.begin() + t * heads * dim,
                             x.begin() + (t + 1) * heads * dim);
      const Encoded one = Encode(f, ScaleDtype::kFp16, tok, heads, dim, CpuPath::kAuto);
      const size_t cb = KvCodeBytes(f, heads, dim);
      ASSERT_EQ(std::memcmp(one.codes.data(), batch.codes.data() + t * cb, cb), 0);
      const size_t sb = KvScaleBytes(f, ScaleDtype::kFp16, heads);
      if (sb > 0) {
        ASSERT_EQ(std::memcmp(one.scales.data(), batch.scales.data() + t * sb, sb), 0);
      }
    }
  }
}

}  // namespace
}  // namespace densegate::kernels
