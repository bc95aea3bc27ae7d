// Internal to kernels/kvcache: the per-path loops behind kv_quant.h. The AVX2
// functions are compiled with a target attribute and must only be called after
// CpuSupportsAvx2() returned true. Each AVX2 function computes exactly what its
// portable twin computes, bit for bit.
#ifndef DENSEGATE_KERNELS_KVCACHE_KV_QUANT_INTERNAL_H_
#define DENSEGATE_KERNELS_KVCACHE_KV_QUANT_INTERNAL_H_

#include <cstddef>
#include <cstdint>

namespace densegate::kernels::kv_internal {

// Magic constant for round-half-even of |t| < 2^22 by one fp32 addition:
// bits(t + kRoundMagic) - bits(kRoundMagic) == round_half_even(t).
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23

// Result of the INT8 first pass over one vector.
struct MinMax {
  float min;
  float max;
  bool non_finite;  // A NaN or +-Inf was seen (min/max are then meaningless).
};

void Bf16QuantAvx2(const float* in, size_t n, uint16_t* out);
void Bf16DequantAvx2(const uint16_t* in, size_t n, float* out);
void E4M3QuantAvx2(const float* in, size_t n, uint8_t* out);
void E4M3DequantAvx2(const uint8_t* in, size_t n, float* out);
void E5M2QuantAvx2(const float* in, size_t n, uint8_t* out);
void E5M2DequantAvx2(const uint8_t* in, size_t n, float* out);
void HalfQuantAvx2(const float* in, size_t n, uint16_t* out);
void HalfDequantAvx2(const uint16_t* in, size_t n, float* out);
uint16_t FloatToHalfF16c(float x);
float HalfToFloatF16c(uint16_t h);

MinMax Int8MinMaxAvx2(const float* x, size_t n);
// q[i] = clamp(round_half_even((x[i] - zp) / scale), -128, 127); scale > 0.
void Int8QuantVecAvx2(const float* x, size_t n, float zp, float scale,
                      int8_t* q);
// out[i] = q[i] * scale + zp (a multiply then an add, never fused).
void Int8DequantVecAvx2(const int8_t* q, size_t n, float scale, float zp,
                        float* out);

// Portable twins of the INT8 vector loops (the scalar definitions).
MinMax Int8MinMaxPortable(const float* x, size_t n);
void Int8QuantVecPortable(const float* x, size_t n, float zp, float scale,
                          int8_t* q);
void Int8DequantVecPortable(const int8_t* q, size_t n, float scale, float zp,
                            float* out);

// One element of Int8QuantVec*: clamp first (so the magic rounding is valid),
// with max/min written as the x86 MAXPS/MINPS select so both paths agree.
inline int8_t Int8QuantOne(float x, float zp, float scale) {
  float t = (x - zp) / scale;
  t = (-128.0f > t) ? -128.0f : t;  // MAXPS(-128, t): t wins when unordered.
  t = (127.0f < t) ? 127.0f : t;    // MINPS(127, t).
  const float r = t + kRoundMagic;
  return static_cast<int8_t>(static_cast<int32_t>(
      __builtin_bit_cast(uint32_t, r) -
      __builtin_bit_cast(uint32_t, kRoundMagic)));
}

}  // namespace densegate::kernels::kv_internal

#endif  // DENSEGATE_KERNELS_KVCACHE_KV_QUANT_INTERNAL_H_
