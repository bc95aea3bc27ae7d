// Rank statistics for A/B benchmark samples: the Wilcoxon signed-rank test
// (paired) and the Mann-Whitney U test (unpaired), with exact null
// distributions for small samples and normal approximations for large ones.
//
// Benchmark samples are few (often 4 to 30 pairs), skewed, and sometimes
// bimodal, so the gate uses rank methods: they hold their error rates without
// assuming normality, and the exact distributions keep them honest at n = 5.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_RESULTS_STATS_RANK_TESTS_H_
#define DENSEGATE_RESULTS_STATS_RANK_TESTS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace densegate::results {

// Largest n for which exact null distributions are computed; above it the
// normal approximation (with continuity correction) is used.
inline constexpr int kExactRankTestMaxN = 100;

// P(T+ <= t) under H0 for the Wilcoxon signed-rank statistic with n non-zero,
// untied differences (T+ = sum of the ranks of the positive ones).
double SignedRankCdf(int n, double t);

// P(U <= u) under H0 for the Mann-Whitney statistic of samples of sizes m, n
// without ties.
double MannWhitneyCdf(int m, int n, double u);

// Largest C in [0, n(n+1)/2] with P(T+ <= C - 1) <= alpha: the order of the
// Walsh average that is a one-sided (1 - alpha) lower confidence bound for the
// center of symmetry. 0 means no bound exists at this n and alpha (2^-n >
// alpha).
int SignedRankBoundOrder(int n, double alpha);

struct SignedRankTest {
  int n_used = 0;       // Differences that were not zero.
  double t_plus = 0;    // Sum of ranks of positive differences.
  // One-sided p-values: P(T+ >= observed) (evidence the center is > shift)
  // and P(T+ <= observed) (evidence it is < shift).
  double p_greater = 1;
  double p_less = 1;
  bool exact = false;   // Exact distribution (no ties, n small) or normal.
};

// Tests whether the center of symmetry of `x` differs from `shift`.
// Zero differences are dropped; ties get average ranks (normal approximation
// with tie correction then). Requires finite values.
SignedRankTest WilcoxonSignedRank(absl::Span<const double> x, double shift);

struct MannWhitneyTest {
  double u = 0;          // U of the first sample: #{x_i > y_j} + ties / 2.
  double p_greater = 1;  // P(U >= observed): first sample stochastically larger.
  double p_less = 1;
  bool exact = false;
  // Hodges-Lehmann shift estimate: median of all x_i - y_j.
  double shift_estimate = 0;
};

// Unpaired comparison of `x` and `y` (e.g. runs on different nodes).
// InvalidArgument for empty or non-finite input.
absl::StatusOr<MannWhitneyTest> MannWhitney(absl::Span<const double> x,
                                            absl::Span<const double> y);

// Median of a non-empty sample (mean of the two middle values for even n).
double Median(std::vector<double> v);

// Standard normal CDF and its inverse (for 0 < p < 1).
double NormalCdf(double z);
double NormalQuantile(double p);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STATS_RANK_TESTS_H_
