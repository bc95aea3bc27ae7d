// AVX2/FMA GEMM micro-kernels (see gemm_internal.h). Compiled for baseline
// x86-64; every function carries the target attribute and is only reached after
// CpuSupportsAvx2().
#include <immintrin.h>

#include <cstddef>

#include "kernels/ops/gemm_internal.h"

#define DG_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace densegate::kernels::gemm_internal {
namespace {

// rows x 16 tile in 2*rows ymm accumulators (12 for rows = 6, plus two B
// vectors and one broadcast A value: 15 of the 16 registers). Each accumulator
// lane is one output element's FMA chain, in p order.
template <int R>
DG_AVX2 void Kernel(size_t kc, const float* a, const float* b, size_t ldb,
                    const float* in, size_t ldi, float* out, size_t ldo) {
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    if (in != nullptr) {
      c0[r] = _mm256_loadu_ps(in + r * ldi);
      c1[r] = _mm256_loadu_ps(in + r * ldi + 8);
    } else {
      c0[r] = _mm256_setzero_ps();
      c1[r] = _mm256_setzero_ps();
    }
  }
  for (size_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    b += ldb;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
    a += R;
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(out + r * ldo, c0[r]);
    _mm256_storeu_ps(out + r * ldo + 8, c1[r]);
  }
}

// In-register transpose of 8 rows of 8 floats.
DG_AVX2 inline void Transpose8x8(__m256& r0, __m256& r1, __m256& r2, __m256& r3,
                                 __m256& r4, __m256& r5, __m256& r6,
                                 __m256& r7) {
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1);
  const __m256 t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3);
  const __m256 t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5);
  const __m256 t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7);
  const __m256 t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r0 = _mm256_permute2f128_ps(s0, s4, 0x20);
  r1 = _mm256_permute2f128_ps(s1, s5, 0x20);
  r2 = _mm256_permute2f128_ps(s2, s6, 0x20);
  r3 = _mm256_permute2f128_ps(s3, s7, 0x20);
  r4 = _mm256_permute2f128_ps(s0, s4, 0x31);
  r5 = _mm256_permute2f128_ps(s1, s5, 0x31);
  r6 = _mm256_permute2f128_ps(s2, s6, 0x31);
  r7 = _mm256_permute2f128_ps(s3, s7, 0x31);
}

}  // namespace

MicroKernel Avx2MicroKernel(int rows) {
  switch (rows) {
    case 1:
      return Kernel<1>;
    case 2:
      return Kernel<2>;
    case 3:
      return Kernel<3>;
    case 4:
      return Kernel<4>;
    case 5:
      return Kernel<5>;
    default:
      return Kernel<6>;
  }
}

DG_AVX2 void PackBTransposedAvx2(size_t kc, int cols, const float* bt,
                                 size_t ldbt, float* dst) {
  size_t p = 0;
  if (cols == kNr) {
    for (; p + 8 <= kc; p += 8) {
      for (int half = 0; half < 2; ++half) {
        const float* s = bt + static_cast<size_t>(8 * half) * ldbt + p;
        __m256 r0 = _mm256_loadu_ps(s);
        __m256 r1 = _mm256_loadu_ps(s + ldbt);
        __m256 r2 = _mm256_loadu_ps(s + 2 * ldbt);
        __m256 r3 = _mm256_loadu_ps(s + 3 * ldbt);
        __m256 r4 = _mm256_loadu_ps(s + 4 * ldbt);
        __m256 r5 = _mm256_loadu_ps(s + 5 * ldbt);
        __m256 r6 = _mm256_loadu_ps(s + 6 * ldbt);
        __m256 r7 = _mm256_loadu_ps(s + 7 * ldbt);
        Transpose8x8(r0, r1, r2, r3, r4, r5, r6, r7);
        float* d = dst + p * kNr + 8 * half;
        _mm256_storeu_ps(d, r0);
        _mm256_storeu_ps(d + kNr, r1);
        _mm256_storeu_ps(d + 2 * kNr, r2);
        _mm256_storeu_ps(d + 3 * kNr, r3);
        _mm256_storeu_ps(d + 4 * kNr, r4);
        _mm256_storeu_ps(d + 5 * kNr, r5);
        _mm256_storeu_ps(d + 6 * kNr, r6);
        _mm256_storeu_ps(d + 7 * kNr, r7);
      }
    }
  }
  for (; p < kc; ++p) {
    for (int j = 0; j < cols; ++j) dst[p * kNr + j] = bt[j * ldbt + p];
    for (int j = cols; j < kNr; ++j) dst[p * kNr + j] = 0.0f;
  }
}

DG_AVX2 void StreamRowsAvx2(size_t rows, size_t cols, size_t k, const float* a,
                            size_t lda, const float* b, size_t ldb, float* y,
                            size_t ldy) {
  const size_t cols8 = cols / 8 * 8;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < cols; ++j) y[r * ldy + j] = 0.0f;
  }
  // Four B rows per pass: each y vector is loaded and stored once per four
  // chained FMAs (p, p+1, p+2, p+3 in order, so the chain is unchanged).
  size_t p = 0;
  for (; p + 4 <= k; p += 4) {
    const float* b0 = b + p * ldb;
    const float* b1 = b0 + ldb;
    const float* b2 = b1 + ldb;
    const float* b3 = b2 + ldb;
    for (size_t r = 0; r < rows; ++r) {
      const float* ar = a + r * lda + p;
      const __m256 a0 = _mm256_set1_ps(ar[0]);
      const __m256 a1 = _mm256_set1_ps(ar[1]);
      const __m256 a2 = _mm256_set1_ps(ar[2]);
      const __m256 a3 = _mm256_set1_ps(ar[3]);
      float* yr = y + r * ldy;
      size_t j = 0;
      for (; j < cols8; j += 8) {
        __m256 v = _mm256_loadu_ps(yr + j);
        v = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b0 + j), v);
        v = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b1 + j), v);
        v = _mm256_fmadd_ps(a2, _mm256_loadu_ps(b2 + j), v);
        v = _mm256_fmadd_ps(a3, _mm256_loadu_ps(b3 + j), v);
        _mm256_storeu_ps(yr + j, v);
      }
      for (; j < cols; ++j) {
        float v = yr[j];
        v = __builtin_fmaf(ar[0], b0[j], v);
        v = __builtin_fmaf(ar[1], b1[j], v);
        v = __builtin_fmaf(ar[2], b2[j], v);
        v = __builtin_fmaf(ar[3], b3[j], v);
        yr[j] = v;
      }
    }
  }
  for (; p < k; ++p) {
    const float* brow = b + p * ldb;
    for (size_t r = 0; r < rows; ++r) {
      const float as = a[r * lda + p];
      const __m256 av = _mm256_set1_ps(as);
      float* yr = y + r * ldy;
      size_t j = 0;
      for (; j < cols8; j += 8) {
        _mm256_storeu_ps(yr + j, _mm256_fmadd_ps(av, _mm256_loadu_ps(brow + j),
                                                 _mm256_loadu_ps(yr + j)));
      }
      for (; j < cols; ++j) yr[j] = __builtin_fmaf(as, brow[j], yr[j]);
    }
  }
}

namespace {

// y[r*ldy + q], q < 8, for R rows: 8 outputs (rows of B^T) at a time. The
// loads and transposes of the next 8 x 8 block are independent of the FMA
// chain, so out-of-order execution overlaps them with it. (Interleaving more
// output blocks to shorten the chain latency measured slower here: register
// spills and twice the concurrent B^T streams.)
template <int R>
DG_AVX2 void StreamBtBlock(size_t k, const float* a, size_t lda,
                           const float* bt, size_t ldbt, float* y, size_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  size_t p = 0;
  for (; p + 8 <= k; p += 8) {
    __m256 t[8];
    for (int i = 0; i < 8; ++i) t[i] = _mm256_loadu_ps(bt + i * ldbt + p);
    Transpose8x8(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float* ar = a + r * lda + p;
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ar + q), t[q], acc[r]);
      }
    }
  }
  for (; p < k; ++p) {
    const float* s = bt + p;
    const __m256 col = _mm256_setr_ps(s[0], s[ldbt], s[2 * ldbt], s[3 * ldbt],
                                      s[4 * ldbt], s[5 * ldbt], s[6 * ldbt],
                                      s[7 * ldbt]);
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * lda + p), col, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * ldy, acc[r]);
}

template <int R>
DG_AVX2 void StreamBtRows(size_t cols, size_t k, const float* a, size_t lda,
                          const float* bt, size_t ldbt, float* y, size_t ldy) {
  size_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    StreamBtBlock<R>(k, a, lda, bt + j * ldbt, ldbt, y + j, ldy);
  }
  for (; j < cols; ++j) {
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (size_t p = 0; p < k; ++p) {
        acc = __builtin_fmaf(a[r * lda + p], bt[j * ldbt + p], acc);
      }
      y[r * ldy + j] = acc;
    }
  }
}

}  // namespace

DG_AVX2 void StreamRowsTransposedAvx2(size_t rows, size_t cols, size_t k,
                                      const float* a, size_t lda,
                                      const float* bt, size_t ldbt, float* y,
                                      size_t ldy) {
  switch (rows) {
    case 1:
      return StreamBtRows<1>(cols, k, a, lda, bt, ldbt, y, ldy);
    case 2:
      return StreamBtRows<2>(cols, k, a, lda, bt, ldbt, y, ldy);
    case 3:
      return StreamBtRows<3>(cols, k, a, lda, bt, ldbt, y, ldy);
    default:
      return StreamBtRows<4>(cols, k, a, lda, bt, ldbt, y, ldy);
  }
}

}  // namespace densegate::kernels::gemm_internal
