// The AVX2/FMA KDA decode kernels: the hand-written tiled one, and the
// fused one (internal::FusedHeadBody, vectorized here for AVX2). Every function that uses AVX2 is
// compiled with __attribute__((target("avx2,fma"))) so the rest of the
// binary keeps the baseline target; the dispatcher calls it only after
// __builtin_cpu_supports confirms the CPU has both extensions.
//
// It mirrors internal::PortableBlock operation for operation, with two
// deliberate differences: the ieee dot products use FMA (one rounding per
// term instead of two), and nothing else does. The state update stays
// mul + add, so in the TF32 modes (where each dot-product term is an exact
// product) both paths give the same bits.
#include <cmath>
#include <cstdint>

#include "kernels/kda/kda_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DENSEGATE_KDA_HAVE_AVX2_KERNEL 1
#else
#define DENSEGATE_KDA_HAVE_AVX2_KERNEL 0
#endif

namespace densegate::kernels::kda::internal {

#if DENSEGATE_KDA_HAVE_AVX2_KERNEL

#define DG_AVX2 __attribute__((target("avx2,fma")))

namespace {

// Keeps lanes whose exponent is all ones (NaN, Inf) as they are.
DG_AVX2 inline __m256 KeepSpecial(__m256i bits, __m256i rounded) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  const __m256i special =
      _mm256_cmpeq_epi32(_mm256_and_si256(bits, exp_mask), exp_mask);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, bits, special));
}

DG_AVX2 inline __m256 Tf32V(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(kTf32Mask));
  return KeepSpecial(bits, _mm256_and_si256(bits, mask));
}

DG_AVX2 inline __m256 Tf32RnaV(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(kTf32Mask));
  const __m256i half = _mm256_set1_epi32(static_cast<int>(kTf32RnaHalf));
  return KeepSpecial(bits,
                     _mm256_and_si256(_mm256_add_epi32(bits, half), mask));
}

// acc + x*b under precision P (see AccumTerm).
template <Precision P>
DG_AVX2 inline __m256 AccumV(__m256 acc, __m256 x, __m256 b, __m256 s) {
  if constexpr (P == Precision::kIeee) {
    return _mm256_fmadd_ps(x, b, acc);
  } else if constexpr (P == Precision::kTf32) {
    return _mm256_fmadd_ps(Tf32V(x), b, acc);
  } else if constexpr (P == Precision::kTf32Rna) {
    return _mm256_fmadd_ps(Tf32RnaV(x), b, acc);
  } else {
    const __m256 big = Tf32V(x);
    const __m256 small = Tf32V(_mm256_sub_ps(x, big));
    acc = _mm256_fmadd_ps(small, b, acc);
    acc = _mm256_fmadd_ps(big, s, acc);
    return _mm256_fmadd_ps(big, b, acc);
  }
}

template <Precision P>
DG_AVX2 inline float AccumScalar(float acc, float x, float b, float s) {
  if constexpr (P == Precision::kIeee) {
    return std::fma(x, b, acc);
  } else {
    return AccumTerm<P>(acc, x, b, s);
  }
}

// Columns [v0, v0 + 8 * NV), all in full 8-lane vectors.
// Pass 2 over vectors [N0, N1) of the block (at most 4, so u and o stay in
// registers): rewrite the state rows and accumulate o. If `next` is set, two
// cache lines of its row i are prefetched per row (see Avx2Block).
template <Precision P, int N0, int N1>
DG_AVX2 void Avx2Pass2(const HeadArgs& a, int v0, const __m256* u,
                       const float* next) {
  constexpr int kN = N1 - N0;
  const int K = a.k_dim;
  const int64_t V = a.v_dim;
  __m256 o[kN];
#pragma GCC unroll 4
  for (int n = 0; n < kN; ++n) o[n] = _mm256_setzero_ps();
  for (int i = 0; i < K; ++i) {
    float* row = a.state + i * V + v0 + 8 * N0;
    const __m256 d = _mm256_set1_ps(a.decay[i]);
    const __m256 kk = _mm256_set1_ps(a.kn[i]);
    const __m256 qb = _mm256_set1_ps(a.q_op->big[i]);
    const __m256 qs = _mm256_set1_ps(a.q_op->small[i]);
    if (next != nullptr) {
      PrefetchLine(next, i * V);
      PrefetchLine(next, i * V + 16);
    }
#pragma GCC unroll 4
    for (int n = 0; n < kN; ++n) {
      // mul + add, not FMA: keeps the state bit-identical to the portable
      // path (see the file comment).
      const __m256 x =
          _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(row + 8 * n), d),
                        _mm256_mul_ps(kk, u[N0 + n]));
      _mm256_storeu_ps(row + 8 * n, x);
      o[n] = AccumV<P>(o[n], x, qb, qs);
    }
  }
#pragma GCC unroll 4
  for (int n = 0; n < kN; ++n) {
    _mm256_storeu_ps(a.out + v0 + 8 * (N0 + n), o[n]);
  }
}

// Columns [v0, v0 + 8 * NV), NV <= 8, all in full 8-lane vectors. Pass 1
// runs all NV accumulators at once (up to 8 independent FMA chains hide the
// FMA latency); pass 2 runs in halves of at most 4 vectors, the block
// (64 columns x K rows, 32 KiB at K = 128) still in L1.
// `next` is row 0 of the block this thread processes next (row stride V).
// Its rows are prefetched while this block is processed: lines 0-1 of each
// row during pass 1, lines 2-3 during the first half of pass 2, so memory
// reads are spread over the whole block instead of stalling the next pass 1.
template <Precision P, int NV>
DG_AVX2 void Avx2Block(const HeadArgs& a, int v0, const float* next) {
  const int K = a.k_dim;
  const int64_t V = a.v_dim;
  __m256 acc[NV];
#pragma GCC unroll 8
  for (int n = 0; n < NV; ++n) acc[n] = _mm256_setzero_ps();
  for (int i = 0; i < K; ++i) {
    const float* row = a.state + i * V + v0;
    // First half of the next block's row i (the rest comes in pass 2), so
    // the memory reads are spread over the whole block, not bunched.
    PrefetchLine(next, i * V);
    PrefetchLine(next, i * V + 16);
    if constexpr (P == Precision::kIeee) {
      const __m256 dk = _mm256_set1_ps(a.dk[i]);
#pragma GCC unroll 8
      for (int n = 0; n < NV; ++n) {
        acc[n] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * n), dk, acc[n]);
      }
    } else {
      const __m256 d = _mm256_set1_ps(a.decay[i]);
      const __m256 kb = _mm256_set1_ps(a.k_op->big[i]);
      const __m256 ks = _mm256_set1_ps(a.k_op->small[i]);
#pragma GCC unroll 8
      for (int n = 0; n < NV; ++n) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * n), d);
        acc[n] = AccumV<P>(acc[n], x, kb, ks);
      }
    }
  }
  const __m256 beta = _mm256_set1_ps(a.beta);
  __m256 u[NV];
#pragma GCC unroll 8
  for (int n = 0; n < NV; ++n) {
    u[n] = _mm256_mul_ps(
        beta, _mm256_sub_ps(_mm256_loadu_ps(a.v + v0 + 8 * n), acc[n]));
  }
  constexpr int kHalf = NV < 4 ? NV : 4;
  // Integer offset: `next` + 32 may lie past the end of the buffer.
  const float* next_half = reinterpret_cast<const float*>(
      reinterpret_cast<uintptr_t>(next) + 32 * sizeof(float));
  Avx2Pass2<P, 0, kHalf>(a, v0, u, next_half);
  if constexpr (NV > 4) Avx2Pass2<P, 4, NV>(a, v0, u, nullptr);
}

// The last V % 8 columns, one at a time (same arithmetic per column as the
// vector lanes).
template <Precision P>
DG_AVX2 void ScalarColumns(const HeadArgs& a, int v0, int w) {
  const int K = a.k_dim;
  const int64_t V = a.v_dim;
  float acc[8] = {};
  for (int i = 0; i < K; ++i) {
    const float* row = a.state + i * V + v0;
    for (int j = 0; j < w; ++j) {
      if constexpr (P == Precision::kIeee) {
        acc[j] = std::fma(row[j], a.dk[i], acc[j]);
      } else {
        acc[j] = AccumTerm<P>(acc[j], row[j] * a.decay[i], a.k_op->big[i],
                              a.k_op->small[i]);
      }
    }
  }
  float u[8];
  for (int j = 0; j < w; ++j) u[j] = a.beta * (a.v[v0 + j] - acc[j]);
  float o[8] = {};
  for (int i = 0; i < K; ++i) {
    float* row = a.state + i * V + v0;
    for (int j = 0; j < w; ++j) {
      const float x = row[j] * a.decay[i] + a.kn[i] * u[j];
      row[j] = x;
      o[j] = AccumScalar<P>(o[j], x, a.q_op->big[i], a.q_op->small[i]);
    }
  }
  for (int j = 0; j < w; ++j) a.out[v0 + j] = o[j];
}

template <Precision P>
DG_AVX2 void Avx2Head(const HeadArgs& a) {
  const int V = a.v_dim;
  const float* next_head = a.next_head;
  int v0 = 0;
  for (; v0 + 64 <= V; v0 += 64) {
    Avx2Block<P, 8>(a, v0, v0 + 64 < V ? a.state + v0 + 64 : next_head);
  }
  switch ((V - v0) / 8) {
    case 7:
      Avx2Block<P, 7>(a, v0, next_head);
      break;
    case 6:
      Avx2Block<P, 6>(a, v0, next_head);
      break;
    case 5:
      Avx2Block<P, 5>(a, v0, next_head);
      break;
    case 4:
      Avx2Block<P, 4>(a, v0, next_head);
      break;
    case 3:
      Avx2Block<P, 3>(a, v0, next_head);
      break;
    case 2:
      Avx2Block<P, 2>(a, v0, next_head);
      break;
    case 1:
      Avx2Block<P, 1>(a, v0, next_head);
      break;
    default:
      break;
  }
  v0 += (V - v0) / 8 * 8;
  if (v0 < V) ScalarColumns<P>(a, v0, V - v0);
}

template <Precision P>
DG_AVX2 void FusedHeadAvx2Impl(const HeadArgs& a) {
  FusedHeadBody<P>(a);
}

}  // namespace

bool Avx2KernelCompiled() { return true; }

void FusedHeadAvx2(const HeadArgs& a) {
  switch (a.precision) {
    case Precision::kIeee:
      return FusedHeadAvx2Impl<Precision::kIeee>(a);
    case Precision::kTf32:
      return FusedHeadAvx2Impl<Precision::kTf32>(a);
    case Precision::kTf32Rna:
      return FusedHeadAvx2Impl<Precision::kTf32Rna>(a);
    case Precision::kTf32x3:
      return FusedHeadAvx2Impl<Precision::kTf32x3>(a);
  }
}

void TiledHeadAvx2(const HeadArgs& a) {
  switch (a.precision) {
    case Precision::kIeee:
      return Avx2Head<Precision::kIeee>(a);
    case Precision::kTf32:
      return Avx2Head<Precision::kTf32>(a);
    case Precision::kTf32Rna:
      return Avx2Head<Precision::kTf32Rna>(a);
    case Precision::kTf32x3:
      return Avx2Head<Precision::kTf32x3>(a);
  }
}

#else  // !DENSEGATE_KDA_HAVE_AVX2_KERNEL

bool Avx2KernelCompiled() { return false; }

// Never called: CpuHasAvx2Fma() is false without the kernel.
void TiledHeadAvx2(const HeadArgs& a) { TiledHeadPortable(a); }
void FusedHeadAvx2(const HeadArgs& a) {
  switch (a.precision) {
    case Precision::kIeee:
      return FusedHeadBody<Precision::kIeee>(a);
    case Precision::kTf32:
      return FusedHeadBody<Precision::kTf32>(a);
    case Precision::kTf32Rna:
      return FusedHeadBody<Precision::kTf32Rna>(a);
    case Precision::kTf32x3:
      return FusedHeadBody<Precision::kTf32x3>(a);
  }
}

#endif

}  // namespace densegate::kernels::kda::internal
