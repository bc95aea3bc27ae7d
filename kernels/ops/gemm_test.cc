// GEMM tests: random shapes that are not tile multiples against the fp64
// reference (rel_rms, elementwise bound) and bit for bit against the exact
// FMA-chain definition on every path; batch invariance; argument checks.
#include "kernels/ops/gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops/cpu_path.h"
#include "kernels/ops/reference.h"

namespace densegate::kernels {
namespace {

uint64_t FreshSeed() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

std::vector<CpuPath> Paths() {
  std::vector<CpuPath> p = {CpuPath::kPortable};
  if (CpuSupportsAvx2()) p.push_back(CpuPath::kAvx2);
  return p;
}

std::vector<float> Random(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                          float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  size_t m, n, k;
  size_t lda, ldb, ldc;
  bool bt;
  float alpha, beta;
  int threads;
};

// Runs one case on `path`, checks it against the chain definition (bits) and
// the fp64 reference (rel_rms and the sequential-sum bound per element).
void RunCase(std::mt19937_64& rng, const Case& cs, CpuPath path) {
  SCOPED_TRACE(::testing::Message()
               << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " bt=" << cs.bt
               << " alpha=" << cs.alpha << " beta=" << cs.beta
               << " threads=" << cs.threads << " path=" << CpuPathName(path));
  const std::vector<float> a = Random(rng, cs.m * cs.lda);
  const std::vector<float> b =
      Random(rng, (cs.bt ? cs.n : cs.k) * cs.ldb);
  std::vector<float> c0 = Random(rng, cs.m * cs.ldc);
  if (cs.beta == 0.0f) c0[0] = std::numeric_limits<float>::quiet_NaN();  // Not read.
  std::vector<float> c = c0;
  ASSERT_TRUE(Gemm(cs.m, cs.n, cs.k, a.data(), cs.lda, b.data(), cs.ldb, c.data(),
                   cs.ldc, {.alpha = cs.alpha, .beta = cs.beta, .b_transposed = cs.bt,
                            .num_threads = cs.threads, .path = path})
                  .ok());
  std::vector<float> chain = c0;
  GemmFmaChain(cs.m, cs.n, cs.k, a.data(), cs.lda, b.data(), cs.ldb, cs.bt,
               cs.alpha, cs.beta, chain.data(), cs.ldc);
  ASSERT_TRUE(BitEqual(c, chain)) << "differs from the FMA-chain definition";

  std::vector<double> ref(cs.m * cs.n);
  GemmReference(cs.m, cs.n, cs.k, a.data(), cs.lda, b.data(), cs.ldb, cs.bt,
                cs.alpha, cs.beta, c0.data(), cs.ldc, ref.data());
  std::vector<float> dense(cs.m * cs.n);
  const double u = 0x1p-24;
  const double gamma = cs.k * u / (1 - cs.k * u);
  for (size_t i = 0; i < cs.m; ++i) {
    for (size_t j = 0; j < cs.n; ++j) {
      dense[i * cs.n + j] = c[i * cs.ldc + j];
      double abs_sum = 0;
      for (size_t p = 0; p < cs.k; ++p) {
        const float bv = cs.bt ? b[j * cs.ldb + p] : b[p * cs.ldb + j];
        abs_sum += std::fabs(static_cast<double>(a[i * cs.lda + p]) * bv);
      }
      const double beta_c = cs.beta == 0.0f ? 0.0 : std::fabs(cs.beta * c0[i * cs.ldc + j]);
      // Chain bound, plus the epilogue's roundings (alpha*S, beta*C, the add).
      const double bound = std::fabs(cs.alpha) * (gamma + 3 * u) * abs_sum +
                           2 * u * beta_c + 1e-30;
      ASSERT_LE(std::fabs(c[i * cs.ldc + j] - ref[i * cs.n + j]), bound)
          << "element (" << i << "," << j << ")";
    }
    // Columns past N (row padding) are untouched.
    for (size_t j = cs.n; j < cs.ldc; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(c[i * cs.ldc + j]),
                std::bit_cast<uint32_t>(c0[i * cs.ldc + j]));
    }
  }
  const ErrorStats st = CompareToReference(dense.data(), ref.data(), dense.size());
  EXPECT_LT(st.rel_rms, 2e-6 * std::sqrt(std::max<size_t>(cs.k, 1)));
  EXPECT_EQ(st.non_finite, 0u);
}

TEST(GemmTest, RandomShapesMatchReferenceAndChainOnAllPaths) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  std::vector<Case> cases;
  // Shapes chosen to cross every blocking boundary: M around kMr = 6 and
  // kMc = 96 (and the direct/packed-B switch), N around kNr = 16 and kNc = 1024,
  // K around kKc = 256 (several K blocks: partial sums in C or a workspace).
  // The streaming paths (M <= 4, or M % 6 <= 4 rows left over; M <= 3 for
  // transposed B) get N and K that are not multiples of 8 or 32.
  const size_t fixed[][4] = {{1, 1, 1, 0},     {1, 17, 300, 0},  {6, 16, 256, 0},
                             {7, 33, 257, 0},  {97, 20, 30, 0},  {101, 47, 520, 0},
                             {3, 1030, 20, 0}, {13, 5, 1, 0},    {2, 300, 700, 0},
                             {1, 35, 301, 1},  {3, 9, 7, 1},     {2, 70, 64, 1},
                             {4, 1100, 33, 1}, {10, 45, 260, 1}};
  for (const auto& f : fixed) {
    const bool bt = f[3] != 0;
    cases.push_back({f[0], f[1], f[2], f[2], bt ? f[2] : f[1], f[1], bt, 1.0f,
                     0.0f, 1});
  }
  for (int i = 0; i < 14; ++i) {
    Case cs;
    cs.m = pick(1, i < 4 ? 130 : 40);
    cs.n = pick(1, 150);
    cs.k = pick(1, i % 3 == 0 ? 600 : 120);
    cs.bt = (i % 2) == 1;
    cs.lda = cs.k + pick(0, 3);
    cs.ldb = (cs.bt ? cs.k : cs.n) + pick(0, 3);
    cs.ldc = cs.n + pick(0, 3);
    const int mode = i % 4;
    cs.alpha = mode == 2 ? -0.75f : 1.0f;
    cs.beta = mode == 0 ? 0.0f : mode == 1 ? 1.0f : 0.5f;
    cs.threads = 1 + static_cast<int>(pick(0, 2));
    cases.push_back(cs);
  }
  for (const Case& cs : cases) {
    for (CpuPath path : Paths()) RunCase(rng, cs, path);
  }
}

TEST(GemmTest, RowsDoNotDependOnBatchThreadsOrLayout) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  const size_t m = 110, n = 70, k = 300;  // M > kMc: packed B for the batch.
  const std::vector<float> a = Random(rng, m * k);
  const std::vector<float> b = Random(rng, k * n);
  std::vector<float> bt(n * k);
  for (size_t p = 0; p < k; ++p) {
    for (size_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
  }
  for (CpuPath path : Paths()) {
    SCOPED_TRACE(CpuPathName(path));
    std::vector<float> full(m * n);
    ASSERT_TRUE(Gemm(m, n, k, a.data(), k, b.data(), n, full.data(), n,
                     {.path = path})
                    .ok());
    // Other thread counts and the transposed layout: identical bits.
    for (int threads : {2, 3, 5}) {
      for (bool transposed : {false, true}) {
        std::vector<float> c(m * n);
        ASSERT_TRUE(Gemm(m, n, k, a.data(), k, transposed ? bt.data() : b.data(),
                         transposed ? k : n, c.data(), n,
                         {.b_transposed = transposed, .num_threads = threads,
                          .path = path})
                        .ok());
        ASSERT_TRUE(BitEqual(c, full)) << "threads=" << threads
                                       << " transposed=" << transposed;
      }
    }
    // Any slice of rows (decode M=1, small batches, odd offsets): same bits.
    for (auto [start, count] : std::vector<std::pair<size_t, size_t>>{
             {0, 1}, {5, 1}, {109, 1}, {7, 2}, {8, 3}, {3, 4}, {20, 5},
             {10, 7}, {40, 13}, {1, 100}}) {
      for (bool transposed : {false, true}) {
        std::vector<float> c(count * n);
        ASSERT_TRUE(Gemm(count, n, k, a.data() + start * k, k,
                         transposed ? bt.data() : b.data(), transposed ? k : n,
                         c.data(), n, {.b_transposed = transposed, .path = path})
                        .ok());
        ASSERT_EQ(std::memcmp(c.data(), full.data() + start * n,
                              c.size() * sizeof(float)),
                  0)
            << "rows [" << start << ", " << start + count
            << ") transposed=" << transposed;
      }
    }
  }
}

TEST(GemmTest, EdgeShapesAndEpilogue) {
  std::vector<float> a = {1, 2, 3, 4};
  std::vector<float> b = {5, 6, 7, 8};
  std::vector<float> c = {1, 1, 1, 1};
  // K == 0: C = beta * C.
  ASSERT_TRUE(Gemm(2, 2, 0, nullptr, 0, nullptr, 0, c.data(), 2,
                   {.beta = 2.0f})
                  .ok());
  EXPECT_THAT(c, ::testing::ElementsAre(2, 2, 2, 2));
  ASSERT_TRUE(Gemm(2, 2, 0, nullptr, 0, nullptr, 0, c.data(), 2).ok());
  EXPECT_THAT(c, ::testing::ElementsAre(0, 0, 0, 0));
  // Empty M or N: nothing happens, even with null pointers.
  EXPECT_TRUE(Gemm(0, 5, 5, nullptr, 5, nullptr, 5, nullptr, 5).ok());
  // beta == 0 never reads C (NaN there does not leak).
  c = {NAN, NAN, NAN, NAN};
  ASSERT_TRUE(Gemm(2, 2, 2, a.data(), 2, b.data(), 2, c.data(), 2).ok());
  EXPECT_THAT(c, ::testing::ElementsAre(19, 22, 43, 50));
  // Accumulate: alpha = 1, beta = 1.
  ASSERT_TRUE(Gemm(2, 2, 2, a.data(), 2, b.data(), 2, c.data(), 2,
                   {.beta = 1.0f})
                  .ok());
  EXPECT_THAT(c, ::testing::ElementsAre(38, 44, 86, 100));
  // alpha / beta with transposed B: B^T = [[5,7],[6,8]].
  std::vector<float> bt = {5, 7, 6, 8};
  c = {1, 1, 1, 1};
  ASSERT_TRUE(Gemm(2, 2, 2, a.data(), 2, bt.data(), 2, c.data(), 2,
                   {.alpha = 0.5f, .beta = -1.0f, .b_transposed = true})
                  .ok());
  EXPECT_THAT(c, ::testing::ElementsAre(8.5f, 10, 20.5f, 24));
}

TEST(GemmTest, RejectsBadStridesWithoutTouchingC) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 7.0f);
  using ::testing::HasSubstr;
  absl::Status s = Gemm(4, 4, 4, a.data(), 4, b.data(), 4, c.data(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ldc"));
  s = Gemm(4, 4, 4, a.data(), 3, b.data(), 4, c.data(), 4);
  EXPECT_THAT(s.message(), HasSubstr("lda"));
  s = Gemm(4, 8, 4, a.data(), 4, b.data(), 4, c.data(), 8);
  EXPECT_THAT(s.message(), HasSubstr("ldb"));
  s = Gemm(4, 2, 8, a.data(), 8, b.data(), 4, c.data(), 2, {.b_transposed = true});
  EXPECT_THAT(s.message(), HasSubstr("transposed"));
  s = Gemm(4, 4, 4, nullptr, 4, b.data(), 4, c.data(), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](float v) { return v == 7.0f; }));
}

}  // namespace
}  // namespace densegate::kernels
