// Multiple-comparison control across the metrics of one evaluation.
//
// Thread-safety: pure function.
#ifndef DENSEGATE_RESULTS_STATS_MULTIPLICITY_H_
#define DENSEGATE_RESULTS_STATS_MULTIPLICITY_H_

#include <vector>

#include "absl/types/span.h"

namespace densegate::results {

// Benjamini-Hochberg: which of the hypotheses with these p-values are
// rejected while keeping the false discovery rate at `q`.
std::vector<bool> BenjaminiHochberg(absl::Span<const double> p_values, double q);

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STATS_MULTIPLICITY_H_
