#include "kernels/ops/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace densegate::kernels {

ErrorStats CompareToReference(const float* out, const double* ref, size_t n,
                              double rel_floor) {
  ErrorStats s;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double o = out[i];
    if (!std::isfinite(o) && std::isfinite(ref[i])) ++s.non_finite;
    const double e = std::fabs(o - ref[i]);
    err2 += e * e;
    ref2 += ref[i] * ref[i];
    if (e > s.max_abs || std::isnan(e)) {
      s.max_abs = e;
      s.worst = i;
    }
    s.max_rel = std::max(s.max_rel, e / std::max(std::fabs(ref[i]), rel_floor));
  }
  if (ref2 > 0) {
    s.rel_rms = std::sqrt(err2 / ref2);
  } else {
    s.rel_rms = err2 > 0 ? INFINITY : 0;
  }
  return s;
}

namespace {
inline float BAt(const float* b, size_t ldb, bool bt, size_t p, size_t j) {
  return bt ? b[j * ldb + p] : b[p * ldb + j];
}
}  // namespace

void GemmReference(size_t m, size_t n, size_t k, const float* a, size_t lda,
                   const float* b, size_t ldb, bool b_transposed, float alpha,
                   float beta, const float* c_in, size_t ldc, double* ref) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double s = 0;
      for (size_t p = 0; p < k; ++p) {
        s += static_cast<double>(a[i * lda + p]) * BAt(b, ldb, b_transposed, p, j);
      }
      double r = alpha * s;
      if (beta != 0.0f) r += static_cast<double>(beta) * c_in[i * ldc + j];
      ref[i * n + j] = r;
    }
  }
}

void GemmFmaChain(size_t m, size_t n, size_t k, const float* a, size_t lda,
                  const float* b, size_t ldb, bool b_transposed, float alpha,
                  float beta, float* c, size_t ldc) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (size_t p = 0; p < k; ++p) {
        s = std::fma(a[i * lda + p], BAt(b, ldb, b_transposed, p, j), s);
      }
      const float t = alpha * s;
      if (beta == 0.0f) {
        c[i * ldc + j] = t;
      } else {
        const float u = beta * c[i * ldc + j];
        c[i * ldc + j] = t + u;
      }
    }
  }
}

void GemmNaive(size_t m, size_t n, size_t k, const float* a, const float* b,
               float* c) {
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (size_t p = 0; p < k; ++p) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  }
}

void RmsNormReference(const float* x, const float* weight, size_t dim,
                      double eps, double* out) {
  double ss = 0;
  for (size_t i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
  for (size_t i = 0; i < dim; ++i) out[i] = x[i] * inv * weight[i];
}

void SiluReference(const float* x, size_t n, double* out) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = v / (1.0 + std::exp(-v));
  }
}

void SiluMulReference(const float* gate, const float* up, size_t n,
                      double* out) {
  SiluReference(gate, n, out);
  for (size_t i = 0; i < n; ++i) out[i] *= up[i];
}

void SoftmaxReference(const float* x, size_t n, size_t valid, double* out) {
  double m = -INFINITY;
  for (size_t i = 0; i < valid; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = (i < valid && m != -INFINITY) ? std::exp(x[i] - m) : 0.0;
    s += out[i];
  }
  if (s > 0) {
    for (size_t i = 0; i < n; ++i) out[i] /= s;
  }
}

void RopeReference(const float* x, size_t head_dim, size_t rotary_dim,
                   int64_t position, double theta, RopeStyle style,
                   double* out) {
  for (size_t i = 0; i < head_dim; ++i) out[i] = x[i];
  const size_t half = rotary_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) *
                         std::exp(-std::log(theta) * (2.0 * i) / rotary_dim);
    const double c = std::cos(angle), s = std::sin(angle);
    const size_t ia = style == RopeStyle::kNeox ? i : 2 * i;
    const size_t ib = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    out[ia] = x[ia] * c - static_cast<double>(x[ib]) * s;
    out[ib] = x[ia] * s + static_cast<double>(x[ib]) * c;
  }
}

void AttendOneReference(const float* q, const float* const* keys,
                        const float* const* values, size_t n_keys,
                        size_t head_dim, size_t v_dim, double scale,
                        double* out) {
  std::vector<double> s(n_keys);
  double m = -INFINITY;
  for (size_t j = 0; j < n_keys; ++j) {
    double d = 0;
    for (size_t i = 0; i < head_dim; ++i) d += static_cast<double>(q[i]) * keys[j][i];
    s[j] = d * scale;
    m = std::max(m, s[j]);
  }
  double total = 0;
  for (double& v : s) {
    v = std::exp(v - m);
    total += v;
  }
  for (size_t d = 0; d < v_dim; ++d) {
    double acc = 0;
    for (size_t j = 0; j < n_keys; ++j) acc += s[j] * values[j][d];
    out[d] = n_keys > 0 ? acc / total : 0.0;
  }
}

}  // namespace densegate::kernels
