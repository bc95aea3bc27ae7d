// Shape of the hybrid (Kimi-Linear style) model: which layers are KDA and
// which are full attention, the widths of every projection, the context
// length and the seed the weights are generated from. Read from a JSON file
// (runtime/configs/*.json); every error names the offending field.
//
// Plain value type; thread-compatible.
#ifndef DENSEGATE_RUNTIME_MODEL_CONFIG_H_
#define DENSEGATE_RUNTIME_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace densegate::runtime {

enum class LayerType { kKda, kAttention };

struct ModelConfig {
  std::string name;
  int vocab_size = 0;
  int hidden_size = 0;
  // One entry per layer, e.g. 3 x kKda then kAttention, repeated.
  std::vector<LayerType> layers;

  // KDA layers: heads of K-dim keys/queries and V-dim values.
  int kda_heads = 0;
  int kda_head_k_dim = 0;
  int kda_head_v_dim = 0;

  // Attention layers: grouped-query attention with RoPE.
  int attn_heads = 0;
  int attn_kv_heads = 0;
  int attn_head_dim = 0;
  double rope_theta = 10000.0;

  int mlp_intermediate_size = 0;
  double rms_norm_eps = 1e-6;
  // Longest sequence (prompt plus generated tokens) a request may have.
  int max_context = 0;
  // Tokens per paged KV-cache block.
  int kv_block_size = 16;
  uint64_t seed = 0;

  int num_layers() const { return static_cast<int>(layers.size()); }
  int num_kda_layers() const;
  int num_attention_layers() const;
};

// Checks every field and their consistency; the message names the field
// (e.g. "attention.num_kv_heads").
absl::Status ValidateModelConfig(const ModelConfig& config);

// Parses and validates the JSON form (see runtime/configs/tiny.json).
// Unknown fields are errors, so a typo never silently takes a default.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);

// Reads `path` and parses it; the message names the file.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_MODEL_CONFIG_H_
