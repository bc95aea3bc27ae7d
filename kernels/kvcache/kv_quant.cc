#include "kernels/kvcache/kv_quant.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "kernels/kvcache/fp_convert.h"
#include "kernels/kvcache/kv_quant_internal.h"

namespace densegate::kernels {
namespace {

using kv_internal::MinMax;

constexpr KvFormat kAllFormats[] = {KvFormat::kFp32, KvFormat::kBf16,
                                    KvFormat::kFp8E4M3, KvFormat::kFp8E5M2,
                                    KvFormat::kInt8};

// ------------------------------------------------------------ portable loops
void Bf16QuantPortable(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}
void Bf16DequantPortable(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}
void E4M3QuantPortable(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToFp8E4M3(in[i]);
}
void E4M3DequantPortable(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp8E4M3ToFloat(in[i]);
}
void E5M2QuantPortable(const float* in, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToFp8E5M2(in[i]);
}
void E5M2DequantPortable(const uint8_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp8E5M2ToFloat(in[i]);
}

// --------------------------------------------------------------- INT8 params
struct Int8Params {
  float scale;
  float zp;
};

// Parameters of one vector as they will be stored (already rounded to `dtype`
// and read back), so quantization uses exactly what dequantization will see.
Int8Params ComputeInt8Params(const MinMax& mm, ScaleDtype dtype, bool avx2) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (mm.non_finite) return {nan, nan};
  // In double: min + max and max - min cannot overflow, and both paths share
  // this scalar code. "+ 0.0f" turns a -0 (from min/max of mixed-sign zeros,
  // whose sign depends on evaluation order) into +0.
  const double lo = mm.min;
  const double hi = mm.max;
  Int8Params p;
  p.zp = static_cast<float>((lo + hi) * 0.5) + 0.0f;
  p.scale = static_cast<float>((hi - lo) / 255.0) + 0.0f;
  if (dtype == ScaleDtype::kFp16) {
    if (avx2) {
      p.zp = kv_internal::HalfToFloatF16c(kv_internal::FloatToHalfF16c(p.zp));
      p.scale =
          kv_internal::HalfToFloatF16c(kv_internal::FloatToHalfF16c(p.scale));
    } else {
      p.zp = HalfToFloat(FloatToHalf(p.zp));
      p.scale = HalfToFloat(FloatToHalf(p.scale));
    }
    if (!std::isfinite(p.zp) || !std::isfinite(p.scale)) return {nan, nan};
  }
  return p;
}

void StoreParams(const Int8Params& p, ScaleDtype dtype, bool avx2, void* data,
                 size_t v) {
  if (dtype == ScaleDtype::kFp32) {
    float* f = static_cast<float*>(data) + 2 * v;
    f[0] = p.scale;
    f[1] = p.zp;
  } else {
    // Exact: p already holds fp16 values (or NaN, which maps to 0x7E00).
    uint16_t* h = static_cast<uint16_t*>(data) + 2 * v;
    h[0] = avx2 ? kv_internal::FloatToHalfF16c(p.scale) : FloatToHalf(p.scale);
    h[1] = avx2 ? kv_internal::FloatToHalfF16c(p.zp) : FloatToHalf(p.zp);
  }
}

Int8Params LoadParams(ScaleDtype dtype, bool avx2, const void* data, size_t v) {
  if (dtype == ScaleDtype::kFp32) {
    const float* f = static_cast<const float*>(data) + 2 * v;
    return {f[0], f[1]};
  }
  const uint16_t* h = static_cast<const uint16_t*>(data) + 2 * v;
  if (avx2) {
    return {kv_internal::HalfToFloatF16c(h[0]),
            kv_internal::HalfToFloatF16c(h[1])};
  }
  return {HalfToFloat(h[0]), HalfToFloat(h[1])};
}

void QuantizeInt8(const float* in, size_t n_vectors, size_t dim, int8_t* codes,
                  QuantScales scales, bool avx2) {
  for (size_t v = 0; v < n_vectors; ++v) {
    const float* x = in + v * dim;
    int8_t* q = codes + v * dim;
    const MinMax mm = avx2 ? kv_internal::Int8MinMaxAvx2(x, dim)
                           : kv_internal::Int8MinMaxPortable(x, dim);
    const Int8Params p = ComputeInt8Params(mm, scales.dtype, avx2);
    StoreParams(p, scales.dtype, avx2, scales.data, v);
    // Poisoned (NaN) and constant (0) scales: all codes 0, no division.
    if (!(p.scale > 0.0f)) {
      std::memset(q, 0, dim);
      continue;
    }
    if (avx2) {
      kv_internal::Int8QuantVecAvx2(x, dim, p.zp, p.scale, q);
    } else {
      kv_internal::Int8QuantVecPortable(x, dim, p.zp, p.scale, q);
    }
  }
}

void DequantizeInt8(const int8_t* codes, ConstQuantScales scales,
                    size_t n_vectors, size_t dim, float* out, bool avx2) {
  for (size_t v = 0; v < n_vectors; ++v) {
    const Int8Params p = LoadParams(scales.dtype, avx2, scales.data, v);
    if (avx2) {
      kv_internal::Int8DequantVecAvx2(codes + v * dim, dim, p.scale, p.zp,
                                      out + v * dim);
    } else {
      kv_internal::Int8DequantVecPortable(codes + v * dim, dim, p.scale, p.zp,
                                          out + v * dim);
    }
  }
}

absl::Status CheckArgs(KvFormat format, const void* src, size_t n_vectors,
                       size_t dim, const void* dst, const void* scale_data,
                       const char* what) {
  if (n_vectors == 0) return absl::OkStatus();
  if (dim == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: dim must be positive when n_vectors (%d) > 0", what, n_vectors));
  }
  if (src == nullptr || dst == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: null input or output buffer for %d x %d elements",
                        what, n_vectors, dim));
  }
  if (format == KvFormat::kInt8 && scale_data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: format int8 needs scales.data (2 x %d values)", what, n_vectors));
  }
  switch (format) {
    case KvFormat::kFp32:
    case KvFormat::kBf16:
    case KvFormat::kFp8E4M3:
    case KvFormat::kFp8E5M2:
    case KvFormat::kInt8:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: unknown KvFormat %d", what, static_cast<int>(format)));
}

}  // namespace

absl::string_view KvFormatName(KvFormat format) {
  switch (format) {
    case KvFormat::kFp32:
      return "fp32";
    case KvFormat::kBf16:
      return "bf16";
    case KvFormat::kFp8E4M3:
      return "fp8_e4m3";
    case KvFormat::kFp8E5M2:
      return "fp8_e5m2";
    case KvFormat::kInt8:
      return "int8";
  }
  return "unknown";
}

absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name) {
  for (KvFormat f : kAllFormats) {
    if (name == KvFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown KV cache format \"%s\"; valid formats: fp32, bf16, fp8_e4m3, "
      "fp8_e5m2, int8",
      name));
}

absl::string_view ScaleDtypeName(ScaleDtype dtype) {
  return dtype == ScaleDtype::kFp16 ? "fp16" : "fp32";
}

absl::StatusOr<ScaleDtype> ParseScaleDtype(absl::string_view name) {
  if (name == "fp32") return ScaleDtype::kFp32;
  if (name == "fp16") return ScaleDtype::kFp16;
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown INT8 scale dtype \"%s\"; valid dtypes: fp32, fp16", name));
}

size_t BytesPerElement(KvFormat format) {
  switch (format) {
    case KvFormat::kFp32:
      return 4;
    case KvFormat::kBf16:
      return 2;
    case KvFormat::kFp8E4M3:
    case KvFormat::kFp8E5M2:
    case KvFormat::kInt8:
      return 1;
  }
  return 0;
}

size_t ScaleBytesPerVector(KvFormat format, ScaleDtype dtype) {
  if (format != KvFormat::kInt8) return 0;
  return dtype == ScaleDtype::kFp16 ? 2 * sizeof(uint16_t) : 2 * sizeof(float);
}

size_t KvCodeBytes(KvFormat format, size_t n_vectors, size_t dim) {
  return BytesPerElement(format) * n_vectors * dim;
}

size_t KvScaleBytes(KvFormat format, ScaleDtype dtype, size_t n_vectors) {
  return ScaleBytesPerVector(format, dtype) * n_vectors;
}

size_t KvStorageBytes(KvFormat format, ScaleDtype dtype, size_t n_vectors,
                      size_t dim) {
  return KvCodeBytes(format, n_vectors, dim) +
         KvScaleBytes(format, dtype, n_vectors);
}

absl::Status Quantize(KvFormat format, const float* in, size_t n_vectors,
                      size_t dim, void* codes, QuantScales scales,
                      const KvQuantOptions& options) {
  if (absl::Status s =
          CheckArgs(format, in, n_vectors, dim, codes, scales.data, "Quantize");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<CpuPath> path = ResolveCpuPath(options.path);
  if (!path.ok()) return path.status();
  if (n_vectors == 0) return absl::OkStatus();
  const bool avx2 = *path == CpuPath::kAvx2;
  const size_t n = n_vectors * dim;
  switch (format) {
    case KvFormat::kFp32:
      std::memcpy(codes, in, n * sizeof(float));
      break;
    case KvFormat::kBf16:
      (avx2 ? kv_internal::Bf16QuantAvx2 : Bf16QuantPortable)(
          in, n, static_cast<uint16_t*>(codes));
      break;
    case KvFormat::kFp8E4M3:
      (avx2 ? kv_internal::E4M3QuantAvx2 : E4M3QuantPortable)(
          in, n, static_cast<uint8_t*>(codes));
      break;
    case KvFormat::kFp8E5M2:
      (avx2 ? kv_internal::E5M2QuantAvx2 : E5M2QuantPortable)(
          in, n, static_cast<uint8_t*>(codes));
      break;
    case KvFormat::kInt8:
      QuantizeInt8(in, n_vectors, dim, static_cast<int8_t*>(codes), scales,
                   avx2);
      break;
  }
  return absl::OkStatus();
}

absl::Status Dequantize(KvFormat format, const void* codes,
                        ConstQuantScales scales, size_t n_vectors, size_t dim,
                        float* out, const KvQuantOptions& options) {
  if (absl::Status s = CheckArgs(format, codes, n_vectors, dim, out,
                                 scales.data, "Dequantize");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<CpuPath> path = ResolveCpuPath(options.path);
  if (!path.ok()) return path.status();
  if (n_vectors == 0) return absl::OkStatus();
  const bool avx2 = *path == CpuPath::kAvx2;
  const size_t n = n_vectors * dim;
  switch (format) {
    case KvFormat::kFp32:
      std::memcpy(out, codes, n * sizeof(float));
      break;
    case KvFormat::kBf16:
      (avx2 ? kv_internal::Bf16DequantAvx2 : Bf16DequantPortable)(
          static_cast<const uint16_t*>(codes), n, out);
      break;
    case KvFormat::kFp8E4M3:
      (avx2 ? kv_internal::E4M3DequantAvx2 : E4M3DequantPortable)(
          static_cast<const uint8_t*>(codes), n, out);
      break;
    case KvFormat::kFp8E5M2:
      (avx2 ? kv_internal::E5M2DequantAvx2 : E5M2DequantPortable)(
          static_cast<const uint8_t*>(codes), n, out);
      break;
    case KvFormat::kInt8:
      DequantizeInt8(static_cast<const int8_t*>(codes), scales, n_vectors, dim,
                     out, avx2);
      break;
  }
  return absl::OkStatus();
}

absl::Status FloatToHalfArray(const float* in, size_t n, uint16_t* out,
                              CpuPath path) {
  absl::StatusOr<CpuPath> resolved = ResolveCpuPath(path);
  if (!resolved.ok()) return resolved.status();
  if (n > 0 && (in == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError("FloatToHalfArray: null buffer");
  }
  if (*resolved == CpuPath::kAvx2) {
    kv_internal::HalfQuantAvx2(in, n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
  }
  return absl::OkStatus();
}

absl::Status HalfToFloatArray(const uint16_t* in, size_t n, float* out,
                              CpuPath path) {
  absl::StatusOr<CpuPath> resolved = ResolveCpuPath(path);
  if (!resolved.ok()) return resolved.status();
  if (n > 0 && (in == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError("HalfToFloatArray: null buffer");
  }
  if (*resolved == CpuPath::kAvx2) {
    kv_internal::HalfDequantAvx2(in, n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
  }
  return absl::OkStatus();
}

namespace kv_internal {

MinMax Int8MinMaxPortable(const float* x, size_t n) {
  float lo = std::numeric_limits<float>::infinity();
  float hi = -lo;
  bool nan = false;
  for (size_t i = 0; i < n; ++i) {
    lo = x[i] < lo ? x[i] : lo;
    hi = x[i] > hi ? x[i] : hi;
    nan |= x[i] != x[i];
  }
  return {lo, hi, nan || std::isinf(lo) || std::isinf(hi)};
}

void Int8QuantVecPortable(const float* x, size_t n, float zp, float scale,
                          int8_t* q) {
  for (size_t i = 0; i < n; ++i) q[i] = Int8QuantOne(x[i], zp, scale);
}

void Int8DequantVecPortable(const int8_t* q, size_t n, float scale, float zp,
                            float* out) {
  for (size_t i = 0; i < n; ++i) {
    const float prod = static_cast<float>(q[i]) * scale;
    out[i] = prod + zp;
  }
}

}  // namespace kv_internal
}  // namespace densegate::kernels
