#include "kernels/kda/kda_testing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_format.h"

namespace densegate::kernels::kda::testing {
namespace {

template <typename A, typename B>
ErrorStats Compare(const A* out, const B* ref, int64_t n) {
  ErrorStats s;
  s.count = n;
  double se = 0, sr = 0, max_ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = static_cast<double>(ref[i]);
    const double e = static_cast<double>(out[i]) - r;
    se += e * e;
    sr += r * r;
    // NaN in out must not hide: make it the max error.
    const double ae = std::isnan(e) ? INFINITY : std::fabs(e);
    s.max_abs_err = std::max(s.max_abs_err, ae);
    max_ref = std::max(max_ref, std::fabs(r));
  }
  if (n > 0) {
    s.ref_rms = std::sqrt(sr / n);
    s.rel_rms = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se / n);
    if (std::isnan(s.rel_rms)) s.rel_rms = INFINITY;
  }
  s.max_rel_err = max_ref > 0 ? s.max_abs_err / max_ref : s.max_abs_err;
  return s;
}

double LogSigmoid(double x) {
  // -softplus(-x), stable for both signs.
  return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
}

}  // namespace

std::string ErrorStats::ToString() const {
  return absl::StrFormat(
      "rel_rms=%.3e max_abs_err=%.3e max_rel_err=%.3e ref_rms=%.3e n=%d",
      rel_rms, max_abs_err, max_rel_err, ref_rms, count);
}

ErrorStats CompareToReference(const float* out, const double* ref, int64_t n) {
  return Compare(out, ref, n);
}
ErrorStats CompareToReference(const double* out, const double* ref, int64_t n) {
  return Compare(out, ref, n);
}
ErrorStats CompareToReference(const float* out, const float* ref, int64_t n) {
  return Compare(out, ref, n);
}

std::vector<double> Widen(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

std::vector<float> RandomVector(int64_t n, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> r(n);
  for (float& x : r) x = static_cast<float>(scale * normal(rng));
  return r;
}

KdaHostInputs MakeRandomInputs(const KdaDims& dims, uint64_t seed,
                               const RandomInputOptions& options) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::vector<float>& x, int64_t n, auto f) {
    x.resize(n);
    for (float& e : x) e = static_cast<float>(f(normal(rng)));
  };
  const int64_t bh = static_cast<int64_t>(dims.batch) * dims.heads;
  const auto id = [](double x) { return x; };
  KdaHostInputs in;
  in.dims = dims;
  fill(in.q, bh * dims.k_dim, id);
  fill(in.k, bh * dims.k_dim, id);
  fill(in.v, bh * dims.v_dim, id);
  if (options.raw_gates) {
    fill(in.g, bh * dims.k_dim, id);
    fill(in.beta, bh, id);
    fill(in.a_log, dims.heads, [](double x) { return 0.5 * x; });
    fill(in.dt_bias, static_cast<int64_t>(dims.heads) * dims.k_dim,
         [](double x) { return 0.5 * x; });
  } else {
    const double s = options.gate_scale;
    fill(in.g, bh * dims.k_dim, [s](double x) { return LogSigmoid(x) / s; });
    fill(in.beta, bh, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  }
  in.qd = Widen(in.q);
  in.kd = Widen(in.k);
  in.vd = Widen(in.v);
  in.gd = Widen(in.g);
  in.betad = Widen(in.beta);
  in.a_logd = Widen(in.a_log);
  in.dt_biasd = Widen(in.dt_bias);
  return in;
}

KdaInputs<float> KdaHostInputs::F() const {
  KdaInputs<float> r;
  r.q = q.data();
  r.k = k.data();
  r.v = v.data();
  r.g = g.data();
  r.beta = beta.data();
  r.a_log = a_log.empty() ? nullptr : a_log.data();
  r.dt_bias = dt_bias.empty() ? nullptr : dt_bias.data();
  return r;
}

KdaInputs<double> KdaHostInputs::D() const {
  KdaInputs<double> r;
  r.q = qd.data();
  r.k = kd.data();
  r.v = vd.data();
  r.g = gd.data();
  r.beta = betad.data();
  r.a_log = a_logd.empty() ? nullptr : a_logd.data();
  r.dt_bias = dt_biasd.empty() ? nullptr : dt_biasd.data();
  return r;
}

uint64_t FreshSeed() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count());
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         (t * 0x9E3779B97F4A7C15ull);
}

}  // namespace densegate::kernels::kda::testing
