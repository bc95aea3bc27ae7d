#include "kernels/ops/vector_ops.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "kernels/ops/vec_internal.h"

namespace densegate::kernels {
namespace {

namespace vi = vec_internal;

absl::StatusOr<bool> UseAvx2(CpuPath path) {
  absl::StatusOr<CpuPath> resolved = ResolveCpuPath(path);
  if (!resolved.ok()) return resolved.status();
  return *resolved == CpuPath::kAvx2;
}

// The softmax body once the path is known; x and out may alias.
void SoftmaxImpl(const float* x, size_t n, size_t valid, float* out,
                 bool avx2) {
  float m = -INFINITY;
  if (valid > 0) m = avx2 ? vi::MaxAvx2(x, valid) : vi::MaxPortable(x, valid);
  if (m == -INFINITY) {  // Nothing valid: all probabilities are 0.
    std::fill(out, out + n, 0.0f);
    return;
  }
  if (avx2) {
    const float s = vi::ExpShiftedSumAvx2(x, valid, m, out);
    vi::DivAvx2(out, valid, s, out);
  } else {
    for (size_t i = 0; i < valid; ++i) out[i] = vi::ExpPortable(x[i] - m);
    const float s = vi::SumPortable(out, valid);
    for (size_t i = 0; i < valid; ++i) out[i] = out[i] / s;
  }
  std::fill(out + valid, out + n, 0.0f);
}

}  // namespace

float FastExp(float x) { return vi::ExpPortable(x); }

absl::Status RmsNorm(const float* x, const float* weight, size_t rows,
                     size_t dim, float eps, float* out, CpuPath path) {
  if (rows == 0) return absl::OkStatus();
  if (dim == 0) return absl::InvalidArgumentError("RmsNorm: dim must be > 0");
  if (x == nullptr || weight == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("RmsNorm: null buffer");
  }
  if (!(eps >= 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RmsNorm: eps must be >= 0, got %g", eps));
  }
  absl::StatusOr<bool> avx2 = UseAvx2(path);
  if (!avx2.ok()) return avx2.status();
  const float n = static_cast<float>(dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float ss = *avx2 ? vi::DotAvx2(xr, xr, dim) : vi::DotPortable(xr, xr, dim);
    const float inv = 1.0f / std::sqrt(ss / n + eps);
    if (*avx2) {
      vi::ScaleMulAvx2(xr, weight, dim, inv, o);
    } else {
      for (size_t i = 0; i < dim; ++i) {
        const float t = xr[i] * inv;
        o[i] = t * weight[i];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Silu(const float* x, size_t n, float* out, CpuPath path) {
  if (n == 0) return absl::OkStatus();
  if (x == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Silu: null buffer");
  }
  absl::StatusOr<bool> avx2 = UseAvx2(path);
  if (!avx2.ok()) return avx2.status();
  if (*avx2) {
    vi::SiluAvx2(x, nullptr, n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = x[i] / (1.0f + vi::ExpPortable(-x[i]));
  }
  return absl::OkStatus();
}

absl::Status SiluMul(const float* gate, const float* up, size_t n, float* out,
                     CpuPath path) {
  if (n == 0) return absl::OkStatus();
  if (gate == nullptr || up == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SiluMul: null buffer");
  }
  absl::StatusOr<bool> avx2 = UseAvx2(path);
  if (!avx2.ok()) return avx2.status();
  if (*avx2) {
    vi::SiluAvx2(gate, up, n, out);
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float s = gate[i] / (1.0f + vi::ExpPortable(-gate[i]));
      out[i] = s * up[i];
    }
  }
  return absl::OkStatus();
}

absl::Status Softmax(const float* x, size_t n, size_t valid, float* out,
                     CpuPath path) {
  if (valid > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Softmax: valid length %d exceeds the row length %d", valid, n));
  }
  if (n == 0) return absl::OkStatus();
  if (x == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("Softmax: null buffer");
  }
  absl::StatusOr<bool> avx2 = UseAvx2(path);
  if (!avx2.ok()) return avx2.status();
  SoftmaxImpl(x, n, valid, out, *avx2);
  return absl::OkStatus();
}

absl::Status CausalSoftmaxRows(float* x, size_t rows, size_t cols,
                               size_t first_pos, CpuPath path) {
  if (rows == 0 || cols == 0) return absl::OkStatus();
  if (x == nullptr) return absl::InvalidArgumentError("CausalSoftmaxRows: null");
  absl::StatusOr<bool> avx2 = UseAvx2(path);
  if (!avx2.ok()) return avx2.status();
  for (size_t r = 0; r < rows; ++r) {
    const size_t valid = std::min(cols, first_pos + r + 1);
    SoftmaxImpl(x + r * cols, cols, valid, x + r * cols, *avx2);
  }
  return absl::OkStatus();
}

void RopeCosSin(int64_t position, size_t rotary_dim, double theta, float* cos,
                float* sin) {
  const size_t half = rotary_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
    const double angle = static_cast<double>(position) * inv_freq;
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

absl::Status ApplyRope(float* x, size_t n_heads, size_t head_dim,
                       size_t rotary_dim, const float* cos, const float* sin,
                       RopeStyle style) {
  if (rotary_dim == 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ApplyRope: rotary_dim (%d) must be even, > 0 and <= head_dim (%d)",
        rotary_dim, head_dim));
  }
  if (n_heads == 0) return absl::OkStatus();
  if (x == nullptr || cos == nullptr || sin == nullptr) {
    return absl::InvalidArgumentError("ApplyRope: null buffer");
  }
  const size_t half = rotary_dim / 2;
  // Element-wise and unfused: the compiler may vectorize these loops without
  // changing a bit, so there is a single (portable) path.
  for (size_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    if (style == RopeStyle::kNeox) {
      float* lo = v;
      float* hi = v + half;
      for (size_t i = 0; i < half; ++i) {
        const float a = lo[i], b = hi[i];
        const float ac = a * cos[i], bs = b * sin[i];
        const float as = a * sin[i], bc = b * cos[i];
        lo[i] = ac - bs;
        hi[i] = as + bc;
      }
    } else {
      for (size_t i = 0; i < half; ++i) {
        const float a = v[2 * i], b = v[2 * i + 1];
        const float ac = a * cos[i], bs = b * sin[i];
        const float as = a * sin[i], bc = b * cos[i];
        v[2 * i] = ac - bs;
        v[2 * i + 1] = as + bc;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace densegate::kernels
