// Internal to kernels/ops: GEMM micro-kernels. A micro-kernel computes a
// rows x 16 tile (rows = 1..6):
//   T[r][j] = chain over p < kc of fma(a[p*rows + r], b[p*ldb + j], .)
// starting from in[r*ldi + j] (or +0 when in is null), and stores T to
// out[r*ldo + j]. in and out may alias. a is a packed row panel; b is 16
// consecutive floats per p (a packed panel with ldb = 16, or B itself).
#ifndef DENSEGATE_KERNELS_OPS_GEMM_INTERNAL_H_
#define DENSEGATE_KERNELS_OPS_GEMM_INTERNAL_H_

#include <cstddef>

namespace densegate::kernels::gemm_internal {

inline constexpr int kMr = 6;
inline constexpr int kNr = 16;

using MicroKernel = void (*)(size_t kc, const float* a, const float* b,
                             size_t ldb, const float* in, size_t ldi,
                             float* out, size_t ldo);

// rows in 1..kMr.
MicroKernel Avx2MicroKernel(int rows);
MicroKernel PortableMicroKernel(int rows);

// Packs rows x 16 of B^T (bt[j*ldbt + p], j < cols <= 16, p < kc) into
// dst[p*16 + j], zero-filling columns >= cols. AVX2 transposes 8x8 blocks.
void PackBTransposedAvx2(size_t kc, int cols, const float* bt, size_t ldbt,
                         float* dst);

// Row-streaming path for few rows and B in K x N layout (decode shapes): for
// p = 0..k-1, y[r*ldy + j] = fma(a[r*lda + p], b[p*ldb + j], y[r*ldy + j]) for
// all r < rows, j < cols, y starting at +0. Same chains as the micro-kernels,
// but B is read row by row, contiguously, with no packing. AVX2 only.
inline constexpr size_t kStreamMaxRows = 4;
void StreamRowsAvx2(size_t rows, size_t cols, size_t k, const float* a,
                    size_t lda, const float* b, size_t ldb, float* y,
                    size_t ldy);

// Same for B given transposed (bt[j*ldbt + p]): 8x8 blocks of B^T are
// transposed in registers and fed to the chains in p order, so B^T is read
// row by row (contiguously) without a packing pass.
void StreamRowsTransposedAvx2(size_t rows, size_t cols, size_t k,
                              const float* a, size_t lda, const float* bt,
                              size_t ldbt, float* y, size_t ldy);

}  // namespace densegate::kernels::gemm_internal

#endif  // DENSEGATE_KERNELS_OPS_GEMM_INTERNAL_H_
