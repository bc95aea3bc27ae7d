// AVX2/FMA twins of the portable definitions in vec_internal.h.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/ops/vec_internal.h"

#define DG_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace densegate::kernels::vec_internal {
namespace {

// Mask selecting the first `valid` (0..8) lanes.
DG_AVX2 inline __m256i LaneMask(size_t valid) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), idx);
}

DG_AVX2 inline __m256 Blend(__m256 old_v, __m256 new_v, __m256i mask) {
  return _mm256_blendv_ps(old_v, new_v, _mm256_castsi256_ps(mask));
}

DG_AVX2 inline __m256 Exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(kExpLo), x);
  x = _mm256_min_ps(_mm256_set1_ps(kExpHi), x);
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  const __m256 tm = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), magic);
  __m256i n = _mm256_sub_epi32(_mm256_castps_si256(tm), _mm256_castps_si256(magic));
  const __m256 nf = _mm256_sub_ps(tm, magic);
  __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpC7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  n = _mm256_max_epi32(n, _mm256_set1_epi32(-150));
  n = _mm256_min_epi32(n, _mm256_set1_epi32(150));
  const __m256i e1 = _mm256_srai_epi32(n, 1);
  const __m256i e2 = _mm256_sub_epi32(n, e1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

enum class ReduceOp { kAdd, kMax };

template <ReduceOp Op>
DG_AVX2 inline __m256 Apply(__m256 a, __m256 b) {
  if constexpr (Op == ReduceOp::kAdd) {
    return _mm256_add_ps(a, b);
  } else {
    return _mm256_max_ps(a, b);
  }
}

template <ReduceOp Op>
DG_AVX2 inline __m128 Apply128(__m128 a, __m128 b) {
  if constexpr (Op == ReduceOp::kAdd) {
    return _mm_add_ps(a, b);
  } else {
    return _mm_max_ps(a, b);
  }
}

// The CombinePartials tree on four accumulators.
template <ReduceOp Op>
DG_AVX2 inline float Combine(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 v = Apply<Op>(Apply<Op>(a0, a1), Apply<Op>(a2, a3));
  const __m128 w = Apply128<Op>(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 x = Apply128<Op>(w, _mm_movehl_ps(w, w));  // (w0 op w2, w1 op w3)
  const __m128 y = Apply128<Op>(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(1, 1, 1, 1)));
  return _mm_cvtss_f32(y);
}

}  // namespace

DG_AVX2 float DotAvx2(const float* a, const float* b, size_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + kPartials <= n; i += kPartials) {
    for (int g = 0; g < 4; ++g) {
      acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * g),
                               _mm256_loadu_ps(b + i + 8 * g), acc[g]);
    }
  }
  for (int g = 0; g < 4 && i + 8 * g < n; ++g) {
    const __m256i m = LaneMask(n - i - 8 * g);
    const __m256 x = _mm256_maskload_ps(a + i + 8 * g, m);
    const __m256 y = _mm256_maskload_ps(b + i + 8 * g, m);
    acc[g] = Blend(acc[g], _mm256_fmadd_ps(x, y, acc[g]), m);
  }
  return Combine<ReduceOp::kAdd>(acc[0], acc[1], acc[2], acc[3]);
}

DG_AVX2 float SumAvx2(const float* a, size_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + kPartials <= n; i += kPartials) {
    for (int g = 0; g < 4; ++g) {
      acc[g] = _mm256_add_ps(acc[g], _mm256_loadu_ps(a + i + 8 * g));
    }
  }
  for (int g = 0; g < 4 && i + 8 * g < n; ++g) {
    const __m256i m = LaneMask(n - i - 8 * g);
    const __m256 x = _mm256_maskload_ps(a + i + 8 * g, m);
    acc[g] = Blend(acc[g], _mm256_add_ps(acc[g], x), m);
  }
  return Combine<ReduceOp::kAdd>(acc[0], acc[1], acc[2], acc[3]);
}

DG_AVX2 float MaxAvx2(const float* a, size_t n) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 acc[4] = {ninf, ninf, ninf, ninf};
  size_t i = 0;
  for (; i + kPartials <= n; i += kPartials) {
    for (int g = 0; g < 4; ++g) {
      acc[g] = _mm256_max_ps(acc[g], _mm256_loadu_ps(a + i + 8 * g));
    }
  }
  for (int g = 0; g < 4 && i + 8 * g < n; ++g) {
    const __m256i m = LaneMask(n - i - 8 * g);
    const __m256 x = _mm256_maskload_ps(a + i + 8 * g, m);
    acc[g] = Blend(acc[g], _mm256_max_ps(acc[g], x), m);
  }
  return Combine<ReduceOp::kMax>(acc[0], acc[1], acc[2], acc[3]);
}

DG_AVX2 void ExpShiftedAvx2(const float* x, size_t n, float shift, float* out) {
  const __m256 s = _mm256_set1_ps(shift);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  }
  for (; i < n; ++i) out[i] = ExpPortable(x[i] - shift);
}

DG_AVX2 float ExpShiftedSumAvx2(const float* x, size_t n, float shift,
                                float* out) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + kPartials <= n; i += kPartials) {
    for (int g = 0; g < 4; ++g) {
      const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * g), s));
      _mm256_storeu_ps(out + i + 8 * g, e);
      acc[g] = _mm256_add_ps(acc[g], e);
    }
  }
  for (int g = 0; g < 4 && i + 8 * g < n; ++g) {
    const __m256i m = LaneMask(n - i - 8 * g);
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i + 8 * g, m), s));
    _mm256_maskstore_ps(out + i + 8 * g, m, e);
    acc[g] = Blend(acc[g], _mm256_add_ps(acc[g], e), m);
  }
  return Combine<ReduceOp::kAdd>(acc[0], acc[1], acc[2], acc[3]);
}

DG_AVX2 void DivAvx2(const float* x, size_t n, float d, float* out) {
  const __m256 dv = _mm256_set1_ps(d);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_div_ps(_mm256_loadu_ps(x + i), dv));
  }
  for (; i < n; ++i) out[i] = x[i] / d;
}

DG_AVX2 void ScaleMulAvx2(const float* x, const float* w, size_t n, float inv,
                          float* out) {
  const __m256 iv = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + i), iv);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(t, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) {
    const float t = x[i] * inv;
    out[i] = t * w[i];
  }
}

DG_AVX2 void SiluAvx2(const float* x, const float* up, size_t n, float* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = Exp8(_mm256_xor_ps(v, sign));
    __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, e));
    if (up != nullptr) s = _mm256_mul_ps(s, _mm256_loadu_ps(up + i));
    _mm256_storeu_ps(out + i, s);
  }
  for (; i < n; ++i) {
    float s = x[i] / (1.0f + ExpPortable(-x[i]));
    if (up != nullptr) s = s * up[i];
    out[i] = s;
  }
}

DG_AVX2 void AxpyAvx2(float a, const float* x, size_t n, float* y) {
  const __m256 av = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace densegate::kernels::vec_internal
