// Tests of vector_ops.h against the fp64 references (rel_rms and elementwise
// bounds), plus bit-for-bit agreement of the AVX2 and portable paths.
#include "kernels/ops/vector_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops/cpu_path.h"
#include "kernels/ops/reference.h"
#include "kernels/ops/vec_internal.h"

namespace densegate::kernels {
namespace {

uint64_t FreshSeed() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

std::vector<float> Random(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool BitEqual(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Sizes around the 8-lane and 32-partial boundaries.
const size_t kSizes[] = {1, 3, 8, 9, 31, 32, 33, 64, 100, 128, 257, 4096, 5000};

TEST(FastExpTest, AccurateOverTheWholeRange) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.7f; x += 0.0037f) {
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::fabs(FastExp(x) - want) / want;
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 0x1p-21) << "x=" << x;
  }
  EXPECT_GT(worst, 0x1p-25);  // Not trivially exact: the bound is meaningful.
  // Subnormal results: absolute error within a couple of subnormal steps.
  for (float x = -103.0f; x < -87.4f; x += 0.01f) {
    ASSERT_LE(std::fabs(FastExp(x) - std::exp(static_cast<double>(x))), 0x1p-148) << x;
  }
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_EQ(FastExp(-INFINITY), 0.0f);
  EXPECT_EQ(FastExp(-200.0f), 0.0f);
  EXPECT_EQ(FastExp(INFINITY), INFINITY);
  EXPECT_EQ(FastExp(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(FastExp(NAN)));
  EXPECT_TRUE(std::isfinite(FastExp(88.72f)));
}

TEST(FastExpTest, Avx2MatchesPortableBits) {
  if (!CpuSupportsAvx2()) GTEST_SKIP() << "no AVX2";
  std::vector<float> x;
  for (float v = -110.0f; v < 100.0f; v += 0.0131f) x.push_back(v);
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                  std::bit_cast<float>(0x7F800001u), 88.72283935546875f,
                  -87.33654475f, 1e-30f, -1e-30f}) {
    x.push_back(v);
  }
  std::vector<float> avx(x.size());
  vec_internal::ExpShiftedAvx2(x.data(), x.size(), 0.0f, avx.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(avx[i]),
              std::bit_cast<uint32_t>(vec_internal::ExpPortable(x[i] - 0.0f)))
        << "x=" << x[i];
  }
}

TEST(ReductionTest, Avx2MatchesPortableBitsAtEverySize) {
  if (!CpuSupportsAvx2()) GTEST_SKIP() << "no AVX2";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (size_t n = 0; n <= 200; ++n) {
    std::vector<float> a = Random(rng, n, -3.0f, 3.0f);
    std::vector<float> b = Random(rng, n, -3.0f, 3.0f);
    if (n > 5 && n % 7 == 0) a[n / 2] = NAN;
    namespace vi = vec_internal;
    ASSERT_EQ(std::bit_cast<uint32_t>(vi::DotAvx2(a.data(), b.data(), n)),
              std::bit_cast<uint32_t>(vi::DotPortable(a.data(), b.data(), n))) << n;
    ASSERT_EQ(std::bit_cast<uint32_t>(vi::SumAvx2(a.data(), n)),
              std::bit_cast<uint32_t>(vi::SumPortable(a.data(), n))) << n;
    ASSERT_EQ(std::bit_cast<uint32_t>(vi::MaxAvx2(a.data(), n)),
              std::bit_cast<uint32_t>(vi::MaxPortable(a.data(), n))) << n;
    // Softmax's fused exp + sum.
    std::vector<float> e_avx(n), e_port(n);
    const float shift = n > 0 ? a[0] : 0.0f;
    const float sum_avx = vi::ExpShiftedSumAvx2(a.data(), n, shift, e_avx.data());
    for (size_t i = 0; i < n; ++i) e_port[i] = vi::ExpPortable(a[i] - shift);
    ASSERT_EQ(std::bit_cast<uint32_t>(sum_avx),
              std::bit_cast<uint32_t>(vi::SumPortable(e_port.data(), n))) << n;
    ASSERT_TRUE(BitEqual(e_avx.data(), e_port.data(), n)) << n;
  }
}

TEST(RmsNormTest, MatchesReferenceAndPathsAgree) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (size_t dim : kSizes) {
    const size_t rows = 3;
    std::vector<float> x = Random(rng, rows * dim, -4.0f, 4.0f);
    for (size_t i = 0; i < dim; ++i) x[2 * dim + i] *= 1e-3f;  // Small row: eps matters.
    const std::vector<float> w = Random(rng, dim, 0.5f, 1.5f);
    const float eps = 1e-6f;
    std::vector<float> port(rows * dim), fast(rows * dim);
    ASSERT_TRUE(RmsNorm(x.data(), w.data(), rows, dim, eps, port.data(),
                        CpuPath::kPortable).ok());
    ASSERT_TRUE(RmsNorm(x.data(), w.data(), rows, dim, eps, fast.data()).ok());
    EXPECT_TRUE(BitEqual(port.data(), fast.data(), port.size())) << "dim " << dim;
    for (size_t r = 0; r < rows; ++r) {
      std::vector<double> ref(dim);
      RmsNormReference(x.data() + r * dim, w.data(), dim, eps, ref.data());
      const ErrorStats st = CompareToReference(fast.data() + r * dim, ref.data(), dim);
      EXPECT_LT(st.rel_rms, 1e-6) << "dim " << dim;
      EXPECT_LT(st.max_rel, 2e-6) << "dim " << dim << " worst " << st.worst;
    }
  }
  // In place.
  std::vector<float> x = Random(rng, 64, -1.0f, 1.0f), w(64, 1.0f), out(64);
  ASSERT_TRUE(RmsNorm(x.data(), w.data(), 1, 64, 0.0f, out.data()).ok());
  ASSERT_TRUE(RmsNorm(x.data(), w.data(), 1, 64, 0.0f, x.data()).ok());
  EXPECT_TRUE(BitEqual(x.data(), out.data(), 64));
  // Errors.
  EXPECT_EQ(RmsNorm(x.data(), w.data(), 1, 0, 0.0f, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNorm(x.data(), w.data(), 1, 64, -1.0f, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SiluTest, MatchesReferenceAndPathsAgree) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (size_t n : kSizes) {
    const std::vector<float> g = Random(rng, n, -20.0f, 20.0f);
    const std::vector<float> up = Random(rng, n, -2.0f, 2.0f);
    std::vector<double> ref(n);
    for (bool gated : {false, true}) {
      std::vector<float> port(n), fast(n);
      if (gated) {
        ASSERT_TRUE(SiluMul(g.data(), up.data(), n, port.data(), CpuPath::kPortable).ok());
        ASSERT_TRUE(SiluMul(g.data(), up.data(), n, fast.data()).ok());
        SiluMulReference(g.data(), up.data(), n, ref.data());
      } else {
        ASSERT_TRUE(Silu(g.data(), n, port.data(), CpuPath::kPortable).ok());
        ASSERT_TRUE(Silu(g.data(), n, fast.data()).ok());
        SiluReference(g.data(), n, ref.data());
      }
      EXPECT_TRUE(BitEqual(port.data(), fast.data(), n)) << n;
      const ErrorStats st = CompareToReference(fast.data(), ref.data(), n, 1e-20);
      EXPECT_LT(st.rel_rms, 2e-7) << n;
      EXPECT_LT(st.max_rel, 1e-6) << n << " worst x=" << g[st.worst];
    }
  }
  const float specials[] = {0.0f, -0.0f, INFINITY, -100.0f, 100.0f, NAN};
  float out[6];
  ASSERT_TRUE(Silu(specials, 6, out).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[2], INFINITY);
  EXPECT_LE(std::fabs(out[3]), 1e-40f);  // -100 * e^-100 underflows.
  EXPECT_EQ(out[4], 100.0f);
  EXPECT_TRUE(std::isnan(out[5]));
}

TEST(SoftmaxTest, MatchesReferenceWithLengthMasks) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  for (size_t n : kSizes) {
    for (size_t valid : {n, n / 2 + 1, size_t{1}}) {
      std::vector<float> x = Random(rng, n, -30.0f, 30.0f);
      if (valid > 4) x[valid / 3] = -INFINITY;  // A masked entry inside.
      std::vector<float> port(n, 9.0f), fast(n, 9.0f);
      ASSERT_TRUE(Softmax(x.data(), n, valid, port.data(), CpuPath::kPortable).ok());
      ASSERT_TRUE(Softmax(x.data(), n, valid, fast.data()).ok());
      EXPECT_TRUE(BitEqual(port.data(), fast.data(), n)) << n << "/" << valid;
      std::vector<double> ref(n);
      SoftmaxReference(x.data(), n, valid, ref.data());
      const ErrorStats st = CompareToReference(fast.data(), ref.data(), n, 1e-30);
      EXPECT_LT(st.rel_rms, 1e-6) << n << "/" << valid;
      double sum = 0;
      for (size_t i = 0; i < n; ++i) {
        sum += fast[i];
        if (i >= valid || x[i] == -INFINITY) {
          ASSERT_EQ(fast[i], 0.0f) << i;
        }
        // Elementwise: relative to the probability, beyond tiny ones.
        if (ref[i] > 1e-30) {
          ASSERT_LE(std::fabs(fast[i] - ref[i]) / ref[i], 4e-5) << i << " x=" << x[i];
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST(SoftmaxTest, DegenerateInputs) {
  std::vector<float> x = {-INFINITY, -INFINITY, 1.0f};
  std::vector<float> out(3, 5.0f);
  ASSERT_TRUE(Softmax(x.data(), 3, 2, out.data()).ok());  // All valid masked.
  EXPECT_THAT(out, ::testing::ElementsAre(0.0f, 0.0f, 0.0f));
  out.assign(3, 5.0f);
  ASSERT_TRUE(Softmax(x.data(), 3, 0, out.data()).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0.0f, 0.0f, 0.0f));
  // Large equal scores: no overflow.
  x = {1e30f, 1e30f, -1e30f};
  ASSERT_TRUE(Softmax(x.data(), 3, 3, out.data()).ok());
  EXPECT_THAT(out, ::testing::ElementsAre(0.5f, 0.5f, 0.0f));
  x = {1.0f, NAN, 2.0f};
  ASSERT_TRUE(Softmax(x.data(), 3, 3, out.data()).ok());
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[2]));
  EXPECT_EQ(Softmax(x.data(), 3, 4, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SoftmaxTest, CausalRowsMaskTheFuture) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t rows = 5, cols = 40, first_pos = 30;  // Chunk of a prefill.
  const std::vector<float> x = Random(rng, rows * cols, -5.0f, 5.0f);
  std::vector<float> y = x;
  ASSERT_TRUE(CausalSoftmaxRows(y.data(), rows, cols, first_pos).ok());
  for (size_t r = 0; r < rows; ++r) {
    const size_t valid = std::min(cols, first_pos + r + 1);
    std::vector<float> row(cols);
    ASSERT_TRUE(Softmax(x.data() + r * cols, cols, valid, row.data()).ok());
    EXPECT_TRUE(BitEqual(row.data(), y.data() + r * cols, cols)) << r;
    EXPECT_EQ(y[r * cols + cols - 1] == 0.0f, valid < cols) << r;
  }
}

TEST(RopeTest, MatchesReferenceBothStyles) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t heads = 3, head_dim = 128;
  for (size_t rotary : {size_t{128}, size_t{64}, size_t{2}}) {
    for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{1000000}}) {
      for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
        const std::vector<float> x = Random(rng, heads * head_dim, -2.0f, 2.0f);
        std::vector<float> y = x;
        std::vector<float> c(rotary / 2), s(rotary / 2);
        RopeCosSin(pos, rotary, 10000.0, c.data(), s.data());
        ASSERT_TRUE(ApplyRope(y.data(), heads, head_dim, rotary, c.data(), s.data(),
                              style).ok());
        for (size_t h = 0; h < heads; ++h) {
          std::vector<double> ref(head_dim);
          RopeReference(x.data() + h * head_dim, head_dim, rotary, pos, 10000.0,
                        style, ref.data());
          const ErrorStats st =
              CompareToReference(y.data() + h * head_dim, ref.data(), head_dim);
          EXPECT_LT(st.rel_rms, 3e-7) << "rotary " << rotary << " pos " << pos;
          EXPECT_LT(st.max_abs, 4 * 0x1p-24 * 4.0) << "rotary " << rotary << " pos " << pos;
          // Partial rotary: the tail is untouched.
          EXPECT_TRUE(BitEqual(y.data() + h * head_dim + rotary,
                               x.data() + h * head_dim + rotary, head_dim - rotary));
        }
        if (pos == 0) { EXPECT_TRUE(BitEqual(y.data(), x.data(), y.size())); }
      }
    }
  }
}

TEST(RopeTest, InterleavedIsNeoxOnAPermutedVector) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t d = 64;
  const std::vector<float> x = Random(rng, d, -1.0f, 1.0f);
  std::vector<float> c(d / 2), s(d / 2);
  RopeCosSin(123, d, 500000.0, c.data(), s.data());
  std::vector<float> inter = x, neox(d);
  for (size_t i = 0; i < d / 2; ++i) {
    neox[i] = x[2 * i];
    neox[i + d / 2] = x[2 * i + 1];
  }
  ASSERT_TRUE(ApplyRope(inter.data(), 1, d, d, c.data(), s.data(),
                        RopeStyle::kInterleaved).ok());
  ASSERT_TRUE(ApplyRope(neox.data(), 1, d, d, c.data(), s.data(), RopeStyle::kNeox).ok());
  for (size_t i = 0; i < d / 2; ++i) {
    EXPECT_EQ(inter[2 * i], neox[i]);
    EXPECT_EQ(inter[2 * i + 1], neox[i + d / 2]);
  }
  EXPECT_EQ(ApplyRope(inter.data(), 1, d, 3, c.data(), s.data(), RopeStyle::kNeox).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ApplyRope(inter.data(), 1, d, 2 * d, c.data(), s.data(), RopeStyle::kNeox).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace densegate::kernels
