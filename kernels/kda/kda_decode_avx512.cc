// The AVX-512 tiled KDA decode kernel. It performs, lane for lane, the same
// operations in the same order as the AVX2 one (kda_decode_avx2.cc): FMA in
// the ieee dot products, mul + add in the state update, the TF32 rounding of
// the operands before each product. Each column's accumulation runs over the
// rows in the same order, so both paths give the same bits in every mode;
// only the width differs (16 lanes: a 64-column block is 4 registers, and
// pass 2 runs over the block once instead of in two halves).
//
// Why a second vector path: on CPUs with full-width AVX-512 the AVX2 kernel
// is bound by instruction throughput rather than memory (a head resident in
// L2 takes about as long per byte as one streamed from DRAM); halving the
// instructions per state element is what lets it run at memory speed.
//
// Columns past the last multiple of 16 are handled with masked loads and
// stores, so no scalar tail is needed (masked-off lanes are never read or
// written). Functions using AVX-512 carry __attribute__((target)), and the
// dispatcher calls them only after __builtin_cpu_supports("avx512f").
#include <cstdint>

#include "kernels/kda/kda_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DENSEGATE_KDA_HAVE_AVX512_KERNEL 1
#else
#define DENSEGATE_KDA_HAVE_AVX512_KERNEL 0
#endif

namespace densegate::kernels::kda::internal {

#if DENSEGATE_KDA_HAVE_AVX512_KERNEL

#define DG_AVX512 __attribute__((target("avx512f")))

namespace {

// Lanes whose exponent is all ones (NaN, Inf) keep their bits.
DG_AVX512 inline __m512 KeepSpecial(__m512i bits, __m512i rounded) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  const __mmask16 special =
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exp_mask), exp_mask);
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(special, rounded, bits));
}

DG_AVX512 inline __m512 Tf32V(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(kTf32Mask));
  return KeepSpecial(bits, _mm512_and_si512(bits, mask));
}

DG_AVX512 inline __m512 Tf32RnaV(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(kTf32Mask));
  const __m512i half = _mm512_set1_epi32(static_cast<int>(kTf32RnaHalf));
  return KeepSpecial(bits,
                     _mm512_and_si512(_mm512_add_epi32(bits, half), mask));
}

// acc + x*b under precision P (see AccumTerm).
template <Precision P>
DG_AVX512 inline __m512 AccumV(__m512 acc, __m512 x, __m512 b, __m512 s) {
  if constexpr (P == Precision::kIeee) {
    return _mm512_fmadd_ps(x, b, acc);
  } else if constexpr (P == Precision::kTf32) {
    return _mm512_fmadd_ps(Tf32V(x), b, acc);
  } else if constexpr (P == Precision::kTf32Rna) {
    return _mm512_fmadd_ps(Tf32RnaV(x), b, acc);
  } else {
    const __m512 big = Tf32V(x);
    const __m512 small = Tf32V(_mm512_sub_ps(x, big));
    acc = _mm512_fmadd_ps(small, b, acc);
    acc = _mm512_fmadd_ps(big, s, acc);
    return _mm512_fmadd_ps(big, b, acc);
  }
}

// Columns [v0, v0 + 16 * NV); lanes of the last vector outside `last` are
// neither read nor written. `next` is row 0 of the block this thread runs
// next (row stride V): lines 0-1 of each of its rows are prefetched during
// pass 1, lines 2-3 during pass 2, so the next pass 1 finds its rows cached.
// kTail: the last vector is partial (masked). Full blocks use plain loads
// and stores, which masked stores are slower than on some CPUs.
template <bool kTail>
DG_AVX512 inline __m512 LoadV(__mmask16 mask, const float* p) {
  if constexpr (kTail) return _mm512_maskz_loadu_ps(mask, p);
  return _mm512_loadu_ps(p);
}

template <bool kTail>
DG_AVX512 inline void StoreV(__mmask16 mask, float* p, __m512 x) {
  if constexpr (kTail) {
    _mm512_mask_storeu_ps(p, mask, x);
  } else {
    _mm512_storeu_ps(p, x);
  }
}

template <Precision P, int NV, bool kTail>
DG_AVX512 void Avx512Block(const HeadArgs& a, int v0, __mmask16 last,
                           const float* next) {
  const int K = a.k_dim;
  const int64_t V = a.v_dim;
  __mmask16 mask[NV];
#pragma GCC unroll 4
  for (int n = 0; n < NV; ++n) mask[n] = n + 1 < NV ? 0xFFFF : last;
  __m512 acc[NV];
#pragma GCC unroll 4
  for (int n = 0; n < NV; ++n) acc[n] = _mm512_setzero_ps();
  for (int i = 0; i < K; ++i) {
    const float* row = a.state + i * V + v0;
    PrefetchLine(next, i * V);
    PrefetchLine(next, i * V + 16);
    if constexpr (P == Precision::kIeee) {
      const __m512 dk = _mm512_set1_ps(a.dk[i]);
#pragma GCC unroll 4
      for (int n = 0; n < NV; ++n) {
        acc[n] = _mm512_fmadd_ps(LoadV<kTail>(mask[n], row + 16 * n), dk,
                                 acc[n]);
      }
    } else {
      const __m512 d = _mm512_set1_ps(a.decay[i]);
      const __m512 kb = _mm512_set1_ps(a.k_op->big[i]);
      const __m512 ks = _mm512_set1_ps(a.k_op->small[i]);
#pragma GCC unroll 4
      for (int n = 0; n < NV; ++n) {
        const __m512 x =
            _mm512_mul_ps(LoadV<kTail>(mask[n], row + 16 * n), d);
        acc[n] = AccumV<P>(acc[n], x, kb, ks);
      }
    }
  }
  const __m512 beta = _mm512_set1_ps(a.beta);
  __m512 u[NV];
  __m512 o[NV];
#pragma GCC unroll 4
  for (int n = 0; n < NV; ++n) {
    const __m512 v = LoadV<kTail>(mask[n], a.v + v0 + 16 * n);
    u[n] = _mm512_mul_ps(beta, _mm512_sub_ps(v, acc[n]));
    o[n] = _mm512_setzero_ps();
  }
  for (int i = 0; i < K; ++i) {
    float* row = a.state + i * V + v0;
    PrefetchLine(next, i * V + 32);
    PrefetchLine(next, i * V + 48);
    const __m512 d = _mm512_set1_ps(a.decay[i]);
    const __m512 kk = _mm512_set1_ps(a.kn[i]);
    const __m512 qb = _mm512_set1_ps(a.q_op->big[i]);
    const __m512 qs = _mm512_set1_ps(a.q_op->small[i]);
#pragma GCC unroll 4
    for (int n = 0; n < NV; ++n) {
      // mul + add, not FMA, as in the other paths (same state bits).
      const __m512 x = _mm512_add_ps(
          _mm512_mul_ps(LoadV<kTail>(mask[n], row + 16 * n), d),
          _mm512_mul_ps(kk, u[n]));
      StoreV<kTail>(mask[n], row + 16 * n, x);
      o[n] = AccumV<P>(o[n], x, qb, qs);
    }
  }
#pragma GCC unroll 4
  for (int n = 0; n < NV; ++n) {
    StoreV<kTail>(mask[n], a.out + v0 + 16 * n, o[n]);
  }
}

template <Precision P>
DG_AVX512 void Avx512Head(const HeadArgs& a) {
  constexpr int kBlockCols = 64;
  const int V = a.v_dim;
  int v0 = 0;
  for (; v0 + kBlockCols <= V; v0 += kBlockCols) {
    const float* next =
        v0 + kBlockCols < V ? a.state + v0 + kBlockCols : a.next_head;
    Avx512Block<P, 4, false>(a, v0, 0xFFFF, next);
  }
  const int rest = V - v0;
  if (rest == 0) return;
  const int vectors = (rest + 15) / 16;
  const int tail = rest - 16 * (vectors - 1);  // 1..16 lanes.
  const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
  switch (vectors) {
    case 1:
      return Avx512Block<P, 1, true>(a, v0, last, a.next_head);
    case 2:
      return Avx512Block<P, 2, true>(a, v0, last, a.next_head);
    case 3:
      return Avx512Block<P, 3, true>(a, v0, last, a.next_head);
    default:
      return Avx512Block<P, 4, true>(a, v0, last, a.next_head);
  }
}

}  // namespace

bool Avx512KernelCompiled() { return true; }

void TiledHeadAvx512(const HeadArgs& a) {
  switch (a.precision) {
    case Precision::kIeee:
      return Avx512Head<Precision::kIeee>(a);
    case Precision::kTf32:
      return Avx512Head<Precision::kTf32>(a);
    case Precision::kTf32Rna:
      return Avx512Head<Precision::kTf32Rna>(a);
    case Precision::kTf32x3:
      return Avx512Head<Precision::kTf32x3>(a);
  }
}

#else  // !DENSEGATE_KDA_HAVE_AVX512_KERNEL

bool Avx512KernelCompiled() { return false; }

// Never called: CpuHasAvx512() is false without the kernel.
void TiledHeadAvx512(const HeadArgs& a) { TiledHeadPortable(a); }

#endif

}  // namespace densegate::kernels::kda::internal
