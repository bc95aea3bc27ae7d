// The hybrid model in the Kimi-Linear style: token embedding, then layers
// that are either KDA (linear attention with a recurrent per-request state)
// or full attention (GQA + RoPE over the paged KV cache), each followed by
// a SiLU-gated MLP, with pre-RMSNorm residual blocks; a final RMSNorm, the
// LM head, and greedy sampling.
//
//   KDA layer:  [q | k | v | g_raw | b_raw] = h W_in   (one matrix)
//               o = KDA(q, k, v; g = -exp(a_log) softplus(g_raw + dt_bias),
//                        beta = sigmoid(b_raw))       (kernels/kda)
//               x += o W_out
//   attention:  [q | k | v] = h W_qkv, RoPE(q, k), K/V into the cache,
//               o = softmax(q K^T / sqrt(d)) V,  x += o W_out
//   MLP:        x += (silu(h W_gate) * (h W_up)) W_down
//
// Prefill runs one sequence's chunk of tokens through KdaPrefill and GEMMs
// over the chunk's rows; DecodeStep runs one token for each of a batch of
// sequences through batched GEMMs and KdaDecode over the batch. Every kernel
// used computes a row independently of the others (kernels::Gemm has one
// FMA chain per element; KDA per (sequence, head); attention per row), so a
// request's tokens do not depend on the batch it shares, and prefill chunks
// that start at multiples of kPrefillAlignment give the same results
// however a prompt is split.
//
// Thread-safety: a HybridModel is immutable and may be shared by threads;
// each thread passes its own ForwardContext, and concurrent calls must
// touch different sequences' cache blocks and state slots.
#ifndef DENSEGATE_RUNTIME_HYBRID_MODEL_H_
#define DENSEGATE_RUNTIME_HYBRID_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kda/kda_decode.h"
#include "kernels/kda/kda_prefill.h"
#include "kernels/kda/precision.h"
#include "runtime/clock.h"
#include "runtime/kda_state_store.h"
#include "runtime/kv_cache.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"
#include "runtime/stage_stats.h"
#include "runtime/tracer.h"

namespace densegate::runtime {

// Prefill chunks starting at multiples of this (KDA's chunk) are exact
// continuations of each other.
inline constexpr int kPrefillAlignment = kernels::kda::kKdaDefaultChunk;

struct ModelOptions {
  kernels::kda::KdaDecodeVariant kda_variant =
      kernels::kda::KdaDecodeVariant::kTiled;
  kernels::kda::Precision kda_precision = kernels::kda::Precision::kIeee;
};

// Where one sequence's cache lives: its KV blocks and its KDA state slot.
struct SequenceRef {
  PagedKvCache* kv = nullptr;  // Unused by models without attention layers.
  absl::Span<const int32_t> blocks;
  KdaStateStore* states = nullptr;  // Unused by models without KDA layers.
  int state_slot = 0;
};

// One row of a decode step: feed `token` at `position` of the sequence
// whose KV blocks and state slot are given.
struct DecodeRow {
  int32_t token = 0;
  int position = 0;
  absl::Span<const int32_t> blocks;
  int state_slot = 0;
};

// Scratch buffers and instrumentation of one thread's forward passes.
// Thread-compatible: one per thread.
class ForwardContext {
 public:
  // `tracer` and `stats` may be null.
  explicit ForwardContext(const Clock* clock = SteadyClock::Get(),
                          Tracer* tracer = nullptr,
                          StageStats* stats = nullptr);

  const Clock* clock() const { return clock_; }
  Tracer* tracer() const { return tracer_; }
  StageStats* stats() const { return stats_; }

 private:
  friend class HybridModel;

  const Clock* clock_;
  Tracer* tracer_;
  StageStats* stats_;
  std::vector<float> x, h, q, k, v, g, b, o, gate, up, keys, values, probs, cos,
      sin;
};

class HybridModel {
 public:
  // Validates the config and generates the weights from its seed.
  static absl::StatusOr<std::unique_ptr<HybridModel>> Create(
      const ModelConfig& config, const ModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const ModelWeights& weights() const { return weights_; }

  // Encode: the embeddings of `tokens` into out [n][hidden].
  // InvalidArgument naming the index of a token outside the vocabulary.
  absl::Status Embed(absl::Span<const int32_t> tokens, float* out) const;

  // Runs tokens [start_pos, start_pos + n_tokens) of one sequence, given
  // their embeddings [n_tokens][hidden]: writes their K/V into the cache,
  // advances the KDA state, and (when last_logits is not null) writes the
  // logits [vocab] of the last token. Precondition: positions before
  // start_pos were run before; start_pos == 0 expects a cleared state.
  absl::Status Prefill(const SequenceRef& seq, int start_pos, int n_tokens,
                       const float* embeddings, float* last_logits,
                       ForwardContext* ctx) const;

  // Why `row` cannot be decoded (bad token, position beyond the context or
  // beyond its blocks, bad state slot), or OK. DecodeStep checks every row
  // this way before it changes anything.
  absl::Status CheckDecodeRow(const DecodeRow& row, const PagedKvCache* kv,
                              const KdaStateStore* states) const;

  // One decode step for rows.size() sequences; logits [rows][vocab].
  // Rows whose state slots are consecutive share one KdaDecode call.
  absl::Status DecodeStep(absl::Span<const DecodeRow> rows, PagedKvCache* kv,
                          KdaStateStore* states, float* logits,
                          ForwardContext* ctx) const;

 private:
  struct Pass;

  HybridModel(const ModelConfig& config, const ModelOptions& options);

  absl::Status Forward(const Pass& pass, float* logits,
                       ForwardContext* ctx) const;
  absl::Status KdaMixer(const LayerWeights& w, const Pass& pass,
                        ForwardContext* ctx) const;
  absl::Status AttentionMixer(const LayerWeights& w, const Pass& pass,
                              ForwardContext* ctx) const;
  absl::Status Mlp(const LayerWeights& w, int rows, ForwardContext* ctx) const;
  absl::Status Gemm(int m, int n, int k, const float* a, int lda,
                    const float* b, int ldb, float* c, int ldc, bool accumulate,
                    ForwardContext* ctx) const;

  const ModelConfig config_;
  const ModelOptions options_;
  const ModelWeights weights_;
};

// Greedy sampling: the index of the largest logit (the lowest index among
// equals; NaN never wins). FailedPrecondition when no logit is a number.
absl::StatusOr<int32_t> GreedySample(absl::Span<const float> logits);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_HYBRID_MODEL_H_
