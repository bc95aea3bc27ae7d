#include "results/stats/paired.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_format.h"
#include "results/stats/rank_tests.h"

namespace densegate::results {

absl::StatusOr<std::vector<double>> PairedLogRatios(
    absl::Span<const double> baseline, absl::Span<const double> candidate,
    Better better) {
  if (baseline.empty() || candidate.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "no samples to compare: %d baseline and %d candidate values",
        baseline.size(), candidate.size()));
  }
  if (baseline.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "paired comparison needs as many baseline as candidate values, got "
        "%d and %d",
        baseline.size(), candidate.size()));
  }
  std::vector<double> r(baseline.size());
  for (size_t i = 0; i < baseline.size(); ++i) {
    double b = baseline[i], c = candidate[i];
    if (!std::isfinite(b) || !std::isfinite(c) || b <= 0 || c <= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pair %d has baseline %g and candidate %g; every value must be "
          "finite and > 0",
          i, b, c));
    }
    r[i] = better == Better::kLower ? std::log(b / c) : std::log(c / b);
  }
  return r;
}

std::vector<double> SortedWalshAverages(absl::Span<const double> r) {
  std::vector<double> w;
  w.reserve(r.size() * (r.size() + 1) / 2);
  for (size_t i = 0; i < r.size(); ++i) {
    for (size_t j = i; j < r.size(); ++j) w.push_back((r[i] + r[j]) / 2);
  }
  std::sort(w.begin(), w.end());
  return w;
}

double HodgesLehmann(absl::Span<const double> r) {
  std::vector<double> w = SortedWalshAverages(r);
  size_t m = w.size();
  return m % 2 == 1 ? w[m / 2] : (w[m / 2 - 1] + w[m / 2]) / 2;
}

Interval WilcoxonBounds(absl::Span<const double> r, double alpha_low,
                        double alpha_high) {
  std::vector<double> w = SortedWalshAverages(r);
  int n = static_cast<int>(r.size());
  int m = static_cast<int>(w.size());
  // The C-th smallest Walsh average is a (1 - alpha) lower bound; by
  // symmetry the C-th largest is the upper bound.
  int c_low = SignedRankBoundOrder(n, alpha_low);
  int c_high = SignedRankBoundOrder(n, alpha_high);
  Interval bounds;
  bounds.low = c_low == 0 ? -INFINITY : w[c_low - 1];
  bounds.high = c_high == 0 ? INFINITY : w[m - c_high];
  return bounds;
}

Interval BootstrapMedianInterval(absl::Span<const double> r, double alpha,
                                 int resamples, uint64_t seed) {
  // Indices come from the raw generator (not a distribution object, whose
  // output differs between standard libraries) so a stored seed recomputes
  // the same interval anywhere.
  std::mt19937_64 rng(seed);
  std::vector<double> medians(resamples);
  std::vector<double> sample(r.size());
  for (int b = 0; b < resamples; ++b) {
    for (double& v : sample) v = r[rng() % r.size()];
    medians[b] = Median(sample);
  }
  std::sort(medians.begin(), medians.end());
  auto at = [&](double q) {
    double pos = q * (resamples - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, medians.size() - 1);
    return medians[lo] + (pos - lo) * (medians[hi] - medians[lo]);
  };
  return {at(alpha / 2), at(1 - alpha / 2)};
}

}  // namespace densegate::results
