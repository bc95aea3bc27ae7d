#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "results/stats/multiplicity.h"
#include "results/stats/paired.h"
#include "results/stats/rank_tests.h"

namespace densegate::results {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// P(T+ <= t) by enumerating all 2^n sign patterns.
double BruteSignedRankCdf(int n, int t) {
  int count = 0;
  for (int mask = 0; mask < (1 << n); ++mask) {
    int sum = 0;
    for (int i = 0; i < n; ++i) {
      if (mask & (1 << i)) sum += i + 1;
    }
    if (sum <= t) ++count;
  }
  return static_cast<double>(count) / (1 << n);
}

TEST(SignedRankTest, ExactCdfMatchesEnumeration) {
  for (int n = 1; n <= 12; ++n) {
    for (int t = -1; t <= n * (n + 1) / 2 + 1; ++t) {
      EXPECT_DOUBLE_EQ(SignedRankCdf(n, t), BruteSignedRankCdf(n, t))
          << "n=" << n << " t=" << t;
    }
  }
}

TEST(SignedRankTest, NormalApproximationIsCloseAtLargeN) {
  // n = 100 is exact; the approximation used above it must agree there.
  int n = 100;
  double mean = n * (n + 1) / 4.0;
  double sd = std::sqrt(n * (n + 1) * (2.0 * n + 1) / 24.0);
  for (double z : {-2.5, -1.0, 0.0, 1.5}) {
    double t = std::floor(mean + z * sd);
    double approx = NormalCdf((t + 0.5 - mean) / sd);
    EXPECT_NEAR(SignedRankCdf(n, t), approx, 2e-3) << "z=" << z;
  }
}

TEST(SignedRankTest, BoundOrderIsLargestFeasible) {
  EXPECT_EQ(SignedRankBoundOrder(5, 0.025), 0);  // 2^-5 > 0.025: no bound.
  EXPECT_EQ(SignedRankBoundOrder(6, 1.0 / 64), 1);
  EXPECT_EQ(SignedRankBoundOrder(6, 0.02), 1);
  for (int n : {8, 15, 40}) {
    int c = SignedRankBoundOrder(n, 0.025);
    ASSERT_GT(c, 0);
    EXPECT_LE(SignedRankCdf(n, c - 1), 0.025);
    EXPECT_GT(SignedRankCdf(n, c), 0.025);
  }
}

TEST(SignedRankTest, MatchesPublishedExample) {
  // Hollander & Wolfe's depression scores (also R's wilcox.test example):
  // paired, one-sided "greater": V = 40, p = 10/512.
  std::vector<double> x = {1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30};
  std::vector<double> y = {0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29};
  std::vector<double> d;
  for (size_t i = 0; i < x.size(); ++i) d.push_back(x[i] - y[i]);
  SignedRankTest t = WilcoxonSignedRank(d, 0);
  EXPECT_EQ(t.n_used, 9);
  EXPECT_DOUBLE_EQ(t.t_plus, 40);
  EXPECT_TRUE(t.exact);
  EXPECT_NEAR(t.p_greater, 10.0 / 512, 1e-12);
}

TEST(SignedRankTest, ZerosDroppedAndTiesUseNormal) {
  SignedRankTest t = WilcoxonSignedRank(std::vector<double>{0, 1, 1, 2, -1}, 0);
  EXPECT_EQ(t.n_used, 4);
  EXPECT_FALSE(t.exact);
  EXPECT_GT(t.p_less, t.p_greater);
}

double BruteMannWhitneyCdf(int m, int n, int u) {
  // Every way to choose which of the m+n ranks belong to x.
  int total = 0, below = 0;
  for (int mask = 0; mask < (1 << (m + n)); ++mask) {
    if (__builtin_popcount(mask) != m) continue;
    int ux = 0, ys_below = 0;
    for (int i = 0; i < m + n; ++i) {
      if (mask & (1 << i)) {
        ux += ys_below;
      } else {
        ++ys_below;
      }
    }
    ++total;
    if (ux <= u) ++below;
  }
  return static_cast<double>(below) / total;
}

TEST(MannWhitneyTest, ExactCdfMatchesEnumeration) {
  for (auto [m, n] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}, {4, 4}, {5, 7}}) {
    for (int u = 0; u <= m * n; ++u) {
      EXPECT_NEAR(MannWhitneyCdf(m, n, u), BruteMannWhitneyCdf(m, n, u), 1e-12)
          << m << "," << n << " u=" << u;
    }
  }
}

TEST(MannWhitneyTest, SeparatedSamples) {
  auto t = MannWhitney(std::vector<double>{10, 11, 12, 13},
                       std::vector<double>{1, 2, 3});
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->u, 12);
  EXPECT_TRUE(t->exact);
  EXPECT_NEAR(t->p_greater, 1.0 / 35, 1e-12);  // One arrangement of C(7,3).
  EXPECT_DOUBLE_EQ(t->shift_estimate, 9.5);  // Median of the 12 x_i - y_j.
}

TEST(MannWhitneyTest, RejectsBadInput) {
  EXPECT_FALSE(MannWhitney({}, std::vector<double>{1}).ok());
  auto t = MannWhitney(std::vector<double>{1, NAN}, std::vector<double>{1});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("non-finite"));
}

TEST(PairedTest, LogRatiosAreOrientedSoPositiveIsBetter) {
  auto times = PairedLogRatios(std::vector<double>{2, 4}, std::vector<double>{1, 4},
                               Better::kLower);
  ASSERT_TRUE(times.ok());
  EXPECT_NEAR((*times)[0], std::log(2), 1e-15);
  EXPECT_EQ((*times)[1], 0);
  auto throughput = PairedLogRatios(std::vector<double>{100}, std::vector<double>{150},
                                    Better::kHigher);
  EXPECT_NEAR((*throughput)[0], std::log(1.5), 1e-15);
}

TEST(PairedTest, RejectsEmptyMismatchedAndNonFinite) {
  std::vector<double> ok = {1, 2};
  struct Case {
    std::vector<double> b, c;
    const char* message;
  };
  for (const Case& bad : std::vector<Case>{
           {{}, {}, "no samples"},
           {{1, 2, 3}, {1, 2}, "as many baseline as candidate"},
           {{1, NAN}, ok, "finite and > 0"},
           {{1, INFINITY}, ok, "finite and > 0"},
           {{1, 0}, ok, "finite and > 0"},
           {ok, {1, -2}, "finite and > 0"}}) {
    auto r = PairedLogRatios(bad.b, bad.c, Better::kLower);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bad.message));
  }
}

TEST(PairedTest, HodgesLehmannIsMedianOfWalshAverages) {
  std::vector<double> r = {1, 2, 3};
  EXPECT_THAT(SortedWalshAverages(r), ElementsAre(1, 1.5, 2, 2, 2.5, 3));
  EXPECT_DOUBLE_EQ(HodgesLehmann(r), 2);
  // Robust to one wild value, unlike the mean.
  EXPECT_LT(HodgesLehmann(std::vector<double>{1, 1.1, 0.9, 1.05, 50}), 1.2);
}

TEST(PairedTest, WilcoxonBoundsCoverAtTheirLevel) {
  // Heavy-tailed symmetric noise around a known center: the one-sided
  // bounds must each miss at most alpha of the time (plus sampling error).
  std::mt19937_64 rng(12345);
  std::student_t_distribution<double> noise(3);
  const double center = 0.3, alpha = 0.05;
  const int trials = 4000, n = 12;
  int miss_low = 0, miss_high = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> r(n);
    for (double& v : r) v = center + 0.1 * noise(rng);
    Interval b = WilcoxonBounds(r, alpha, alpha);
    if (b.low > center) ++miss_low;
    if (b.high < center) ++miss_high;
  }
  // Binomial(4000, 0.05): mean 200, sd ~14; exact discreteness makes the
  // true level a little under alpha.
  EXPECT_LT(miss_low, 245);
  EXPECT_LT(miss_high, 245);
  EXPECT_GT(miss_low, 100);  // Not vacuous either.
}

TEST(PairedTest, BoundsAreInfiniteWhenTooFewPairs) {
  Interval b = WilcoxonBounds(std::vector<double>{0.1, 0.2, 0.3}, 0.025, 0.025);
  EXPECT_TRUE(std::isinf(b.low));
  EXPECT_TRUE(std::isinf(b.high));
}

TEST(PairedTest, BootstrapIsSeededAndBracketsTheMedian) {
  std::vector<double> r = {0.10, 0.12, 0.09, 0.11, 0.13, 0.08, 0.10, 0.115};
  Interval a = BootstrapMedianInterval(r, 0.05, 2000, 7);
  Interval b = BootstrapMedianInterval(r, 0.05, 2000, 7);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  double median = Median(r);
  EXPECT_LE(a.low, median);
  EXPECT_GE(a.high, median);
  EXPECT_GE(a.low, 0.08);
  EXPECT_LE(a.high, 0.13);
}

TEST(MultiplicityTest, BenjaminiHochbergStepUp) {
  EXPECT_THAT(BenjaminiHochberg(std::vector<double>{0.01, 0.04, 0.03, 0.005}, 0.05),
              ElementsAre(true, true, true, true));
  EXPECT_THAT(BenjaminiHochberg(std::vector<double>{0.01, 0.02, 0.03, 0.5}, 0.05),
              ElementsAre(true, true, true, false));
  // Step-up: 0.04 at rank 2 of 2 passes (0.04 <= 0.05) and carries 0.03.
  EXPECT_THAT(BenjaminiHochberg(std::vector<double>{0.04, 0.03}, 0.05),
              ElementsAre(true, true));
  EXPECT_THAT(BenjaminiHochberg(std::vector<double>{0.2, 0.03}, 0.05),
              ElementsAre(false, false));
}

TEST(NormalTest, QuantileInvertsCdf) {
  for (double p : {1e-6, 0.01, 0.025, 0.3, 0.5, 0.9, 0.999}) {
    EXPECT_NEAR(NormalCdf(NormalQuantile(p)), p, 1e-9 * std::max(1.0, p * 1e3));
  }
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-9);
}

}  // namespace
}  // namespace densegate::results
