// AVX2 + F16C loops of kv_quant_internal.h. Every function carries the target
// attribute (the file is compiled for baseline x86-64) and mirrors the scalar
// definitions in fp_convert.h / kv_quant_internal.h operation for operation.
#include <immintrin.h>

#include <cstring>

#include "kernels/kvcache/fp_convert.h"
#include "kernels/kvcache/kv_quant_internal.h"

#define DG_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace densegate::kernels::kv_internal {
namespace {

DG_AVX2 inline __m256i Set1(uint32_t v) {
  return _mm256_set1_epi32(static_cast<int>(v));
}

// Unsigned 32-bit a > b for values below 2^31 (all magnitudes here are).
DG_AVX2 inline __m256i Gt(__m256i a, __m256i b) {
  return _mm256_cmpgt_epi32(a, b);
}

// Eight fp32 -> eight int32 codes in 0..255 (sign included) following
// FloatToFp8E4M3 / FloatToFp8E5M2. Parameters describe the format.
struct Fp8Spec {
  uint32_t nan_code;
  uint32_t sat_bits;    // fp32 bits of the max finite value.
  uint32_t sat_code;
  uint32_t sub_bits;    // fp32 bits of the smallest normal.
  float sub_magic;
  int drop;             // fp32 mantissa bits dropped.
  uint32_t rebias;      // Subtracted after the shift.
};

constexpr Fp8Spec kE4M3 = {kFp8E4M3NaN, 0x43E00000u, 0x7E, 0x3C800000u,
                           16384.0f, 20, 120u << 3};
constexpr Fp8Spec kE5M2 = {kFp8E5M2NaN, 0x47600000u, 0x7B, 0x38800000u,
                           128.0f, 21, 112u << 2};

template <const Fp8Spec& S>
DG_AVX2 inline __m256i EncodeFp8x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), Set1(0x80));
  const __m256i a = _mm256_and_si256(u, Set1(0x7FFFFFFFu));
  // Normal: round away `drop` bits, nearest even, then rebias.
  const __m256i odd =
      _mm256_and_si256(_mm256_srli_epi32(a, S.drop), Set1(1));
  __m256i normal = _mm256_add_epi32(
      a, _mm256_add_epi32(Set1((1u << (S.drop - 1)) - 1u), odd));
  normal = _mm256_sub_epi32(_mm256_srli_epi32(normal, S.drop), Set1(S.rebias));
  // Subnormal: one fp32 addition rounds to the subnormal step.
  const __m256 magic = _mm256_set1_ps(S.sub_magic);
  const __m256i sub = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)),
      _mm256_castps_si256(magic));
  __m256i code =
      _mm256_blendv_epi8(normal, sub, Gt(Set1(S.sub_bits), a));
  code = _mm256_blendv_epi8(code, Set1(S.sat_code), Gt(a, Set1(S.sat_bits)));
  code = _mm256_blendv_epi8(code, Set1(S.nan_code), Gt(a, Set1(0x7F800000u)));
  return _mm256_or_si256(code, sign);
}

// Packs four vectors of eight int32 (each 0..255) into 32 bytes in order.
DG_AVX2 inline __m256i PackU8(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i w01 = _mm256_packus_epi32(v0, v1);
  const __m256i w23 = _mm256_packus_epi32(v2, v3);
  const __m256i b = _mm256_packus_epi16(w01, w23);
  // Lanes hold [v0lo v1lo v2lo v3lo | v0hi v1hi v2hi v3hi] in 4-byte groups.
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <const Fp8Spec& S, uint8_t (*Scalar)(float)>
DG_AVX2 void EncodeFp8(const float* in, size_t n, uint8_t* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i c0 = EncodeFp8x8<S>(_mm256_loadu_ps(in + i));
    const __m256i c1 = EncodeFp8x8<S>(_mm256_loadu_ps(in + i + 8));
    const __m256i c2 = EncodeFp8x8<S>(_mm256_loadu_ps(in + i + 16));
    const __m256i c3 = EncodeFp8x8<S>(_mm256_loadu_ps(in + i + 24));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        PackU8(c0, c1, c2, c3));
  }
  for (; i < n; ++i) out[i] = Scalar(in[i]);
}

// Decodes eight FP8 codes (zero-extended to int32).
struct Fp8Decode {
  int shift;            // Code magnitude bits -> fp32 position.
  uint32_t rebias;      // Added to the shifted bits (exponent bias difference).
  uint32_t min_normal;  // Smallest normal magnitude code.
  float sub_step;       // Value of subnormal code 1.
  uint32_t inf_code;    // Magnitude code of Inf, or 0x100 (none).
  uint32_t nan_from;    // Magnitudes >= this (and != inf_code) are NaN.
};

constexpr Fp8Decode kDecE4M3 = {20, 120u << 23, 0x08, 0x1p-9f, 0x100, 0x7F};
constexpr Fp8Decode kDecE5M2 = {21, 112u << 23, 0x04, 0x1p-16f, 0x7C, 0x7D};

template <const Fp8Decode& D>
DG_AVX2 inline __m256 DecodeFp8x8(__m256i c) {
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, Set1(0x80)), 24);
  const __m256i mag = _mm256_and_si256(c, Set1(0x7F));
  const __m256i normal =
      _mm256_add_epi32(_mm256_slli_epi32(mag, D.shift), Set1(D.rebias));
  const __m256i sub = _mm256_castps_si256(
      _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(D.sub_step)));
  __m256i bits = _mm256_blendv_epi8(normal, sub, Gt(Set1(D.min_normal), mag));
  if (D.inf_code != 0x100) {
    bits = _mm256_blendv_epi8(bits, Set1(0x7F800000u),
                              _mm256_cmpeq_epi32(mag, Set1(D.inf_code)));
  }
  bits = _mm256_blendv_epi8(bits, Set1(0x7FC00000u),
                            Gt(mag, Set1(D.nan_from - 1)));
  return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}

template <const Fp8Decode& D, float (*Scalar)(uint8_t)>
DG_AVX2 void DecodeFp8(const uint8_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, DecodeFp8x8<D>(_mm256_cvtepu8_epi32(b)));
    _mm256_storeu_ps(out + i + 8,
                     DecodeFp8x8<D>(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))));
  }
  for (; i < n; ++i) out[i] = Scalar(in[i]);
}

// bf16: eight fp32 -> eight int32 holding the 16-bit code.
DG_AVX2 inline __m256i EncodeBf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), Set1(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(Set1(0x7FFF), lsb)), 16);
  const __m256i quiet =
      _mm256_or_si256(_mm256_srli_epi32(u, 16), Set1(0x0040));
  const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(is_nan));
}

}  // namespace

DG_AVX2 void Bf16QuantAvx2(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = EncodeBf16x8(_mm256_loadu_ps(in + i));
    const __m256i b = EncodeBf16x8(_mm256_loadu_ps(in + i + 8));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b),
                                                    _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

DG_AVX2 void Bf16DequantAvx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
    const __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)));
    _mm256_storeu_ps(out + i + 8,
                     _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16)));
  }
  for (; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

DG_AVX2 void E4M3QuantAvx2(const float* in, size_t n, uint8_t* out) {
  EncodeFp8<kE4M3, FloatToFp8E4M3>(in, n, out);
}
DG_AVX2 void E4M3DequantAvx2(const uint8_t* in, size_t n, float* out) {
  DecodeFp8<kDecE4M3, Fp8E4M3ToFloat>(in, n, out);
}
DG_AVX2 void E5M2QuantAvx2(const float* in, size_t n, uint8_t* out) {
  EncodeFp8<kE5M2, FloatToFp8E5M2>(in, n, out);
}
DG_AVX2 void E5M2DequantAvx2(const uint8_t* in, size_t n, float* out) {
  DecodeFp8<kDecE5M2, Fp8E5M2ToFloat>(in, n, out);
}

DG_AVX2 void HalfQuantAvx2(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                     _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = FloatToHalfF16c(in[i]);
}

DG_AVX2 void HalfDequantAvx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = HalfToFloatF16c(in[i]);
}

DG_AVX2 uint16_t FloatToHalfF16c(float x) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT);
  return static_cast<uint16_t>(_mm_extract_epi16(h, 0));
}

DG_AVX2 float HalfToFloatF16c(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

DG_AVX2 MinMax Int8MinMaxAvx2(const float* x, size_t n) {
  __m256 lo = _mm256_set1_ps(__builtin_inff());
  __m256 hi = _mm256_set1_ps(-__builtin_inff());
  __m256 nan = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    lo = _mm256_min_ps(lo, v);
    hi = _mm256_max_ps(hi, v);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float l[8], h[8];
  _mm256_store_ps(l, lo);
  _mm256_store_ps(h, hi);
  bool has_nan = _mm256_movemask_ps(nan) != 0;
  float mn = l[0], mx = h[0];
  for (int k = 1; k < 8; ++k) {
    mn = l[k] < mn ? l[k] : mn;
    mx = h[k] > mx ? h[k] : mx;
  }
  for (; i < n; ++i) {
    mn = x[i] < mn ? x[i] : mn;
    mx = x[i] > mx ? x[i] : mx;
    has_nan |= x[i] != x[i];
  }
  const bool inf = mn == -__builtin_inff() || mx == __builtin_inff();
  return {mn, mx, has_nan || inf};
}

DG_AVX2 void Int8QuantVecAvx2(const float* x, size_t n, float zp, float scale,
                              int8_t* q) {
  const __m256 vzp = _mm256_set1_ps(zp);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-128.0f);
  const __m256 hi = _mm256_set1_ps(127.0f);
  const __m256 magic = _mm256_set1_ps(kRoundMagic);
  const __m256i magic_bits = _mm256_castps_si256(magic);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r[4];
    for (int k = 0; k < 4; ++k) {
      __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * k), vzp),
                               vscale);
      t = _mm256_min_ps(hi, _mm256_max_ps(lo, t));
      r[k] = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(t, magic)),
                              magic_bits);
    }
    const __m256i w01 = _mm256_packs_epi32(r[0], r[1]);
    const __m256i w23 = _mm256_packs_epi32(r[2], r[3]);
    const __m256i b = _mm256_packs_epi16(w01, w23);
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(q + i),
        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  for (; i < n; ++i) q[i] = Int8QuantOne(x[i], zp, scale);
}

DG_AVX2 void Int8DequantVecAvx2(const int8_t* q, size_t n, float scale,
                                float zp, float* out) {
  const __m256 vzp = _mm256_set1_ps(zp);
  const __m256 vscale = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    const __m256 f1 =
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(f0, vscale), vzp));
    _mm256_storeu_ps(out + i + 8,
                     _mm256_add_ps(_mm256_mul_ps(f1, vscale), vzp));
  }
  for (; i < n; ++i) {
    const float prod = static_cast<float>(q[i]) * scale;
    out[i] = prod + zp;
  }
}

}  // namespace densegate::kernels::kv_internal
