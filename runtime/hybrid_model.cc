#include "runtime/hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/ops/attention.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/vector_ops.h"
#include "runtime/status_macros.h"

namespace densegate::runtime {

namespace kda = kernels::kda;

// One forward pass: either a chunk of one sequence (prefill) or one token
// of each of a batch of sequences (decode). The rows' inputs are in ctx->x.
struct HybridModel::Pass {
  int rows = 0;
  bool prefill = false;
  // Prefill.
  const SequenceRef* seq = nullptr;
  int start_pos = 0;
  // Decode.
  absl::Span<const DecodeRow> decode;
  PagedKvCache* kv = nullptr;
  KdaStateStore* states = nullptr;

  int Position(int r) const {
    return prefill ? start_pos + r : decode[r].position;
  }
};

namespace {

void Ensure(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

ForwardContext::ForwardContext(const Clock* clock, Tracer* tracer,
                               StageStats* stats)
    : clock_(clock), tracer_(tracer), stats_(stats) {}

HybridModel::HybridModel(const ModelConfig& config, const ModelOptions& options)
    : config_(config), options_(options), weights_(GenerateWeights(config)) {}

absl::StatusOr<std::unique_ptr<HybridModel>> HybridModel::Create(
    const ModelConfig& config, const ModelOptions& options) {
  RT_RETURN_IF_ERROR(ValidateModelConfig(config));
  return std::unique_ptr<HybridModel>(new HybridModel(config, options));
}

absl::Status HybridModel::Embed(absl::Span<const int32_t> tokens,
                                float* out) const {
  const int hidden = config_.hidden_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token id %d at index %d is outside the vocabulary [0, %d)",
          tokens[i], i, config_.vocab_size));
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::memcpy(
        out + i * hidden,
        weights_.embedding.data() + static_cast<size_t>(tokens[i]) * hidden,
        hidden * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::Gemm(int m, int n, int k, const float* a, int lda,
                               const float* b, int ldb, float* c, int ldc,
                               bool accumulate, ForwardContext* ctx) const {
  ScopedSpan span(nullptr, ctx->clock(), "gemm", "kernel",
                  ctx->stats() ? &ctx->stats()->gemm_ns : nullptr);
  kernels::GemmOptions opt;
  opt.beta = accumulate ? 1.0f : 0.0f;  // Residual add: C = A.B + C.
  return kernels::Gemm(m, n, k, a, lda, b, ldb, c, ldc, opt);
}

absl::Status HybridModel::Prefill(const SequenceRef& seq, int start_pos,
                                  int n_tokens, const float* embeddings,
                                  float* last_logits,
                                  ForwardContext* ctx) const {
  if (n_tokens < 1 || start_pos < 0 ||
      start_pos + n_tokens > config_.max_context) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill of positions [%d, %d) is outside the context [0, %d)",
        start_pos, start_pos + n_tokens, config_.max_context));
  }
  if (config_.num_attention_layers() > 0 && seq.kv == nullptr) {
    return absl::InvalidArgumentError("prefill: no KV cache given");
  }
  if (config_.num_kda_layers() > 0 &&
      (seq.states == nullptr || seq.state_slot < 0 ||
       seq.state_slot >= seq.states->num_slots())) {
    return absl::InvalidArgumentError("prefill: bad KDA state slot");
  }
  const size_t n = static_cast<size_t>(n_tokens) * config_.hidden_size;
  Ensure(ctx->x, n);
  std::copy(embeddings, embeddings + n, ctx->x.begin());
  Pass pass;
  pass.rows = n_tokens;
  pass.prefill = true;
  pass.seq = &seq;
  pass.start_pos = start_pos;
  pass.kv = seq.kv;
  pass.states = seq.states;
  return Forward(pass, last_logits, ctx);
}

absl::Status HybridModel::CheckDecodeRow(const DecodeRow& row,
                                         const PagedKvCache* kv,
                                         const KdaStateStore* states) const {
  if (row.token < 0 || row.token >= config_.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("decode token id %d is outside the vocabulary [0, %d)",
                        row.token, config_.vocab_size));
  }
  if (row.position < 0 || row.position >= config_.max_context) {
    return absl::OutOfRangeError(
        absl::StrFormat("decode position %d is outside the context [0, %d)",
                        row.position, config_.max_context));
  }
  if (config_.num_attention_layers() > 0) {
    if (kv == nullptr) return absl::InvalidArgumentError("no KV cache given");
    const int64_t capacity =
        static_cast<int64_t>(row.blocks.size()) * kv->options().block_size;
    if (row.position >= capacity) {
      return absl::OutOfRangeError(absl::StrFormat(
          "decode position %d is beyond the sequence's %d KV blocks",
          row.position, row.blocks.size()));
    }
  }
  if (config_.num_kda_layers() > 0 &&
      (states == nullptr || row.state_slot < 0 ||
       row.state_slot >= states->num_slots())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad KDA state slot %d", row.state_slot));
  }
  return absl::OkStatus();
}

absl::Status HybridModel::DecodeStep(absl::Span<const DecodeRow> rows,
                                     PagedKvCache* kv, KdaStateStore* states,
                                     float* logits, ForwardContext* ctx) const {
  for (size_t r = 0; r < rows.size(); ++r) {
    if (absl::Status s = CheckDecodeRow(rows[r], kv, states); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrFormat("row %d: %s", r, s.message()));
    }
  }
  if (rows.empty()) return absl::OkStatus();
  const int hidden = config_.hidden_size;
  Ensure(ctx->x, rows.size() * hidden);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::memcpy(
        ctx->x.data() + r * hidden,
        weights_.embedding.data() + static_cast<size_t>(rows[r].token) * hidden,
        hidden * sizeof(float));
  }
  Pass pass;
  pass.rows = static_cast<int>(rows.size());
  pass.decode = rows;
  pass.kv = kv;
  pass.states = states;
  return Forward(pass, logits, ctx);
}

absl::Status HybridModel::Forward(const Pass& pass, float* logits,
                                  ForwardContext* ctx) const {
  const int hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  StageStats* stats = ctx->stats();
  Ensure(ctx->h, static_cast<size_t>(pass.rows) * hidden);
  for (int l = 0; l < config_.num_layers(); ++l) {
    const LayerWeights& w = weights_.layers[l];
    {
      const bool is_kda = w.type == LayerType::kKda;
      ScopedSpan span(
          ctx->tracer(), ctx->clock(), is_kda ? "kda" : "attention", "layer",
          stats ? (is_kda ? &stats->kda_ns : &stats->attention_ns) : nullptr,
          {{"layer", l}, {"rows", pass.rows}});
      RT_RETURN_IF_ERROR(kernels::RmsNorm(ctx->x.data(), w.mixer_norm.data(),
                                          pass.rows, hidden, eps,
                                          ctx->h.data()));
      RT_RETURN_IF_ERROR(is_kda ? KdaMixer(w, pass, ctx)
                                : AttentionMixer(w, pass, ctx));
    }
    ScopedSpan span(ctx->tracer(), ctx->clock(), "mlp", "layer",
                    stats ? &stats->mlp_ns : nullptr,
                    {{"layer", l}, {"rows", pass.rows}});
    RT_RETURN_IF_ERROR(Mlp(w, pass.rows, ctx));
  }
  if (logits == nullptr) return absl::OkStatus();
  ScopedSpan span(ctx->tracer(), ctx->clock(), "lm_head", "layer",
                  stats ? &stats->lm_head_ns : nullptr);
  // Prefill needs only its last token's logits.
  const int first = pass.prefill ? pass.rows - 1 : 0;
  const int m = pass.rows - first;
  RT_RETURN_IF_ERROR(kernels::RmsNorm(
      ctx->x.data() + static_cast<size_t>(first) * hidden,
      weights_.final_norm.data(), m, hidden, eps, ctx->h.data()));
  return Gemm(m, config_.vocab_size, hidden, ctx->h.data(), hidden,
              weights_.lm_head.data(), config_.vocab_size, logits,
              config_.vocab_size, /*accumulate=*/false, ctx);
}

absl::Status HybridModel::KdaMixer(const LayerWeights& w, const Pass& pass,
                                   ForwardContext* ctx) const {
  const int H = config_.kda_heads, K = config_.kda_head_k_dim,
            V = config_.kda_head_v_dim, hidden = config_.hidden_size;
  const int n = pass.rows;
  const int hk = H * K, hv = H * V;
  const int width = 3 * hk + hv + H;
  Ensure(ctx->q, static_cast<size_t>(n) * hk);
  Ensure(ctx->k, static_cast<size_t>(n) * hk);
  Ensure(ctx->g, static_cast<size_t>(n) * hk);
  Ensure(ctx->v, static_cast<size_t>(n) * hv);
  Ensure(ctx->o, static_cast<size_t>(n) * hv);
  Ensure(ctx->b, static_cast<size_t>(n) * H);
  // Column slices of the fused projection, each into its own dense buffer
  // (the layout the KDA kernels read).
  const float* wp = w.kda.in_proj.data();
  const float* h = ctx->h.data();
  RT_RETURN_IF_ERROR(
      Gemm(n, hk, hidden, h, hidden, wp, width, ctx->q.data(), hk, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, hk, hidden, h, hidden, wp + hk, width,
                          ctx->k.data(), hk, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, hv, hidden, h, hidden, wp + 2 * hk, width,
                          ctx->v.data(), hv, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, hk, hidden, h, hidden, wp + 2 * hk + hv, width,
                          ctx->g.data(), hk, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, H, hidden, h, hidden, wp + 3 * hk + hv, width,
                          ctx->b.data(), H, false, ctx));

  kda::KdaMath math;
  math.gate_mode = kda::KdaGateMode::kFromRaw;
  math.precision = options_.kda_precision;
  const int layer = w.type_index;
  {
    StageStats* stats = ctx->stats();
    ScopedSpan span(nullptr, ctx->clock(), "kda_kernel", "kernel",
                    stats ? &stats->kda_kernel_ns : nullptr);
    // Inputs of rows [r0, r0 + len).
    auto inputs = [&](int r0) {
      kda::KdaInputs<float> in;
      in.q = ctx->q.data() + static_cast<size_t>(r0) * hk;
      in.k = ctx->k.data() + static_cast<size_t>(r0) * hk;
      in.v = ctx->v.data() + static_cast<size_t>(r0) * hv;
      in.g = ctx->g.data() + static_cast<size_t>(r0) * hk;
      in.beta = ctx->b.data() + static_cast<size_t>(r0) * H;
      in.a_log = w.kda.a_log.data();
      in.dt_bias = w.kda.dt_bias.data();
      return in;
    };
    if (pass.prefill) {
      kda::KdaPrefillOptions opt;
      opt.math = math;
      RT_RETURN_IF_ERROR(kda::KdaPrefill(
          {n, H, K, V}, inputs(0),
          pass.states->State(layer, pass.seq->state_slot), ctx->o.data(), opt));
    } else {
      kda::KdaDecodeOptions opt;
      opt.math = math;
      opt.variant = options_.kda_variant;
      // One call per run of consecutive state slots.
      for (int r0 = 0; r0 < n;) {
        int r1 = r0 + 1;
        while (r1 < n && pass.decode[r1].state_slot ==
                             pass.decode[r1 - 1].state_slot + 1) {
          ++r1;
        }
        RT_RETURN_IF_ERROR(kda::KdaDecode(
            {r1 - r0, H, K, V}, inputs(r0),
            pass.states->State(layer, pass.decode[r0].state_slot),
            ctx->o.data() + static_cast<size_t>(r0) * hv, opt));
        r0 = r1;
      }
    }
  }
  return Gemm(n, hidden, hv, ctx->o.data(), hv, w.kda.out_proj.data(), hidden,
              ctx->x.data(), hidden, /*accumulate=*/true, ctx);
}

absl::Status HybridModel::AttentionMixer(const LayerWeights& w,
                                         const Pass& pass,
                                         ForwardContext* ctx) const {
  const int Hq = config_.attn_heads, Hkv = config_.attn_kv_heads,
            D = config_.attn_head_dim, hidden = config_.hidden_size;
  const int n = pass.rows;
  const int qw = Hq * D, kvw = Hkv * D, width = qw + 2 * kvw;
  Ensure(ctx->q, static_cast<size_t>(n) * qw);
  Ensure(ctx->k, static_cast<size_t>(n) * kvw);
  Ensure(ctx->v, static_cast<size_t>(n) * kvw);
  Ensure(ctx->o, static_cast<size_t>(n) * qw);
  const float* wp = w.attn.qkv_proj.data();
  const float* h = ctx->h.data();
  RT_RETURN_IF_ERROR(
      Gemm(n, qw, hidden, h, hidden, wp, width, ctx->q.data(), qw, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, kvw, hidden, h, hidden, wp + qw, width,
                          ctx->k.data(), kvw, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(n, kvw, hidden, h, hidden, wp + qw + kvw, width,
                          ctx->v.data(), kvw, false, ctx));
  Ensure(ctx->cos, D / 2);
  Ensure(ctx->sin, D / 2);
  for (int r = 0; r < n; ++r) {
    kernels::RopeCosSin(pass.Position(r), D, config_.rope_theta,
                        ctx->cos.data(), ctx->sin.data());
    for (auto [x, heads] : {std::pair{ctx->q.data() + r * qw, Hq},
                            std::pair{ctx->k.data() + r * kvw, Hkv}}) {
      RT_RETURN_IF_ERROR(kernels::ApplyRope(x, heads, D, D, ctx->cos.data(),
                                            ctx->sin.data(),
                                            kernels::RopeStyle::kNeox));
    }
  }

  StageStats* stats = ctx->stats();
  std::atomic<int64_t>* cache_ns = stats ? &stats->kv_cache_ns : nullptr;
  const int layer = w.type_index;
  const int group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Row r attends to positions [0, n_keys) read into ctx->keys / values.
  auto attend = [&](int r, int n_keys) -> absl::Status {
    Ensure(ctx->probs, n_keys);
    const kernels::AttentionShape shape{static_cast<size_t>(n_keys),
                                        static_cast<size_t>(D),
                                        static_cast<size_t>(D), scale};
    for (int hq = 0; hq < Hq; ++hq) {
      const int kvh = hq / group;
      RT_RETURN_IF_ERROR(kernels::AttendOneStrided(
          ctx->q.data() + static_cast<size_t>(r) * qw + hq * D,
          ctx->keys.data() + kvh * D, kvw, ctx->values.data() + kvh * D, kvw,
          shape, ctx->o.data() + static_cast<size_t>(r) * qw + hq * D,
          ctx->probs.data()));
    }
    return absl::OkStatus();
  };
  if (pass.prefill) {
    // Write the chunk, then read the whole prefix once for all its rows.
    const SequenceRef& seq = *pass.seq;
    const int end = pass.start_pos + n;
    Ensure(ctx->keys, static_cast<size_t>(end) * kvw);
    Ensure(ctx->values, static_cast<size_t>(end) * kvw);
    {
      ScopedSpan span(nullptr, ctx->clock(), "kv_cache", "kernel", cache_ns);
      RT_RETURN_IF_ERROR(seq.kv->Write(seq.blocks, layer, pass.start_pos, n,
                                       ctx->k.data(), kvw, ctx->v.data(), kvw));
      RT_RETURN_IF_ERROR(seq.kv->Read(seq.blocks, layer, end, ctx->keys.data(),
                                      ctx->values.data()));
    }
    for (int r = 0; r < n; ++r) {
      RT_RETURN_IF_ERROR(attend(r, pass.start_pos + r + 1));
    }
  } else {
    for (int r = 0; r < n; ++r) {
      const DecodeRow& row = pass.decode[r];
      const int n_keys = row.position + 1;
      Ensure(ctx->keys, static_cast<size_t>(n_keys) * kvw);
      Ensure(ctx->values, static_cast<size_t>(n_keys) * kvw);
      {
        ScopedSpan span(nullptr, ctx->clock(), "kv_cache", "kernel", cache_ns);
        RT_RETURN_IF_ERROR(
            pass.kv->Write(row.blocks, layer, row.position, 1,
                           ctx->k.data() + static_cast<size_t>(r) * kvw, kvw,
                           ctx->v.data() + static_cast<size_t>(r) * kvw, kvw));
        RT_RETURN_IF_ERROR(pass.kv->Read(row.blocks, layer, n_keys,
                                         ctx->keys.data(), ctx->values.data()));
      }
      RT_RETURN_IF_ERROR(attend(r, n_keys));
    }
  }
  return Gemm(n, hidden, qw, ctx->o.data(), qw, w.attn.out_proj.data(), hidden,
              ctx->x.data(), hidden, /*accumulate=*/true, ctx);
}

absl::Status HybridModel::Mlp(const LayerWeights& w, int rows,
                              ForwardContext* ctx) const {
  const int hidden = config_.hidden_size, inter = config_.mlp_intermediate_size;
  const size_t cells = static_cast<size_t>(rows) * inter;
  Ensure(ctx->gate, cells);
  Ensure(ctx->up, cells);
  RT_RETURN_IF_ERROR(kernels::RmsNorm(
      ctx->x.data(), w.mlp_norm.data(), rows, hidden,
      static_cast<float>(config_.rms_norm_eps), ctx->h.data()));
  const float* wp = w.gate_up.data();
  RT_RETURN_IF_ERROR(Gemm(rows, inter, hidden, ctx->h.data(), hidden, wp,
                          2 * inter, ctx->gate.data(), inter, false, ctx));
  RT_RETURN_IF_ERROR(Gemm(rows, inter, hidden, ctx->h.data(), hidden,
                          wp + inter, 2 * inter, ctx->up.data(), inter, false,
                          ctx));
  RT_RETURN_IF_ERROR(kernels::SiluMul(ctx->gate.data(), ctx->up.data(), cells,
                                      ctx->gate.data()));
  return Gemm(rows, hidden, inter, ctx->gate.data(), inter, w.down.data(),
              hidden, ctx->x.data(), hidden, /*accumulate=*/true, ctx);
}

absl::StatusOr<int32_t> GreedySample(absl::Span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    // NaN compares false, so it never replaces a number.
    if (!std::isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) {
      best = static_cast<int32_t>(i);
    }
  }
  if (best < 0) {
    return absl::FailedPreconditionError(
        "no logit is a number: cannot sample a token");
  }
  return best;
}

}  // namespace densegate::runtime
