#include "results/stats/multiplicity.h"

#include <algorithm>
#include <numeric>

namespace densegate::results {

std::vector<bool> BenjaminiHochberg(absl::Span<const double> p_values, double q) {
  size_t m = p_values.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return p_values[a] < p_values[b]; });
  // The largest rank k with p_(k) <= k q / m; every smaller p is rejected too.
  size_t cutoff = 0;
  for (size_t k = 1; k <= m; ++k) {
    if (p_values[order[k - 1]] <= q * k / m) cutoff = k;
  }
  std::vector<bool> rejected(m, false);
  for (size_t k = 0; k < cutoff; ++k) rejected[order[k]] = true;
  return rejected;
}

}  // namespace densegate::results
