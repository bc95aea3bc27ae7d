// Single-query attention for one head in fp32, for runtimes that walk their own
// (paged) KV cache: scores s_j = scale * (q . k_j), p = softmax(s), and
// out = sum_j p_j v_j. Keys and values are fp32 rows given either as a list of
// pointers (one per cached token: blocks of a paged cache need not be adjacent)
// or as a strided matrix. Causal / length masking is the caller's choice of
// which keys to pass (a decode step passes all tokens up to and including its
// own).
//
// Numerics: q . k_j is the 32-partial FMA dot product of vector_ops.h, the
// softmax is vector_ops.h's Softmax, and out accumulates p_j v_j with one FMA
// chain per output element in key order, so the AVX2 and portable paths agree
// bit for bit and a key's contribution does not depend on how the caller
// batched other heads.
//
// Thread-safety: reentrant; concurrent calls must use distinct out/probs.
#ifndef DENSEGATE_KERNELS_OPS_ATTENTION_H_
#define DENSEGATE_KERNELS_OPS_ATTENTION_H_

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {

struct AttentionShape {
  size_t n_keys = 0;    // Number of cached tokens attended to.
  size_t head_dim = 0;  // Length of q and of each key.
  size_t v_dim = 0;     // Length of each value and of out.
  float scale = 1.0f;   // Usually 1 / sqrt(head_dim).
};

// keys[j] and values[j] point at token j's key (head_dim floats) and value
// (v_dim floats). `probs` (n_keys floats, caller-provided scratch) holds the
// attention probabilities on return. n_keys == 0 gives out = 0.
// Errors: InvalidArgument for zero head_dim / v_dim or null pointers;
// FailedPrecondition for an unavailable path.
absl::Status AttendOne(const float* q, const float* const* keys,
                       const float* const* values, const AttentionShape& shape,
                       float* out, float* probs, CpuPath path = CpuPath::kAuto);

// Same, with key j at keys + j * key_stride and value j at
// values + j * value_stride (strides in floats).
absl::Status AttendOneStrided(const float* q, const float* keys,
                              size_t key_stride, const float* values,
                              size_t value_stride, const AttentionShape& shape,
                              float* out, float* probs,
                              CpuPath path = CpuPath::kAuto);

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_OPS_ATTENTION_H_
