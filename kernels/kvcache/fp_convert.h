// Scalar, portable conversions between fp32 and the KV-cache storage types:
// bfloat16, FP8 E4M3 (OCP "FN" variant), FP8 E5M2 and IEEE fp16 (used for INT8
// scales). These are the definitions of the formats in this project: the
// vectorized kernels in kv_quant.h are tested to agree with them bit for bit.
//
// Rounding is round-to-nearest-even everywhere. The subnormal paths use one fp32
// addition (the value plus a power of two whose ulp is the target's subnormal
// step), so they assume the default floating-point environment (round to nearest,
// no flush-to-zero / denormals-are-zero); everything else is integer arithmetic.
//
// Special values:
//   BF16     : NaN -> quiet NaN (sign kept, top payload bits kept, quiet bit set);
//              +-Inf -> +-Inf; finite values that round past the largest bf16 become
//              +-Inf (IEEE overflow, the usual bf16 behaviour).
//   E4M3     : no Inf; S.1111.111 is the only NaN. Saturating: |x| > 448 (and
//              +-Inf) -> +-448. NaN -> S.1111.111 (sign kept).
//   E5M2     : has Inf and NaN, but encoding saturates: |x| > 57344 and +-Inf ->
//              +-57344 (KV values must stay finite). NaN -> S.11111.10 (sign kept).
//              Decoding still maps S.11111.00 to +-Inf.
//   fp16     : IEEE binary16; overflow -> +-Inf, NaN -> quiet NaN with the top
//              payload bits (matches the F16C instruction VCVTPS2PH).
//   Negative zero is kept by every encoder and decoder.
//
// Thread-safety: pure functions, safe from any thread.
#ifndef DENSEGATE_KERNELS_KVCACHE_FP_CONVERT_H_
#define DENSEGATE_KERNELS_KVCACHE_FP_CONVERT_H_

#include <bit>
#include <cstdint>

namespace densegate::kernels {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;
inline constexpr float kHalfMax = 65504.0f;

// Canonical NaN codes produced by the encoders (positive sign).
inline constexpr uint8_t kFp8E4M3NaN = 0x7F;
inline constexpr uint8_t kFp8E5M2NaN = 0x7E;

namespace fp_internal {

inline uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
inline float FromBits(uint32_t u) { return std::bit_cast<float>(u); }

// Rounds the (non-negative, normal-range) fp32 magnitude bits `a` to
// `23 - drop` mantissa bits, nearest-even; the carry can ripple into the exponent,
// which is exactly what rounding up to the next binade needs.
inline uint32_t RoundDropBits(uint32_t a, int drop) {
  return (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
}

// Rounds |x| (fp32 magnitude bits `a`, below the target's smallest normal) to an
// integer multiple of the target's subnormal step. `magic` is a power of two whose
// fp32 ulp equals that step, so the fp32 addition does the nearest-even rounding.
inline uint32_t RoundSubnormal(uint32_t a, float magic) {
  return Bits(FromBits(a) + magic) - Bits(magic);
}

}  // namespace fp_internal

// ---------------------------------------------------------------- bfloat16
inline uint16_t FloatToBf16(float x) {
  const uint32_t u = fp_internal::Bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // Quiet NaN.
  }
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  return fp_internal::FromBits(static_cast<uint32_t>(h) << 16);
}

// ---------------------------------------------------------------- FP8 E4M3
inline uint8_t FloatToFp8E4M3(float x) {
  const uint32_t u = fp_internal::Bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code;
  if (a > 0x7F800000u) {
    code = kFp8E4M3NaN;
  } else if (a > 0x43E00000u) {  // Above 448 (includes Inf): saturate.
    code = 0x7E;
  } else if (a < 0x3C800000u) {  // Below 2^-6: subnormal step 2^-9.
    code = fp_internal::RoundSubnormal(a, 16384.0f);  // ulp(2^14) = 2^-9.
  } else {
    // Rebias the exponent from 127 to 7 (120 << 3 in code units).
    code = fp_internal::RoundDropBits(a, 20) - (120u << 3);
  }
  return static_cast<uint8_t>(code | sign);
}

inline float Fp8E4M3ToFloat(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t mag = c & 0x7Fu;
  uint32_t bits;
  if (mag == 0x7F) {
    bits = 0x7FC00000u;
  } else if (mag < 0x08) {  // Subnormal: m * 2^-9, exact in fp32.
    bits = fp_internal::Bits(static_cast<float>(mag) * 0x1p-9f);
  } else {
    bits = (mag << 20) + (120u << 23);
  }
  return fp_internal::FromBits(bits | sign);
}

// ---------------------------------------------------------------- FP8 E5M2
inline uint8_t FloatToFp8E5M2(float x) {
  const uint32_t u = fp_internal::Bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t code;
  if (a > 0x7F800000u) {
    code = kFp8E5M2NaN;
  } else if (a > 0x47600000u) {  // Above 57344 (includes Inf): saturate.
    code = 0x7B;
  } else if (a < 0x38800000u) {  // Below 2^-14: subnormal step 2^-16.
    code = fp_internal::RoundSubnormal(a, 128.0f);  // ulp(2^7) = 2^-16.
  } else {
    code = fp_internal::RoundDropBits(a, 21) - (112u << 2);
  }
  return static_cast<uint8_t>(code | sign);
}

inline float Fp8E5M2ToFloat(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t mag = c & 0x7Fu;
  uint32_t bits;
  if (mag > 0x7C) {
    bits = 0x7FC00000u;
  } else if (mag == 0x7C) {
    bits = 0x7F800000u;
  } else if (mag < 0x04) {  // Subnormal: m * 2^-16.
    bits = fp_internal::Bits(static_cast<float>(mag) * 0x1p-16f);
  } else {
    bits = (mag << 21) + (112u << 23);
  }
  return fp_internal::FromBits(bits | sign);
}

// ---------------------------------------------------------------- IEEE fp16
inline uint16_t FloatToHalf(float x) {
  const uint32_t u = fp_internal::Bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t h;
  if (a > 0x7F800000u) {
    h = 0x7E00u | ((a >> 13) & 0x3FFu);  // Quiet NaN, top payload bits.
  } else if (a >= 0x477FF000u) {         // >= 65520 rounds to Inf.
    h = 0x7C00u;
  } else if (a < 0x38800000u) {  // Below 2^-14: subnormal step 2^-24.
    h = fp_internal::RoundSubnormal(a, 0.5f);  // ulp(0.5) = 2^-24.
  } else {
    h = fp_internal::RoundDropBits(a, 13) - (112u << 10);
  }
  return static_cast<uint16_t>(h | sign);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7FFFu;
  uint32_t bits;
  if (mag > 0x7C00u) {  // NaN: quiet, payload kept (as VCVTPH2PS does).
    bits = 0x7FC00000u | ((mag & 0x3FFu) << 13);
  } else if (mag == 0x7C00u) {
    bits = 0x7F800000u;
  } else if (mag < 0x0400u) {  // Subnormal: m * 2^-24.
    bits = fp_internal::Bits(static_cast<float>(mag) * 0x1p-24f);
  } else {
    bits = (mag << 13) + (112u << 23);
  }
  return fp_internal::FromBits(bits | sign);
}

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_KVCACHE_FP_CONVERT_H_
