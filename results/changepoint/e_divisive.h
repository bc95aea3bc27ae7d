// Change-point detection on a branch's history of one metric, to find the
// commit where a gradual or sudden regression entered.
//
// E-divisive with means (Matteson and James, 2014): a nonparametric method
// that splits the series where the energy distance between the parts is
// largest, tests that split with a permutation test, and recurses while the
// splits stay significant. It needs no assumption about the noise's shape
// and finds changes in distribution, not only in mean.
//
// Thread-safety: pure function (its randomness comes from options.seed).
#ifndef DENSEGATE_RESULTS_CHANGEPOINT_E_DIVISIVE_H_
#define DENSEGATE_RESULTS_CHANGEPOINT_E_DIVISIVE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace densegate::results {

struct EDivisiveOptions {
  // Fewest points on each side of a change.
  int min_segment = 3;
  // Exponent of the distance |x - y|^alpha, in (0, 2).
  double alpha = 1.0;
  // A split is kept when its permutation p-value is <= this.
  double significance = 0.05;
  int permutations = 199;
  uint64_t seed = 1;
  int max_change_points = 10;
};

struct ChangePoint {
  // Index of the first point after the change.
  int index = 0;
  double p_value = 1;
  // Scaled energy statistic of the split.
  double statistic = 0;
  // Means of the segments on either side, as found at this split.
  double mean_before = 0;
  double mean_after = 0;
};

// Change points of `series`, sorted by index. InvalidArgument for non-finite
// values, bad options, or more than 5000 points.
absl::StatusOr<std::vector<ChangePoint>> DetectChangePoints(
    absl::Span<const double> series, const EDivisiveOptions& options);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_CHANGEPOINT_E_DIVISIVE_H_
