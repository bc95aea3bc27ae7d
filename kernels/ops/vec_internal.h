// Internal to kernels/ops: the scalar (portable) definitions of FastExp and of
// the 32-partial reductions, and their AVX2 twins (vec_avx2.cc, to be called
// only when CpuSupportsAvx2()). Each AVX2 function computes the same bits.
#ifndef DENSEGATE_KERNELS_OPS_VEC_INTERNAL_H_
#define DENSEGATE_KERNELS_OPS_VEC_INTERNAL_H_

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace densegate::kernels::vec_internal {

inline constexpr int kPartials = 32;  // 4 ymm registers of 8 lanes.

// FastExp constants.
inline constexpr float kExpLo = -104.0f;  // exp below is 0 in fp32.
inline constexpr float kExpHi = 100.0f;   // exp above is Inf in fp32.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;      // 9 bits: n * hi is exact.
inline constexpr float kLn2Lo = -2.12194440e-4f;   // ln 2 - hi.
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23.
// Taylor coefficients 1/k!, k = 7..2 (|r| <= ln2/2: truncation < 2^-27).
inline constexpr float kExpC7 = 1.0f / 5040.0f;
inline constexpr float kExpC6 = 1.0f / 720.0f;
inline constexpr float kExpC5 = 1.0f / 120.0f;
inline constexpr float kExpC4 = 1.0f / 24.0f;
inline constexpr float kExpC3 = 1.0f / 6.0f;
inline constexpr float kExpC2 = 0.5f;

// The x86 MAXPS / MINPS selects (second operand wins on NaN or equality),
// so that the AVX2 path's _mm256_max_ps(a, b) equals Max(a, b) exactly.
inline float Max(float a, float b) { return a > b ? a : b; }
inline float Min(float a, float b) { return a < b ? a : b; }

inline float ExpPortable(float x) {
  x = Max(kExpLo, x);
  x = Min(kExpHi, x);
  const float t = x * kLog2e;
  const float tm = t + kRoundMagic;
  int32_t n = static_cast<int32_t>(std::bit_cast<uint32_t>(tm) -
                                   std::bit_cast<uint32_t>(kRoundMagic));
  const float nf = tm - kRoundMagic;
  float r = std::fma(nf, -kLn2Hi, x);
  r = std::fma(nf, -kLn2Lo, r);
  float p = kExpC7;
  p = std::fma(p, r, kExpC6);
  p = std::fma(p, r, kExpC5);
  p = std::fma(p, r, kExpC4);
  p = std::fma(p, r, kExpC3);
  p = std::fma(p, r, kExpC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  // n is in [-150, 145] for numbers; NaN gives garbage, clamped so the scale
  // factors stay finite and the NaN in p decides the result.
  n = n < -150 ? -150 : n;
  n = n > 150 ? 150 : n;
  const int32_t e1 = n >> 1;
  const int32_t e2 = n - e1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(e1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(e2 + 127) << 23);
  return (p * s1) * s2;
}

// Combines 32 partials: ((p[l] + p[8+l]) + (p[16+l] + p[24+l])) per lane l,
// then lanes l + l+4, then l + l+2, then 0 + 1 (the AVX2 horizontal order).
template <typename Op>
inline float CombinePartials(const float* p, Op op) {
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = op(op(p[l], p[8 + l]), op(p[16 + l], p[24 + l]));
  float w[4];
  for (int l = 0; l < 4; ++l) w[l] = op(v[l], v[l + 4]);
  return op(op(w[0], w[2]), op(w[1], w[3]));
}

inline float DotPortable(const float* a, const float* b, size_t n) {
  float p[kPartials] = {};
  for (size_t i = 0; i < n; ++i) {
    p[i % kPartials] = std::fma(a[i], b[i], p[i % kPartials]);
  }
  return CombinePartials(p, [](float x, float y) { return x + y; });
}

inline float SumPortable(const float* a, size_t n) {
  float p[kPartials] = {};
  for (size_t i = 0; i < n; ++i) p[i % kPartials] += a[i];
  return CombinePartials(p, [](float x, float y) { return x + y; });
}

inline float MaxPortable(const float* a, size_t n) {
  float p[kPartials];
  for (float& v : p) v = -INFINITY;
  for (size_t i = 0; i < n; ++i) p[i % kPartials] = Max(p[i % kPartials], a[i]);
  return CombinePartials(p, [](float x, float y) { return Max(x, y); });
}

// AVX2 twins.
float DotAvx2(const float* a, const float* b, size_t n);
float SumAvx2(const float* a, size_t n);
float MaxAvx2(const float* a, size_t n);
// out[i] = ExpPortable(x[i] - shift).
void ExpShiftedAvx2(const float* x, size_t n, float shift, float* out);
// Fused: out[i] = ExpPortable(x[i] - shift) and returns SumPortable(out, n).
float ExpShiftedSumAvx2(const float* x, size_t n, float shift, float* out);
// out[i] = x[i] / d.
void DivAvx2(const float* x, size_t n, float d, float* out);
// out[i] = (x[i] * inv) * w[i].
void ScaleMulAvx2(const float* x, const float* w, size_t n, float inv,
                  float* out);
// out[i] = x[i] / (1 + ExpPortable(-x[i])) [* up[i] when up != null].
void SiluAvx2(const float* x, const float* up, size_t n, float* out);
// y[i] = fma(a, x[i], y[i]).
void AxpyAvx2(float a, const float* x, size_t n, float* y);

}  // namespace densegate::kernels::vec_internal

#endif  // DENSEGATE_KERNELS_OPS_VEC_INTERNAL_H_
