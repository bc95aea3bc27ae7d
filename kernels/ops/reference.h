// Plain fp64 references for the ops in gemm.h, vector_ops.h and attention.h,
// and the error metric of docs/design.md, section 7: rel_rms = RMS(out - ref) /
// RMS(ref), with the elementwise maximum error alongside. The references
// accumulate in double and use libm's double exp / sqrt / sin / cos; they are
// written for clarity, not speed (use them on test-sized inputs).
//
// Also the exact scalar definition of Gemm's result (GemmFmaChain), against
// which the optimized GEMM is compared bit for bit.
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_KERNELS_OPS_REFERENCE_H_
#define DENSEGATE_KERNELS_OPS_REFERENCE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/ops/vector_ops.h"

namespace densegate::kernels {

struct ErrorStats {
  double rel_rms = 0;   // RMS(out - ref) / RMS(ref); 0 when both are 0.
  double max_abs = 0;   // max |out - ref|.
  double max_rel = 0;   // max |out - ref| / max(|ref|, floor) (floor given).
  size_t worst = 0;     // Index of the max_abs element.
  size_t non_finite = 0;  // Outputs that are NaN/Inf where ref is finite.
};

// `rel_floor` keeps max_rel meaningful near zeros of ref.
ErrorStats CompareToReference(const float* out, const double* ref, size_t n,
                              double rel_floor = 1e-30);

// C = alpha * A.B + beta * C in double (ref is M x N, dense, ldr = N; c_in is
// read only when beta != 0). b_transposed as in GemmOptions.
void GemmReference(size_t m, size_t n, size_t k, const float* a, size_t lda,
                   const float* b, size_t ldb, bool b_transposed, float alpha,
                   float beta, const float* c_in, size_t ldc, double* ref);

// Gemm's exact definition, scalar: one std::fma chain per element, then the
// alpha / beta epilogue (see gemm.h). Writes C.
void GemmFmaChain(size_t m, size_t n, size_t k, const float* a, size_t lda,
                  const float* b, size_t ldb, bool b_transposed, float alpha,
                  float beta, float* c, size_t ldc);

// The naive triple loop (float accumulator, i-j-k order): the benchmark's
// baseline.
void GemmNaive(size_t m, size_t n, size_t k, const float* a, const float* b,
               float* c);

void RmsNormReference(const float* x, const float* weight, size_t dim,
                      double eps, double* out);
void SiluReference(const float* x, size_t n, double* out);
void SiluMulReference(const float* gate, const float* up, size_t n,
                      double* out);
void SoftmaxReference(const float* x, size_t n, size_t valid, double* out);
// Angles from scratch in double (theta^(-2i/d) * position).
void RopeReference(const float* x, size_t head_dim, size_t rotary_dim,
                   int64_t position, double theta, RopeStyle style,
                   double* out);
void AttendOneReference(const float* q, const float* const* keys,
                        const float* const* values, size_t n_keys,
                        size_t head_dim, size_t v_dim, double scale,
                        double* out);

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_OPS_REFERENCE_H_
