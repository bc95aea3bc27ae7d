#include "kernels/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops/vec_internal.h"
#include "kernels/ops/vector_ops.h"

namespace densegate::kernels {
namespace {

namespace vi = vec_internal;

absl::Status Check(const float* q, const void* keys, const void* values,
                   const AttentionShape& s, const float* out,
                   const float* probs) {
  if (s.head_dim == 0 || s.v_dim == 0) {
    return absl::InvalidArgumentError("AttendOne: head_dim and v_dim must be > 0");
  }
  if (out == nullptr) return absl::InvalidArgumentError("AttendOne: out is null");
  if (s.n_keys > 0 && (q == nullptr || keys == nullptr || values == nullptr ||
                       probs == nullptr)) {
    return absl::InvalidArgumentError(
        "AttendOne: q, keys, values and probs must be non-null when n_keys > 0");
  }
  return absl::OkStatus();
}

// KeyAt(j) / ValueAt(j) give row pointers.
template <typename KeyAt, typename ValueAt>
absl::Status Attend(const float* q, KeyAt key_at, ValueAt value_at,
                    const AttentionShape& s, float* out, float* probs,
                    CpuPath path) {
  absl::StatusOr<CpuPath> resolved = ResolveCpuPath(path);
  if (!resolved.ok()) return resolved.status();
  const bool avx2 = *resolved == CpuPath::kAvx2;
  std::fill(out, out + s.v_dim, 0.0f);
  if (s.n_keys == 0) return absl::OkStatus();
  for (size_t j = 0; j < s.n_keys; ++j) {
    const float* k = key_at(j);
    const float d = avx2 ? vi::DotAvx2(q, k, s.head_dim)
                         : vi::DotPortable(q, k, s.head_dim);
    probs[j] = d * s.scale;
  }
  if (absl::Status st = Softmax(probs, s.n_keys, s.n_keys, probs, *resolved);
      !st.ok()) {
    return st;
  }
  for (size_t j = 0; j < s.n_keys; ++j) {
    const float* v = value_at(j);
    if (avx2) {
      vi::AxpyAvx2(probs[j], v, s.v_dim, out);
    } else {
      for (size_t d = 0; d < s.v_dim; ++d) out[d] = std::fma(probs[j], v[d], out[d]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttendOne(const float* q, const float* const* keys,
                       const float* const* values, const AttentionShape& shape,
                       float* out, float* probs, CpuPath path) {
  if (absl::Status s = Check(q, keys, values, shape, out, probs); !s.ok()) {
    return s;
  }
  return Attend(
      q, [keys](size_t j) { return keys[j]; },
      [values](size_t j) { return values[j]; }, shape, out, probs, path);
}

absl::Status AttendOneStrided(const float* q, const float* keys,
                              size_t key_stride, const float* values,
                              size_t value_stride, const AttentionShape& shape,
                              float* out, float* probs, CpuPath path) {
  if (absl::Status s = Check(q, keys, values, shape, out, probs); !s.ok()) {
    return s;
  }
  return Attend(
      q, [keys, key_stride](size_t j) { return keys + j * key_stride; },
      [values, value_stride](size_t j) { return values + j * value_stride; },
      shape, out, probs, path);
}

}  // namespace densegate::kernels
