// Paired A/B analysis of benchmark repetitions.
//
// Baseline and candidate run interleaved on one node, each repetition in a
// fresh process, so repetition i of each arm forms a pair. The unit of
// analysis is the paired log-ratio r_i, oriented so that r > 0 is better:
//   lower-is-better metrics (times):       r_i = log(baseline_i / candidate_i)
//   higher-is-better metrics (throughput): r_i = log(candidate_i / baseline_i)
// Speedup = exp(center of r): baseline/candidate time, or candidate/baseline
// throughput. The center is the Hodges-Lehmann estimate (median of the Walsh
// averages), its confidence bounds come from the Wilcoxon signed-rank
// distribution (exact for n <= 100), and a seeded percentile bootstrap of the
// median ratio is reported beside them.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_RESULTS_STATS_PAIRED_H_
#define DENSEGATE_RESULTS_STATS_PAIRED_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace densegate::results {

enum class Better { kLower, kHigher };

// Log-ratios of paired samples, r > 0 meaning the candidate is better.
// InvalidArgument when: no pairs, sizes differ, a value is NaN, infinite, or
// not > 0 (times and throughputs are positive).
absl::StatusOr<std::vector<double>> PairedLogRatios(
    absl::Span<const double> baseline, absl::Span<const double> candidate,
    Better better);

// All n(n+1)/2 Walsh averages (r_i + r_j) / 2, i <= j, sorted ascending.
std::vector<double> SortedWalshAverages(absl::Span<const double> r);

// Hodges-Lehmann estimate of the center of `r`.
double HodgesLehmann(absl::Span<const double> r);

struct Interval {
  double low;   // -inf when no bound exists at this n and level.
  double high;  // +inf likewise.
};

// Distribution-free bounds for the center of `r` from the signed-rank
// distribution: low is a one-sided (1 - alpha_low) lower bound, high a
// one-sided (1 - alpha_high) upper bound. Both in log-ratio units.
Interval WilcoxonBounds(absl::Span<const double> r, double alpha_low,
                        double alpha_high);

// Percentile bootstrap interval (two-sided, 1 - alpha) of the median of `r`,
// from `resamples` resamples drawn with a generator seeded by `seed`; the
// same inputs always give the same interval.
Interval BootstrapMedianInterval(absl::Span<const double> r, double alpha,
                                 int resamples, uint64_t seed);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STATS_PAIRED_H_
