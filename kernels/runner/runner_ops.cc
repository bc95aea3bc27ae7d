#include "kernels/runner/runner_ops.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "kernels/kda/kda_decode.h"
#include "kernels/kda/kda_prefill.h"
#include "kernels/kvcache/kv_quant.h"

namespace densegate::kernels::runner {
namespace {

using nlohmann::json;

absl::StatusOr<int64_t> ShapeValue(const json& shape, const char* key,
                                   int64_t max, int64_t fallback = -1) {
  if (!shape.is_object() || !shape.contains(key)) {
    if (fallback >= 0) return fallback;
    return absl::InvalidArgumentError(
        absl::StrFormat("shape.%s is required", key));
  }
  const json& v = shape[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shape.%s must be an integer in [1, %d], got %s", key, max, v.dump()));
  }
  return v.get<int64_t>();
}

double Param(const json& params, const char* key, double fallback) {
  if (params.is_object() && params.contains(key) && params[key].is_number()) {
    return params[key].get<double>();
  }
  return fallback;
}

// KDA problem: rows x heads (rows = steps * batch for decode, tokens for
// prefill), plus the batch the state is kept for.
struct KdaShape {
  int64_t steps = 1;
  int64_t batch = 1;  // Sequences (decode) or 1 (prefill).
  kda::KdaDims dims;  // dims.batch: rows per call of the kernel.
};

absl::StatusOr<KdaShape> ParseKdaShape(const std::string& op, const json& shape) {
  KdaShape s;
  auto heads = ShapeValue(shape, "heads", 256);
  auto k = ShapeValue(shape, "k", kda::kKdaMaxDim);
  auto v = ShapeValue(shape, "v", kda::kKdaMaxDim);
  for (const auto* r : {&heads, &k, &v}) {
    if (!r->ok()) return r->status();
  }
  s.dims.heads = static_cast<int>(*heads);
  s.dims.k_dim = static_cast<int>(*k);
  s.dims.v_dim = static_cast<int>(*v);
  if (op == "kda_decode" && shape.contains("tokens")) {
    // A precision sweep's sequence: one sequence decoded token by token.
    if (shape.contains("batch") || shape.contains("steps")) {
      return absl::InvalidArgumentError(
          "kda_decode takes shape.tokens (one sequence) or shape.batch with optional "
          "shape.steps, not both");
    }
    auto tokens = ShapeValue(shape, "tokens", 1 << 20);
    if (!tokens.ok()) return tokens.status();
    s.batch = 1;
    s.steps = *tokens;
    s.dims.batch = 1;
  } else if (op == "kda_decode") {
    auto batch = ShapeValue(shape, "batch", 4096);
    if (!batch.ok()) return batch.status();
    auto steps = ShapeValue(shape, "steps", 1 << 20, 1);
    if (!steps.ok()) return steps.status();
    s.batch = *batch;
    s.steps = *steps;
    s.dims.batch = static_cast<int>(*batch);
  } else {
    auto tokens = ShapeValue(shape, "tokens", 1 << 20);
    if (!tokens.ok()) return tokens.status();
    s.steps = 1;
    s.batch = 1;
    s.dims.batch = static_cast<int>(*tokens);
  }
  return s;
}

std::vector<BufferSpec> KdaBuffers(const KdaShape& s, const json& params) {
  const int64_t rows = s.steps * s.dims.batch * s.dims.heads;
  const int64_t K = s.dims.k_dim, V = s.dims.v_dim;
  // Gate scale: g = logsigmoid(N(0,1)) / gate_scale. Large scales mean
  // decays near 1 (long memory), where rounding error accumulates.
  const double gate_scale = Param(params, "gate_scale", 1.0);
  return {
      {"q", Role::kInput, rows * K, {{"dist", "normal"}, {"scale", 1.0}}},
      {"k", Role::kInput, rows * K, {{"dist", "normal"}, {"scale", 1.0}}},
      {"v", Role::kInput, rows * V, {{"dist", "normal"}, {"scale", 1.0}}},
      {"g", Role::kInput, rows * K, {{"dist", "log_decay"}, {"gate_scale", gate_scale}}},
      {"beta", Role::kInput, rows, {{"dist", "sigmoid_normal"}}},
      // Uniform with the spread of 0.1 * N(0, 1): the state is the largest
      // buffer by far, and uniform values are several times cheaper for the
      // harness to draw fresh for every call.
      {"state",
       Role::kInOut,
       s.batch * s.dims.heads * K * V,
       {{"dist", "uniform"}, {"lo", -0.173}, {"hi", 0.173}}},
      {"out", Role::kOutput, rows * V, nullptr},
  };
}

absl::StatusOr<kernels::KvFormat> QuantFormat(const std::string& op) {
  static const std::map<std::string, kernels::KvFormat> formats = {
      {"quantize_bf16", kernels::KvFormat::kBf16},
      {"quantize_fp8_e4m3", kernels::KvFormat::kFp8E4M3},
      {"quantize_fp8_e5m2", kernels::KvFormat::kFp8E5M2},
      {"quantize_int8", kernels::KvFormat::kInt8},
  };
  auto it = formats.find(op);
  if (it == formats.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown op \"%s\": this runner implements kda_decode, kda_prefill, "
        "quantize_bf16, quantize_fp8_e4m3, quantize_fp8_e5m2, quantize_int8",
        op));
  }
  return it->second;
}

struct QuantShape {
  int64_t vectors = 0;
  int64_t dim = 0;
};

absl::StatusOr<QuantShape> ParseQuantShape(const json& shape) {
  auto tokens = ShapeValue(shape, "tokens", 1 << 20);
  auto heads = ShapeValue(shape, "heads", 256);
  auto dim = ShapeValue(shape, "dim", 1024);
  for (const auto* r : {&tokens, &heads, &dim}) {
    if (!r->ok()) return r->status();
  }
  return QuantShape{*tokens * *heads, *dim};
}

std::vector<double> ToDouble(const float* x, int64_t n) {
  return std::vector<double>(x, x + n);
}

// params.variant (a string): which kda_decode implementation computes;
// absent: the one the workload ships as its default. No other op has
// variants.
absl::StatusOr<kda::KdaDecodeOptions> ComputeOptions(const std::string& op, const json& params) {
  kda::KdaDecodeOptions options;
  if (!params.is_object() || !params.contains("variant")) return options;
  const json& variant = params["variant"];
  if (op != "kda_decode") {
    return absl::InvalidArgumentError(absl::StrFormat("op %s has no variants", op));
  }
  if (!variant.is_string()) {
    return absl::InvalidArgumentError("params.variant must be a string (naive, fused, tiled)");
  }
  absl::StatusOr<kda::KdaDecodeVariant> v = kda::ParseKdaDecodeVariant(variant.get<std::string>());
  if (!v.ok()) return v.status();
  options.variant = *v;
  return options;
}

absl::Status RunKda(const std::string& op, const KdaShape& s, const json& params, bool reference,
                    const std::vector<float*>& b, const std::vector<double*>& r) {
  absl::StatusOr<kda::KdaDecodeOptions> options = ComputeOptions(op, params);
  if (!options.ok()) return options.status();
  const int64_t per_step = static_cast<int64_t>(s.dims.batch) * s.dims.heads;
  const int64_t K = s.dims.k_dim, V = s.dims.v_dim;
  if (!reference) {
    for (int64_t t = 0; t < s.steps; ++t) {
      kda::KdaInputs<float> in;
      in.q = b[0] + t * per_step * K;
      in.k = b[1] + t * per_step * K;
      in.v = b[2] + t * per_step * V;
      in.g = b[3] + t * per_step * K;
      in.beta = b[4] + t * per_step;
      float* out = b[6] + t * per_step * V;
      absl::Status st = op == "kda_decode"
                            ? kda::KdaDecode(s.dims, in, b[5], out, *options)
                            : kda::KdaPrefill(s.dims, in, b[5], out, {});
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  const int64_t rows = s.steps * per_step;
  std::vector<double> q = ToDouble(b[0], rows * K), k = ToDouble(b[1], rows * K),
                      v = ToDouble(b[2], rows * V), g = ToDouble(b[3], rows * K),
                      beta = ToDouble(b[4], rows);
  const int64_t state_size = s.batch * s.dims.heads * K * V;
  std::copy(b[5], b[5] + state_size, r[0]);
  for (int64_t t = 0; t < s.steps; ++t) {
    kda::KdaInputs<double> in;
    in.q = q.data() + t * per_step * K;
    in.k = k.data() + t * per_step * K;
    in.v = v.data() + t * per_step * V;
    in.g = g.data() + t * per_step * K;
    in.beta = beta.data() + t * per_step;
    double* out = r[1] + t * per_step * V;
    absl::Status st = op == "kda_decode"
                          ? kda::KdaDecodeReference(s.dims, in, r[0], out, {})
                          : kda::KdaRecurrenceReference(s.dims, in, r[0], out, {});
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status RunQuant(kernels::KvFormat format, const QuantShape& s, bool reference,
                      const std::vector<float*>& b, const std::vector<double*>& r) {
  kernels::KvQuantOptions options;
  if (reference) options.path = kernels::CpuPath::kPortable;
  const size_t n = static_cast<size_t>(s.vectors), d = static_cast<size_t>(s.dim);
  std::vector<uint8_t> codes(kernels::KvCodeBytes(format, n, d));
  std::vector<uint8_t> scales(
      kernels::KvScaleBytes(format, kernels::ScaleDtype::kFp32, n) + 1);
  kernels::QuantScales qs{kernels::ScaleDtype::kFp32, scales.data()};
  absl::Status st = kernels::Quantize(format, b[0], n, d, codes.data(), qs, options);
  if (!st.ok()) return st;
  if (!reference) {
    return kernels::Dequantize(format, codes.data(), qs, n, d, b[1], options);
  }
  std::vector<float> out(n * d);
  st = kernels::Dequantize(format, codes.data(), qs, n, d, out.data(), options);
  if (!st.ok()) return st;
  std::copy(out.begin(), out.end(), r[0]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<BufferSpec>> DescribeOp(const std::string& op,
                                                    const json& shape,
                                                    const json& params) {
  if (op == "kda_decode" || op == "kda_prefill") {
    absl::StatusOr<KdaShape> s = ParseKdaShape(op, shape);
    if (!s.ok()) return s.status();
    if (absl::Status v = ComputeOptions(op, params).status(); !v.ok()) return v;
    return KdaBuffers(*s, params);
  }
  if (params.is_object() && params.contains("variant")) {
    return absl::InvalidArgumentError(absl::StrFormat("op %s has no variants", op));
  }
  absl::StatusOr<kernels::KvFormat> format = QuantFormat(op);
  if (!format.ok()) return format.status();
  absl::StatusOr<QuantShape> s = ParseQuantShape(shape);
  if (!s.ok()) return s.status();
  const int64_t n = s->vectors * s->dim;
  return std::vector<BufferSpec>{
      {"x", Role::kInput, n, {{"dist", "normal"}, {"scale", 1.0}}},
      {"dequantized", Role::kOutput, n, nullptr},
  };
}

absl::Status RunOp(const std::string& op, const json& shape, const json& params,
                   bool reference, const std::vector<float*>& buffers,
                   const std::vector<double*>& results) {
  absl::StatusOr<std::vector<BufferSpec>> specs = DescribeOp(op, shape, params);
  if (!specs.ok()) return specs.status();
  size_t n_results = 0;
  for (const BufferSpec& b : *specs) n_results += b.role != Role::kInput;
  if (buffers.size() != specs->size() || (reference && results.size() != n_results)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "op %s takes %d buffers and %d results, got %d and %d", op, specs->size(),
        n_results, buffers.size(), results.size()));
  }
  if (op == "kda_decode" || op == "kda_prefill") {
    absl::StatusOr<KdaShape> s = ParseKdaShape(op, shape);
    if (!s.ok()) return s.status();
    return RunKda(op, *s, params, reference, buffers, results);
  }
  absl::StatusOr<kernels::KvFormat> format = QuantFormat(op);
  if (!format.ok()) return format.status();
  absl::StatusOr<QuantShape> s = ParseQuantShape(shape);
  if (!s.ok()) return s.status();
  return RunQuant(*format, *s, reference, buffers, results);
}

}  // namespace densegate::kernels::runner
