#include "runtime/test_util.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "runtime/kda_state_store.h"
#include "runtime/kv_cache.h"
#include "runtime/random.h"

namespace densegate::runtime::testing {

ModelConfig TinyConfig() {
  absl::StatusOr<ModelConfig> config =
      LoadModelConfig("runtime/configs/tiny.json");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

std::unique_ptr<HybridModel> TinyModel(const ModelOptions& options) {
  absl::StatusOr<std::unique_ptr<HybridModel>> model =
      HybridModel::Create(TinyConfig(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

std::vector<int32_t> RandomPrompt(int length, uint64_t seed, int vocab) {
  Rng rng(seed);
  std::vector<int32_t> prompt(length);
  for (int32_t& t : prompt)
    t = static_cast<int32_t>(rng.UniformInt(0, vocab - 1));
  return prompt;
}

absl::StatusOr<Generation> GenerateAlone(const HybridModel& model,
                                         const std::vector<int32_t>& prompt,
                                         int max_new_tokens,
                                         kernels::KvFormat format, int chunk,
                                         const std::vector<int32_t>* forced) {
  const ModelConfig& c = model.config();
  KvCacheOptions kv_options;
  kv_options.num_layers = c.num_attention_layers();
  kv_options.num_kv_heads = c.attn_kv_heads;
  kv_options.head_dim = c.attn_head_dim;
  kv_options.block_size = c.kv_block_size;
  kv_options.num_blocks =
      (c.max_context + c.kv_block_size - 1) / c.kv_block_size;
  kv_options.format = format;
  absl::StatusOr<std::unique_ptr<PagedKvCache>> kv =
      PagedKvCache::Create(kv_options, nullptr);
  if (!kv.ok()) return kv.status();
  KdaStateStore states("test states", 1, c.num_kda_layers(), c.kda_heads,
                       c.kda_head_k_dim, c.kda_head_v_dim, nullptr);
  absl::StatusOr<std::vector<int32_t>> blocks = (*kv)->Allocate(c.max_context);
  if (!blocks.ok()) return blocks.status();
  absl::StatusOr<int> slot = states.Acquire();
  if (!slot.ok()) return slot.status();
  states.Clear(*slot);

  const int n = static_cast<int>(prompt.size());
  std::vector<float> embeddings(static_cast<size_t>(n) * c.hidden_size);
  if (absl::Status s = model.Embed(prompt, embeddings.data()); !s.ok())
    return s;
  ForwardContext ctx;
  const SequenceRef seq{kv->get(), *blocks, &states, *slot};
  Generation gen;
  std::vector<float> logits(c.vocab_size);
  for (int start = 0; start < n; start += chunk) {
    const int len = std::min(chunk, n - start);
    const bool last = start + len == n;
    absl::Status s = model.Prefill(
        seq, start, len,
        embeddings.data() + static_cast<size_t>(start) * c.hidden_size,
        last ? logits.data() : nullptr, &ctx);
    if (!s.ok()) return s;
  }
  for (int i = 0; i < max_new_tokens; ++i) {
    absl::StatusOr<int32_t> token = GreedySample(logits);
    if (!token.ok()) return token.status();
    gen.tokens.push_back(*token);
    gen.logits.push_back(logits);
    if (i + 1 == max_new_tokens) break;
    const DecodeRow row{forced != nullptr ? (*forced)[i] : *token, n + i,
                        *blocks, *slot};
    absl::Status s =
        model.DecodeStep({&row, 1}, kv->get(), &states, logits.data(), &ctx);
    if (!s.ok()) return s;
  }
  return gen;
}

}  // namespace densegate::runtime::testing
