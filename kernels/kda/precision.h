// Input precision of the dot products in the KDA kernels.
//
// Tensor-core kernels (Triton's default `allow_tf32`, cuBLAS TF32 mode) round
// the operands of a matrix product to TF32 (1 sign, 8 exponent, 10 mantissa
// bits) before multiplying and accumulate in fp32. These helpers emulate that
// rounding bit for bit on the CPU so the precision of a kernel can be studied
// and compared with its fp64 reference:
//
//   kIeee     operands used as they are (fp32 products, fp32 accumulation).
//   kTf32     truncation: bits & 0xFFFFE000 (what the hardware does on
//             operand load; Triton's default). NaN and +/-Inf pass through
//             unchanged (the mask would turn a NaN whose payload lies in the
//             low 13 bits into Inf).
//   kTf32Rna  round half away from zero: (bits + 0x1000) & 0xFFFFE000.
//             NaN and +/-Inf inputs pass through unchanged (the add would turn
//             a NaN with a small payload into Inf, or change its payload).
//             Finite values that round above FLT_MAX become +/-Inf, exactly
//             as the formula gives (e.g. FLT_MAX -> Inf), which is what IEEE
//             round-to-nearest does on overflow.
//   kTf32x3   a = big + small with big = Tf32(a) and small = Tf32(a - big)
//             (both truncating); a*b ~ big_a*big_b + big_a*small_b +
//             small_a*big_b (the small*small term, ~2^-22 relative, is
//             dropped). Recovers near-fp32 accuracy from TF32 units.
//
// Every function here is pure and thread-safe.
#ifndef DENSEGATE_KERNELS_KDA_PRECISION_H_
#define DENSEGATE_KERNELS_KDA_PRECISION_H_

#include <bit>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace densegate::kernels::kda {

enum class Precision : int {
  kIeee = 0,
  kTf32 = 1,
  kTf32Rna = 2,
  kTf32x3 = 3,
};

inline constexpr uint32_t kTf32Mask = 0xFFFFE000u;
inline constexpr uint32_t kTf32RnaHalf = 0x1000u;

// Truncates the mantissa to 10 bits. Signs, infinities and zeros are kept;
// NaN is passed through unchanged (see the header comment).
// (Written as an integer select, not a branch, so loops over it vectorize.)
inline float RoundTf32(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const bool special = (bits & 0x7F800000u) == 0x7F800000u;  // NaN or Inf.
  return std::bit_cast<float>(special ? bits : (bits & kTf32Mask));
}

// Rounds to the nearest TF32 value, ties away from zero. NaN/Inf unchanged;
// finite values may overflow to Inf (see the header comment).
inline float RoundTf32Rna(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const bool special = (bits & 0x7F800000u) == 0x7F800000u;  // NaN or Inf.
  return std::bit_cast<float>(special ? bits
                                      : ((bits + kTf32RnaHalf) & kTf32Mask));
}

// The split used by kTf32x3. x - big is exact in fp32; small keeps the
// next 11 significant bits of the remainder, so big + small equals x to
// within about 2^-21 relative (what tf32x3 can represent of x).
struct Tf32Split {
  float big;
  float small;
};
inline Tf32Split SplitTf32(float x) {
  const float big = RoundTf32(x);
  const float small = RoundTf32(x - big);
  return {big, small};
}

// Rounds one operand as `p` prescribes for single-term modes. For kTf32x3
// there is no single rounded value; this returns x unchanged (callers use
// SplitTf32) so that it is never silently treated as TF32.
inline float RoundOperand(Precision p, float x) {
  switch (p) {
    case Precision::kTf32:
      return RoundTf32(x);
    case Precision::kTf32Rna:
      return RoundTf32Rna(x);
    case Precision::kIeee:
    case Precision::kTf32x3:
      return x;
  }
  return x;
}

// Product of two operands under `p`, the way one term of a dot product is
// formed (not yet accumulated). For kTf32x3 the three terms are summed small
// ones first.
inline float MulOperands(Precision p, float a, float b) {
  if (p == Precision::kTf32x3) {
    const Tf32Split sa = SplitTf32(a);
    const Tf32Split sb = SplitTf32(b);
    return (sa.big * sb.small + sa.small * sb.big) + sa.big * sb.big;
  }
  return RoundOperand(p, a) * RoundOperand(p, b);
}

// "ieee", "tf32", "tf32_rna", "tf32x3".
absl::string_view PrecisionName(Precision p);

// Inverse of PrecisionName (exact, lower case). InvalidArgument otherwise,
// listing the accepted names.
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);

}  // namespace densegate::kernels::kda

#endif  // DENSEGATE_KERNELS_KDA_PRECISION_H_
