// KV-cache storage formats: quantize fp32 K/V vectors into a compact format and
// dequantize them back, vectorized (AVX2 with a bit-identical portable fallback).
//
// Data model. A call handles `n_vectors` vectors of `dim` fp32 values each, stored
// contiguously (vector v occupies in[v*dim, (v+1)*dim)). For a paged KV cache the
// natural call is one token's K (or V) for all heads: n_vectors = num_kv_heads,
// dim = head_dim; codes land in the token's slot of a block and the INT8
// parameters (one scale and one zero point per token and head) next to them.
//
// Formats (element codes are little-endian, contiguous, `BytesPerElement` each):
//   kFp32    : a copy.
//   kBf16    : round to nearest even; NaN stays a quiet NaN, +-Inf stays +-Inf.
//   kFp8E4M3 : OCP E4M3FN, bias 7, max 448, no Inf; nearest even, saturating
//              (|x| > 448 and +-Inf -> +-448); NaN -> NaN (0x7F / 0xFF).
//   kFp8E5M2 : bias 15, max 57344; nearest even, saturating (|x| > 57344 and
//              +-Inf -> +-57344, a choice: KV values must stay finite); NaN -> NaN.
//   kInt8    : asymmetric per vector: zp = (min+max)/2, scale = (max-min)/255,
//              q = clamp(round_half_even((x - zp) / scale), -128, 127),
//              x' = q * scale + zp. With zp the midpoint, (x - zp)/scale lies in
//              [-127.5, 127.5]; ties go to even, so only x == max (t = 127.5 ->
//              128) is clamped, and both ends then sit exactly scale/2 from x':
//              the rounding is unbiased and the error bound holds at the ends.
//              scale and zp are stored (per vector: scale then zp) as fp32 or fp16
//              (ScaleDtype); with fp16 the codes are computed against the rounded
//              (stored) scale and zp, so dequantization is self-consistent.
//              Constant vectors (max == min) store scale 0, zp = the value and
//              codes 0 (no division). A vector holding NaN or +-Inf, or whose
//              parameters are not finite in the storage dtype (fp16 beyond
//              +-65504), is stored "poisoned": scale = zp = NaN, codes 0, so it
//              dequantizes to NaN like a NaN in the float formats.
//
// Error bounds, per element, for finite x (tested on random data):
//   kBf16    : |x' - x| <= 2^-8 |x|   for 2^-126 <= |x| <= 0x1.fep127 (8
//              significant bits: half an ulp is 2^-8 relative, not 2^-9);
//              <= 2^-134 absolute below 2^-126
//   kFp8E4M3 : |x' - x| <= 2^-4 |x|   for 2^-6 <= |x| <= 448; <= 2^-10 absolute
//              below 2^-6 (half the subnormal step)
//   kFp8E5M2 : |x' - x| <= 2^-3 |x|   for 2^-14 <= |x| <= 57344; <= 2^-17
//              absolute below 2^-14
//   kInt8/fp32 params: |x' - x| <= 0.5 * scale * (1 + 2^-12) + 2^-23 |zp|
//   kInt8/fp16 params: |x' - x| <= 0.57 * scale + 2^-10 |zp| + 2^-17
//              (scale, zp the exact fp32 values; the fp16 rounding of scale and zp
//              adds at most 128|scale_h - scale| + |zp_h - zp| over the fp32 case).
//
// Both code paths assume the default floating-point environment (round to
// nearest, no FTZ/DAZ).
//
// Thread-safety: all functions are pure with respect to their arguments and safe
// to call concurrently on disjoint outputs.
#ifndef DENSEGATE_KERNELS_KVCACHE_KV_QUANT_H_
#define DENSEGATE_KERNELS_KVCACHE_KV_QUANT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {

enum class KvFormat { kFp32, kBf16, kFp8E4M3, kFp8E5M2, kInt8 };

// Storage type of the INT8 per-vector scale and zero point.
enum class ScaleDtype { kFp32, kFp16 };

// "fp32", "bf16", "fp8_e4m3", "fp8_e5m2", "int8".
absl::string_view KvFormatName(KvFormat format);
// Inverse of KvFormatName; an unknown name gives InvalidArgument naming the value
// and listing the valid ones.
absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name);

// "fp32", "fp16".
absl::string_view ScaleDtypeName(ScaleDtype dtype);
absl::StatusOr<ScaleDtype> ParseScaleDtype(absl::string_view name);

// Bytes of one element code: 4, 2, 1, 1, 1.
size_t BytesPerElement(KvFormat format);
// Bytes of per-vector parameters: 2 * sizeof(dtype) for kInt8 (scale + zero
// point), 0 for every other format.
size_t ScaleBytesPerVector(KvFormat format, ScaleDtype dtype);
// Code bytes for n_vectors x dim elements.
size_t KvCodeBytes(KvFormat format, size_t n_vectors, size_t dim);
// Parameter bytes for n_vectors vectors.
size_t KvScaleBytes(KvFormat format, ScaleDtype dtype, size_t n_vectors);
// Codes plus parameters: what a runtime reserves for n_vectors vectors.
size_t KvStorageBytes(KvFormat format, ScaleDtype dtype, size_t n_vectors,
                      size_t dim);

// Where the INT8 parameters of n_vectors vectors live: 2 * n_vectors values of
// `dtype`, vector v's scale at index 2v and zero point at 2v+1. Ignored (may be
// null) for the other formats.
struct QuantScales {
  ScaleDtype dtype = ScaleDtype::kFp32;
  void* data = nullptr;
};
struct ConstQuantScales {
  ConstQuantScales() = default;
  ConstQuantScales(ScaleDtype d, const void* p) : dtype(d), data(p) {}
  ConstQuantScales(const QuantScales& s)  // NOLINT: implicit by design.
      : dtype(s.dtype), data(s.data) {}
  ScaleDtype dtype = ScaleDtype::kFp32;
  const void* data = nullptr;
};

struct KvQuantOptions {
  CpuPath path = CpuPath::kAuto;
};

// Encodes n_vectors x dim fp32 values into `codes` (KvCodeBytes bytes) and, for
// kInt8, the per-vector parameters into `scales.data`.
// Preconditions: buffers do not overlap. Errors (InvalidArgument): dim == 0 with
// n_vectors > 0, null pointers where data is needed; FailedPrecondition: kAvx2
// requested on a CPU without it. Nothing is written on error.
absl::Status Quantize(KvFormat format, const float* in, size_t n_vectors,
                      size_t dim, void* codes, QuantScales scales,
                      const KvQuantOptions& options = {});

// Decodes what Quantize wrote back to fp32 (`out`: n_vectors x dim floats).
// Same errors as Quantize.
absl::Status Dequantize(KvFormat format, const void* codes,
                        ConstQuantScales scales, size_t n_vectors, size_t dim,
                        float* out, const KvQuantOptions& options = {});

// fp32 <-> fp16 arrays (round to nearest even, see fp_convert.h), F16C-vectorized
// on the AVX2 path. Used for INT8 parameters; exposed for tests and callers that
// keep other metadata in fp16. `path` as in KvQuantOptions (FailedPrecondition
// for kAvx2 without AVX2/F16C).
absl::Status FloatToHalfArray(const float* in, size_t n, uint16_t* out,
                              CpuPath path = CpuPath::kAuto);
absl::Status HalfToFloatArray(const uint16_t* in, size_t n, float* out,
                              CpuPath path = CpuPath::kAuto);

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_KVCACHE_KV_QUANT_H_
