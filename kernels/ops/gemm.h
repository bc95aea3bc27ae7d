// Blocked fp32 GEMM for the inference runtime: C = alpha * A.B + beta * C,
// row-major, any M, N, K, with B either K x N or pre-transposed (N x K, the
// usual layout of linear-layer weights).
//
// Exact semantics (what makes results reproducible). Every element is
//     S_ij = fma(a_i,K-1, b_K-1,j, ... fma(a_i1, b_1j, fma(a_i0, b_0j, +0)))
// i.e. one fp32 fused-multiply-add chain over p = 0..K-1 in increasing order,
// then C_ij = alpha * S_ij            (beta == 0: C is not read; NaNs in C vanish)
//   or  C_ij = alpha * S_ij + beta * C_ij   (two products, one add, no fusion).
// Cache blocking, the 6x16 AVX2 micro-kernel, packing, the small-M path and the
// thread split never change that chain, so:
//   * the AVX2 and portable paths agree bit for bit (portable uses std::fma);
//   * batch invariance: row i of C depends only on row i of A (and B), never on M,
//     on the other rows, on the thread count or on the B layout.
// The price is one accumulator per output element (no split-K), which is what
// the runtime needs (decode results must not change with the batch size).
//
// Error vs the exact product: |C_ij - exact| <= gamma_K * sum_p |a_ip b_pj| with
// gamma_K = K u / (1 - K u), u = 2^-24 (standard bound for a sequential sum).
//
// Thread-safety: Gemm is reentrant; concurrent calls must not write overlapping
// C. With num_threads > 1 it starts and joins its own std::threads.
#ifndef DENSEGATE_KERNELS_OPS_GEMM_H_
#define DENSEGATE_KERNELS_OPS_GEMM_H_

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {

struct GemmOptions {
  float alpha = 1.0f;
  // 0: C is write-only. 1 with alpha 1: accumulate into C.
  float beta = 0.0f;
  // false: B is K x N with row stride ldb >= N.
  // true:  B is given transposed, N x K with row stride ldb >= K.
  bool b_transposed = false;
  // Worker threads (the calling thread is one of them); <= 1 runs inline.
  int num_threads = 1;
  CpuPath path = CpuPath::kAuto;
};

// A is M x K (row stride lda >= K), C is M x N (row stride ldc >= N).
// Preconditions: C does not overlap A or B. Errors: InvalidArgument for strides
// smaller than the row length or null pointers with non-empty shapes;
// FailedPrecondition for kAvx2 on a CPU without it. C is untouched on error.
// K == 0 is allowed (S = 0).
absl::Status Gemm(size_t m, size_t n, size_t k, const float* a, size_t lda,
                  const float* b, size_t ldb, float* c, size_t ldc,
                  const GemmOptions& options = {});

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_OPS_GEMM_H_
