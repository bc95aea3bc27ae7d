#include "results/changepoint/e_divisive.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_format.h"

namespace densegate::results {
namespace {

constexpr int kMaxSeriesLength = 5000;

// 2-D prefix sums of the distance matrix D[i][j] = |x_i - x_j|^alpha, so the
// sum over any block of D costs O(1).
class DistanceSums {
 public:
  DistanceSums(absl::Span<const double> x, double alpha)
      : n_(x.size()), prefix_((n_ + 1) * (n_ + 1), 0.0) {
    for (size_t i = 0; i < n_; ++i) {
      double row = 0;
      for (size_t j = 0; j < n_; ++j) {
        row += std::pow(std::fabs(x[i] - x[j]), alpha);
        At(i + 1, j + 1) = At(i, j + 1) + row;
      }
    }
  }
  // Sum of D over rows [r0, r1) and columns [c0, c1).
  double Block(size_t r0, size_t r1, size_t c0, size_t c1) const {
    return Get(r1, c1) - Get(r0, c1) - Get(r1, c0) + Get(r0, c0);
  }

 private:
  double& At(size_t i, size_t j) { return prefix_[i * (n_ + 1) + j]; }
  double Get(size_t i, size_t j) const { return prefix_[i * (n_ + 1) + j]; }
  size_t n_;
  std::vector<double> prefix_;
};

struct Split {
  int tau = -1;
  double statistic = -INFINITY;
};

// Best split of the segment [a, b): maximizes mn/(m+n) * E-hat.
Split BestSplit(const DistanceSums& d, int a, int b, int min_segment) {
  Split best;
  for (int tau = a + min_segment; tau <= b - min_segment; ++tau) {
    double m = tau - a, n = b - tau;
    double between = d.Block(a, tau, tau, b);
    // Within-sums count each unordered pair twice; the diagonal is zero.
    double within_x = d.Block(a, tau, a, tau) / 2;
    double within_y = d.Block(tau, b, tau, b) / 2;
    double e = 2 * between / (m * n) - (m > 1 ? within_x / (m * (m - 1) / 2) : 0) -
               (n > 1 ? within_y / (n * (n - 1) / 2) : 0);
    double q = m * n / (m + n) * e;
    if (q > best.statistic) best = {tau, q};
  }
  return best;
}

// Best split over all current segments (bounds are sorted, first 0, last n).
std::pair<size_t, Split> BestOverSegments(const DistanceSums& d,
                                          const std::vector<int>& bounds,
                                          int min_segment) {
  std::pair<size_t, Split> best{0, Split{}};
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    Split split = BestSplit(d, bounds[s], bounds[s + 1], min_segment);
    if (split.tau >= 0 && split.statistic > best.second.statistic) best = {s, split};
  }
  return best;
}

double Mean(absl::Span<const double> x, int a, int b) {
  return std::accumulate(x.begin() + a, x.begin() + b, 0.0) / (b - a);
}

}  // namespace

absl::StatusOr<std::vector<ChangePoint>> DetectChangePoints(
    absl::Span<const double> series, const EDivisiveOptions& options) {
  if (options.min_segment < 2 || !(options.alpha > 0 && options.alpha < 2) ||
      !(options.significance > 0 && options.significance < 1) ||
      options.permutations < 1 || options.max_change_points < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "change-point options out of range: min_segment %d (>= 2), alpha %g "
        "(0..2), significance %g (0..1), permutations %d (>= 1)",
        options.min_segment, options.alpha, options.significance,
        options.permutations));
  }
  if (series.size() > kMaxSeriesLength) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "series of %d points is longer than the %d supported", series.size(),
        kMaxSeriesLength));
  }
  for (size_t i = 0; i < series.size(); ++i) {
    if (!std::isfinite(series[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("series[%d] = %g is not finite", i, series[i]));
    }
  }

  std::vector<ChangePoint> found;
  std::vector<int> bounds = {0, static_cast<int>(series.size())};
  DistanceSums observed(series, options.alpha);
  std::mt19937_64 rng(options.seed);
  std::vector<double> shuffled(series.begin(), series.end());

  while (static_cast<int>(found.size()) < options.max_change_points) {
    auto [segment, split] = BestOverSegments(observed, bounds, options.min_segment);
    if (split.tau < 0) break;  // No segment is long enough to split.
    // Permutation test: shuffle within the current segments (the null is
    // "no further change"), and compare the best statistic.
    int at_least = 0;
    for (int r = 0; r < options.permutations; ++r) {
      std::copy(series.begin(), series.end(), shuffled.begin());
      for (size_t s = 0; s + 1 < bounds.size(); ++s) {
        std::shuffle(shuffled.begin() + bounds[s], shuffled.begin() + bounds[s + 1], rng);
      }
      DistanceSums permuted(shuffled, options.alpha);
      if (BestOverSegments(permuted, bounds, options.min_segment).second.statistic >=
          split.statistic) {
        ++at_least;
      }
    }
    double p = (at_least + 1.0) / (options.permutations + 1.0);
    if (p > options.significance) break;
    ChangePoint cp;
    cp.index = split.tau;
    cp.p_value = p;
    cp.statistic = split.statistic;
    cp.mean_before = Mean(series, bounds[segment], split.tau);
    cp.mean_after = Mean(series, split.tau, bounds[segment + 1]);
    found.push_back(cp);
    bounds.insert(bounds.begin() + segment + 1, split.tau);
  }
  std::sort(found.begin(), found.end(),
            [](const ChangePoint& a, const ChangePoint& b) { return a.index < b.index; });
  return found;
}

}  // namespace densegate::results
