// Internals shared by the KDA decode and prefill kernels: per-head input
// preparation (L2 normalization, gates, operand rounding) and the per-head
// tiled kernels of each SIMD path. Not a public interface.
//
// Pure functions on caller-owned buffers; thread-compatible.
#ifndef DENSEGATE_KERNELS_KDA_KDA_INTERNAL_H_
#define DENSEGATE_KERNELS_KDA_KDA_INTERNAL_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/kda/kda_types.h"
#include "kernels/kda/precision.h"

namespace densegate::kernels::kda::internal {

// softplus(x) = log(1 + e^x), without overflow for large x.
template <typename T>
inline T Softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

template <typename T>
inline T Sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// sum x[i]^2 with 8 partial sums combined pairwise: a fixed order (so the
// result never depends on the caller) that the compiler can vectorize and
// that avoids a K-long chain of dependent adds.
template <typename T>
inline T SumSquares(const T* x, int n) {
  T p[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) p[j] += x[i + j] * x[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) p[j] += x[i] * x[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// exp(x) in fp32 for the decay factors, branch-free so the loop over K
// vectorizes (a libm call per channel was ~6% of a decode step). Cody-Waite
// reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7 Taylor polynomial:
// within 2 ulp of exp over [-87.3, 88]; exp(0) == 1 exactly; below -87.3
// (where fp32 exp is about to turn subnormal) it returns 0, above 88 it
// saturates at exp(88) (decays are <= 1, so neither matters); NaN stays NaN.
inline float ExpF(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.0f ? 88.0f : x);
  // Round to nearest with the 1.5 * 2^23 trick (no SSE4.1 needed).
  const float magic = 12582912.0f;
  const float nf = (xc * 1.44269504088896341f + magic) - magic;
  const float r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int n = static_cast<int>(nf);
  const float scale =
      std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  const float e = p * scale;
  return x != x ? x : (x < -87.3f ? 0.0f : e);
}

template <typename T>
inline T DecayExp(T g) {
  if constexpr (std::is_same_v<T, float>) {
    return ExpF(g);
  } else {
    return std::exp(g);
  }
}

// The per-head quantities every variant starts from.
template <typename T>
struct HeadInputs {
  T qn[kKdaMaxDim];     // Normalized q times K^-1/2.
  T kn[kKdaMaxDim];     // Normalized k.
  T g[kKdaMaxDim];      // Log decay (<= 0).
  T decay[kKdaMaxDim];  // exp(g).
  T beta;
};

// Fills `h` for row `row` of the [rows][heads] grid (row = sequence for
// decode, token for prefill) and head `head`.
template <typename T>
void PrepareHead(const KdaDims& dims, const KdaInputs<T>& in,
                 const KdaMath& math, int64_t row, int head, HeadInputs<T>* h) {
  const int K = dims.k_dim;
  const int64_t rh = row * dims.heads + head;
  const T* q = in.q + rh * K;
  const T* k = in.k + rh * K;
  const T* g = in.g + rh * K;
  const T eps = static_cast<T>(math.l2_eps);
  const T qq = SumSquares(q, K);
  const T kk = SumSquares(k, K);
  // One multiplier per vector: scale folded into q's so it rounds once.
  const T q_mul = T(1) / std::sqrt((qq + eps) * static_cast<T>(K));
  const T k_mul = T(1) / std::sqrt(kk + eps);
  for (int i = 0; i < K; ++i) {
    h->qn[i] = q[i] * q_mul;
    h->kn[i] = k[i] * k_mul;
  }
  if (math.gate_mode == KdaGateMode::kFromRaw) {
    const T a = std::exp(in.a_log[head]);
    const T* dt = in.dt_bias + static_cast<int64_t>(head) * K;
    for (int i = 0; i < K; ++i) h->g[i] = -a * Softplus<T>(g[i] + dt[i]);
    h->beta = Sigmoid<T>(in.beta[rh]);
  } else {
    for (int i = 0; i < K; ++i) h->g[i] = g[i];
    h->beta = in.beta[rh];
  }
  for (int i = 0; i < K; ++i) h->decay[i] = DecayExp<T>(h->g[i]);
}

// Dot-product operands of one vector under a precision mode: `big` is the
// rounded operand (the value itself for kIeee); `small` is the tf32x3
// remainder (zero otherwise).
struct Operand {
  float big[kKdaMaxDim];
  float small[kKdaMaxDim];
};

inline void MakeOperand(Precision p, const float* x, int n, Operand* op) {
  // One loop per mode (not a branch per element) so each one vectorizes.
  switch (p) {
    case Precision::kTf32x3:
      for (int i = 0; i < n; ++i) {
        const Tf32Split s = SplitTf32(x[i]);
        op->big[i] = s.big;
        op->small[i] = s.small;
      }
      return;
    case Precision::kTf32:
      for (int i = 0; i < n; ++i) op->big[i] = RoundTf32(x[i]);
      break;
    case Precision::kTf32Rna:
      for (int i = 0; i < n; ++i) op->big[i] = RoundTf32Rna(x[i]);
      break;
    case Precision::kIeee:
      for (int i = 0; i < n; ++i) op->big[i] = x[i];
      break;
  }
  for (int i = 0; i < n; ++i) op->small[i] = 0.0f;
}

// acc + (x rounded as P) * b, where b (and s, tf32x3's small part) is an
// operand already prepared by MakeOperand. For the TF32 modes every product
// of two TF32 values is exact in fp32, so this equals an FMA bit for bit;
// the AVX2 kernel relies on that to match the portable one.
template <Precision P>
inline float AccumTerm(float acc, float x, float b, float s) {
  if constexpr (P == Precision::kIeee) {
    return acc + x * b;
  } else if constexpr (P == Precision::kTf32) {
    return acc + RoundTf32(x) * b;
  } else if constexpr (P == Precision::kTf32Rna) {
    return acc + RoundTf32Rna(x) * b;
  } else {
    const Tf32Split xs = SplitTf32(x);
    acc = acc + xs.small * b;  // Small terms first: they are the finest.
    acc = acc + xs.big * s;
    return acc + xs.big * b;
  }
}

// Pass-1 term of S^T k on the decayed state: acc + op(d*s) * op(k). In
// kIeee nothing is rounded, so the decay is folded into k once per row
// (dk = d * k): one multiply per state element fewer.
template <Precision P>
inline float Pass1Term(float acc, float s, float d, float dk, float kb,
                       float ks) {
  if constexpr (P == Precision::kIeee) {
    return acc + s * dk;
  } else {
    return AccumTerm<P>(acc, s * d, kb, ks);
  }
}

// Everything a per-head decode kernel needs besides the state.
struct HeadArgs {
  int k_dim;
  int v_dim;
  Precision precision;
  const float* kn;     // [K] full precision, for the rank-1 update.
  const float* decay;  // [K] exp(g).
  const float* dk;     // [K] decay * kn (kIeee's pass 1).
  const Operand* k_op;
  const Operand* q_op;
  float beta;
  const float* v;  // [V]
  float* state;    // [K][V], updated in place.
  float* out;      // [V]
  // The state of the head this thread runs next (prefetched while this one
  // finishes), or `state` itself when there is none.
  const float* next_head;
};

// Prefetches the cache line holding `base + offset` floats. Addresses are
// formed as integers: they may point past the end of a head (or of the
// buffer), which a prefetch tolerates but pointer arithmetic would not.
inline void PrefetchLine(const float* base, int64_t offset) {
#if defined(__GNUC__) || defined(__clang__)
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base) +
                         static_cast<uintptr_t>(offset) * sizeof(float);
  __builtin_prefetch(reinterpret_cast<const void*>(addr));
#else
  (void)base;
  (void)offset;
#endif
}

// The fused per-head kernel: pass 1 reads the whole head and accumulates
// k^T(decay * S); pass 2 rewrites it and accumulates o (a 128 x 128 head,
// 64 KiB, stays in L2 between the passes). Always inlined into its callers
// so each is vectorized for its own target: the portable FusedHead in
// kda_decode.cc and FusedHeadAvx2 share this one source, and give the same
// bits (no FMA contraction either way: -ffp-contract=off).
template <Precision P>
__attribute__((always_inline)) inline void FusedHeadBody(const HeadArgs& a) {
  const int K = a.k_dim;
  const int V = a.v_dim;
  float acc[kKdaMaxDim] = {};
  for (int i = 0; i < K; ++i) {
    const float* row = a.state + static_cast<int64_t>(i) * V;
    const float d = a.decay[i];
    const float dk = a.dk[i];
    const float kb = a.k_op->big[i];
    const float ks = a.k_op->small[i];
    for (int j = 0; j < V; ++j) {
      acc[j] = Pass1Term<P>(acc[j], row[j], d, dk, kb, ks);
    }
  }
  float u[kKdaMaxDim];
  for (int j = 0; j < V; ++j) u[j] = a.beta * (a.v[j] - acc[j]);
  float o[kKdaMaxDim] = {};
  for (int i = 0; i < K; ++i) {
    float* row = a.state + static_cast<int64_t>(i) * V;
    const float d = a.decay[i];
    const float kk = a.kn[i];
    const float qb = a.q_op->big[i];
    const float qs = a.q_op->small[i];
    for (int j = 0; j < V; ++j) {
      const float x = row[j] * d + kk * u[j];
      row[j] = x;
      o[j] = AccumTerm<P>(o[j], x, qb, qs);
    }
  }
  for (int j = 0; j < V; ++j) a.out[j] = o[j];
}

// One head, V-blocked: each block of columns is read once (pass 1 computes
// k^T(decay*S) for those columns), then rewritten while it is still in L1
// (pass 2 applies decay + k u^T and accumulates o). Columns are independent,
// so a block needs nothing from the others.
void TiledHeadPortable(const HeadArgs& a);
// Same computation with AVX2/FMA. Requires a CPU with avx2 and fma.
void TiledHeadAvx2(const HeadArgs& a);
// FusedHeadBody compiled for AVX2/FMA. Requires a CPU with avx2 and fma.
void FusedHeadAvx2(const HeadArgs& a);
// Whether this build contains the AVX2 kernel (x86-64 GCC/Clang).
bool Avx2KernelCompiled();
// The tiled kernel with AVX-512F (bit-identical to TiledHeadAvx2). Requires a
// CPU with avx512f.
void TiledHeadAvx512(const HeadArgs& a);
// Whether this build contains the AVX-512 kernel (x86-64 GCC/Clang).
bool Avx512KernelCompiled();

}  // namespace densegate::kernels::kda::internal

#endif  // DENSEGATE_KERNELS_KDA_KDA_INTERNAL_H_
