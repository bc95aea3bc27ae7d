#include "results/changepoint/e_divisive.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::results {
namespace {

using ::testing::HasSubstr;

std::vector<double> Noisy(std::vector<std::pair<int, double>> segments, double sd,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, sd);
  std::vector<double> x;
  for (auto [length, level] : segments) {
    for (int i = 0; i < length; ++i) x.push_back(level + noise(rng));
  }
  return x;
}

TEST(EDivisiveTest, FindsASuddenRegression) {
  // Throughput history: 40 commits at 100, then 30 at 90.
  std::vector<double> x = Noisy({{40, 100}, {30, 90}}, 1.5, 1);
  auto cps = DetectChangePoints(x, EDivisiveOptions{});
  ASSERT_TRUE(cps.ok()) << cps.status();
  ASSERT_EQ(cps->size(), 1);
  EXPECT_NEAR((*cps)[0].index, 40, 1);
  EXPECT_LE((*cps)[0].p_value, 0.05);
  EXPECT_NEAR((*cps)[0].mean_before, 100, 1);
  EXPECT_NEAR((*cps)[0].mean_after, 90, 1);
}

TEST(EDivisiveTest, FindsTwoChanges) {
  std::vector<double> x = Noisy({{25, 50}, {25, 60}, {25, 45}}, 1.0, 2);
  auto cps = DetectChangePoints(x, EDivisiveOptions{});
  ASSERT_TRUE(cps.ok());
  ASSERT_EQ(cps->size(), 2);
  EXPECT_NEAR((*cps)[0].index, 25, 1);
  EXPECT_NEAR((*cps)[1].index, 50, 1);
}

TEST(EDivisiveTest, StationaryNoiseHasNoChangePoint) {
  // Over many independent stationary series, a change point is reported in
  // about `significance` of them, not more.
  int reported = 0;
  const int series = 40;
  for (int s = 0; s < series; ++s) {
    auto cps = DetectChangePoints(Noisy({{40, 10}}, 1.0, 100 + s),
                                  EDivisiveOptions{.seed = static_cast<uint64_t>(s)});
    ASSERT_TRUE(cps.ok());
    if (!cps->empty()) ++reported;
  }
  EXPECT_LE(reported, 6);  // 5% of 40 is 2; Binomial tail keeps this rare.
}

TEST(EDivisiveTest, FindsAChangeInSpreadNotJustMean) {
  std::vector<double> x = Noisy({{40, 0}}, 0.2, 3);
  std::vector<double> wide = Noisy({{40, 0}}, 3.0, 4);
  x.insert(x.end(), wide.begin(), wide.end());
  auto cps = DetectChangePoints(x, EDivisiveOptions{});
  ASSERT_TRUE(cps.ok());
  ASSERT_FALSE(cps->empty());
  EXPECT_NEAR((*cps)[0].index, 40, 3);
}

TEST(EDivisiveTest, ShortSeriesHasNothingToSplit) {
  auto cps = DetectChangePoints(std::vector<double>{1, 2, 3, 4, 5}, EDivisiveOptions{});
  ASSERT_TRUE(cps.ok());
  EXPECT_TRUE(cps->empty());
}

TEST(EDivisiveTest, RejectsBadInput) {
  auto nan = DetectChangePoints(std::vector<double>{1, NAN, 3}, EDivisiveOptions{});
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(nan.status().message()), HasSubstr("series[1]"));
  auto alpha = DetectChangePoints(std::vector<double>{1, 2, 3},
                                  EDivisiveOptions{.alpha = 2.5});
  EXPECT_EQ(alpha.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace densegate::results
