// Small fp32 vector ops of the inference runtime: RMSNorm, SiLU, SiLU-gated
// multiply, softmax (with length / causal masks), rotary embedding (RoPE) and the
// exp they use. Each has an fp64 reference in reference.h.
//
// Reproducibility: like gemm.h, every op is defined by a fixed sequence of fp32
// operations, so the AVX2 path and the portable path agree bit for bit:
//   * reductions (sum of squares, softmax max and sum) use 32 partial sums,
//     element i going to partial i mod 32 (FMA for sums of products), combined
//     by a fixed tree; results therefore do not depend on the CPU path, but a
//     sum over n elements differs (by rounding) from a strictly sequential one;
//   * exp is FastExp below (Cody-Waite reduction + degree-7 polynomial, FMA),
//     not libm, so both paths compute it identically.
// All outputs may alias their inputs (element-wise in-place use).
//
// Thread-safety: pure functions; safe to call concurrently on disjoint outputs.
#ifndef DENSEGATE_KERNELS_OPS_VECTOR_OPS_H_
#define DENSEGATE_KERNELS_OPS_VECTOR_OPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {

// exp(x) in fp32. Relative error <= 2^-21 (a few ulp) where the result is a
// normal float; +Inf beyond ~88.72, 0 (through gradual underflow) below ~-103.9,
// exp(-Inf) = 0, exp(+Inf) = +Inf, NaN -> NaN. Same bits on both paths.
float FastExp(float x);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for `rows` rows of
// `dim` (the inverse RMS is rounded to fp32 once per row; the scaling is
// (x * inv_rms) * weight, two roundings). Errors: dim == 0, null pointers,
// eps < 0.
absl::Status RmsNorm(const float* x, const float* weight, size_t rows,
                     size_t dim, float eps, float* out,
                     CpuPath path = CpuPath::kAuto);

// out = x * sigmoid(x), computed as x / (1 + FastExp(-x)). silu(-Inf) is NaN
// (as x * sigmoid(x) is in PyTorch).
absl::Status Silu(const float* x, size_t n, float* out,
                  CpuPath path = CpuPath::kAuto);

// out = silu(gate) * up: the SwiGLU MLP activation.
absl::Status SiluMul(const float* gate, const float* up, size_t n, float* out,
                     CpuPath path = CpuPath::kAuto);

// Numerically stable softmax over x[0, valid); out[valid, n) = 0 (length mask).
// Entries equal to -Inf inside [0, valid) are masked too (probability 0). If
// valid == 0 or every valid entry is -Inf, out is all zeros (no NaN). +Inf or
// NaN inputs give NaN outputs. Errors: valid > n, null pointers.
absl::Status Softmax(const float* x, size_t n, size_t valid, float* out,
                     CpuPath path = CpuPath::kAuto);

// Row-wise causal softmax, in place, over a rows x cols score matrix whose row
// r is the query at absolute position first_pos + r and column c the key at
// position c: row r keeps columns [0, min(cols, first_pos + r + 1)).
absl::Status CausalSoftmaxRows(float* x, size_t rows, size_t cols,
                               size_t first_pos, CpuPath path = CpuPath::kAuto);

// Which elements RoPE rotates together.
enum class RopeStyle {
  kNeox,         // GPT-NeoX / Llama (HF) style: pairs (i, i + rotary_dim / 2).
  kInterleaved,  // GPT-J / original style: pairs (2i, 2i + 1).
};

// cos/sin tables for one position: for i < rotary_dim / 2,
// angle_i = position * theta^(-2i / rotary_dim), computed in double (positions
// up to millions keep full fp32 accuracy) and rounded to fp32.
// Preconditions: rotary_dim even, cos/sin have rotary_dim / 2 entries.
void RopeCosSin(int64_t position, size_t rotary_dim, double theta, float* cos,
                float* sin);

// Rotates the first rotary_dim elements of each of n_heads vectors of head_dim
// (contiguous) by the angles of RopeCosSin: for each pair (a, b) with table
// entry i, a' = a cos - b sin, b' = a sin + b cos (fp32, unfused). Elements
// beyond rotary_dim (partial rotary) are untouched. Errors: rotary_dim odd,
// zero or > head_dim; null pointers.
absl::Status ApplyRope(float* x, size_t n_heads, size_t head_dim,
                       size_t rotary_dim, const float* cos, const float* sin,
                       RopeStyle style);

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_OPS_VECTOR_OPS_H_
