#include "results/stats/rank_tests.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace densegate::results {
namespace {

// Relative slack when comparing a tail probability with alpha, so that exact
// dyadic boundaries (alpha = 1/64 at n = 6) are not lost to rounding.
constexpr double kAlphaSlack = 1e-12;

// CDFs of the signed-rank statistic for n = 0..kExactRankTestMaxN, built once
// by the recurrence P_n(t) = (P_{n-1}(t) + P_{n-1}(t - n)) / 2 on the
// probability mass function.
const std::vector<std::vector<double>>& SignedRankCdfTable() {
  static const auto* table = [] {
    auto* cdfs = new std::vector<std::vector<double>>(kExactRankTestMaxN + 1);
    std::vector<double> pmf = {1.0};
    (*cdfs)[0] = {1.0};
    for (int n = 1; n <= kExactRankTestMaxN; ++n) {
      std::vector<double> next(pmf.size() + n, 0.0);
      for (size_t t = 0; t < pmf.size(); ++t) {
        next[t] += 0.5 * pmf[t];
        next[t + n] += 0.5 * pmf[t];
      }
      pmf = std::move(next);
      std::vector<double> cdf(pmf.size());
      std::partial_sum(pmf.begin(), pmf.end(), cdf.begin());
      (*cdfs)[n] = std::move(cdf);
    }
    return cdfs;
  }();
  return *table;
}

double SignedRankNormalCdf(int n, double t, double tie_correction) {
  double mean = n * (n + 1) / 4.0;
  double var = n * (n + 1) * (2.0 * n + 1) / 24.0 - tie_correction / 48.0;
  if (var <= 0) return t >= mean ? 1.0 : 0.0;
  return NormalCdf((t + 0.5 - mean) / std::sqrt(var));
}

// Ranks (1-based, ties averaged) of `v`; returns the tie correction
// sum(t^3 - t) over tie groups.
double AverageRanks(const std::vector<double>& v, std::vector<double>* ranks) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return v[a] < v[b]; });
  ranks->assign(v.size(), 0);
  double correction = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    double avg = (i + j) / 2.0 + 1;
    for (size_t k = i; k <= j; ++k) (*ranks)[order[k]] = avg;
    double t = j - i + 1;
    correction += t * t * t - t;
    i = j + 1;
  }
  return correction;
}

}  // namespace

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double NormalQuantile(double p) {
  // Acklam's rational approximation, refined by one Halley step.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  if (p <= 0) return -INFINITY;
  if (p >= 1) return INFINITY;
  constexpr double kLow = 0.02425;
  double x;
  if (p < kLow) {
    double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - kLow) {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  double e = NormalCdf(x) - p;
  double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

double SignedRankCdf(int n, double t) {
  if (n <= 0) return t >= 0 ? 1.0 : 0.0;
  if (t < 0) return 0.0;
  if (n > kExactRankTestMaxN) return SignedRankNormalCdf(n, t, 0);
  const std::vector<double>& cdf = SignedRankCdfTable()[n];
  size_t index = static_cast<size_t>(std::floor(t));
  return index >= cdf.size() ? 1.0 : cdf[index];
}

int SignedRankBoundOrder(int n, double alpha) {
  if (n <= 0) return 0;
  int m = n * (n + 1) / 2;
  double limit = alpha * (1 + kAlphaSlack);
  // P(T+ <= C - 1) grows with C; find the largest C that keeps it <= alpha.
  int lo = 0, hi = m;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (SignedRankCdf(n, mid - 1) <= limit) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

SignedRankTest WilcoxonSignedRank(absl::Span<const double> x, double shift) {
  std::vector<double> abs_d, sign;
  for (double v : x) {
    double d = v - shift;
    if (d == 0) continue;
    abs_d.push_back(std::fabs(d));
    sign.push_back(d > 0 ? 1 : -1);
  }
  SignedRankTest result;
  result.n_used = static_cast<int>(abs_d.size());
  if (result.n_used == 0) return result;
  std::vector<double> ranks;
  double ties = AverageRanks(abs_d, &ranks);
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (sign[i] > 0) result.t_plus += ranks[i];
  }
  int n = result.n_used;
  double m = n * (n + 1) / 2.0;
  bool has_ties = ties > 0;
  result.exact = !has_ties && n <= kExactRankTestMaxN;
  if (result.exact) {
    result.p_less = SignedRankCdf(n, result.t_plus);
    // By symmetry P(T+ >= t) = P(T+ <= m - t).
    result.p_greater = SignedRankCdf(n, m - result.t_plus);
  } else {
    result.p_less = SignedRankNormalCdf(n, result.t_plus, ties);
    result.p_greater = SignedRankNormalCdf(n, m - result.t_plus, ties);
  }
  return result;
}

double MannWhitneyCdf(int m, int n, double u) {
  if (u < 0) return 0;
  if (u >= static_cast<double>(m) * n) return 1;
  // counts[i][j][k]: arrangements of i x's and j y's with U = k. Rolled over
  // i to keep memory at O(n * m * n).
  int max_u = m * n;
  std::vector<std::vector<double>> prev(n + 1, std::vector<double>(max_u + 1, 0));
  for (int j = 0; j <= n; ++j) prev[j][0] = 1;  // i = 0: U is 0.
  for (int i = 1; i <= m; ++i) {
    std::vector<std::vector<double>> cur(n + 1, std::vector<double>(max_u + 1, 0));
    cur[0][0] = 1;
    for (int j = 1; j <= n; ++j) {
      for (int k = 0; k <= i * j; ++k) {
        // Largest element is an x (beats all j y's) or a y.
        double from_x = k >= j ? prev[j][k - j] : 0;
        cur[j][k] = from_x + cur[j - 1][k];
      }
    }
    prev = std::move(cur);
  }
  const std::vector<double>& counts = prev[n];
  double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  double below = 0;
  for (int k = 0; k <= static_cast<int>(std::floor(u)); ++k) below += counts[k];
  return below / total;
}

absl::StatusOr<MannWhitneyTest> MannWhitney(absl::Span<const double> x,
                                            absl::Span<const double> y) {
  if (x.empty() || y.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mann-Whitney needs two non-empty samples, got sizes %d and %d",
        x.size(), y.size()));
  }
  for (absl::Span<const double> s : {x, y}) {
    for (double v : s) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("Mann-Whitney: non-finite value %g in a sample", v));
      }
    }
  }
  std::vector<double> all(x.begin(), x.end());
  all.insert(all.end(), y.begin(), y.end());
  std::vector<double> ranks;
  double ties = AverageRanks(all, &ranks);
  double m = x.size(), n = y.size();
  double rank_sum_x = std::accumulate(ranks.begin(), ranks.begin() + x.size(), 0.0);
  MannWhitneyTest result;
  result.u = rank_sum_x - m * (m + 1) / 2;
  result.exact = ties == 0 && x.size() <= 30 && y.size() <= 30;
  if (result.exact) {
    result.p_less = MannWhitneyCdf(m, n, result.u);
    result.p_greater = MannWhitneyCdf(m, n, m * n - result.u);
  } else {
    double mean = m * n / 2;
    double var = m * n / 12 * ((m + n + 1) - ties / ((m + n) * (m + n - 1)));
    double sd = std::sqrt(std::max(var, 1e-300));
    result.p_less = NormalCdf((result.u + 0.5 - mean) / sd);
    result.p_greater = NormalCdf((m * n - result.u + 0.5 - mean) / sd);
  }
  std::vector<double> diffs;
  diffs.reserve(x.size() * y.size());
  for (double a : x) {
    for (double b : y) diffs.push_back(a - b);
  }
  result.shift_estimate = Median(std::move(diffs));
  return result;
}

double Median(std::vector<double> v) {
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace densegate::results
