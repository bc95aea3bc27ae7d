// Weights of the hybrid model, generated from the config's seed (nothing is
// downloaded). Scales keep activations O(1): projections ~ 1/sqrt(fan_in),
// MLP outputs further scaled by 1/sqrt(2 * layers), attention outputs by
// 0.25, and embeddings small (std 0.15) so that the context, not the last
// token alone, decides the next token; KDA gate parameters follow Kimi
// Linear's init (A in [1, 16], dt in [1e-3, 1e-1]).
//
// Matrices are row-major [in][out] (K x N for kernels::Gemm, the layout its
// decode-sized path reads without packing). Immutable once generated;
// thread-safe to read.
#ifndef DENSEGATE_RUNTIME_MODEL_WEIGHTS_H_
#define DENSEGATE_RUNTIME_MODEL_WEIGHTS_H_

#include <cstdint>
#include <vector>

#include "runtime/model_config.h"

namespace densegate::runtime {

struct KdaLayerWeights {
  // [hidden][H*K q | H*K k | H*V v | H*K g_raw | H b_raw]: one matrix, read
  // as five column slices.
  std::vector<float> in_proj;
  std::vector<float> a_log;     // [H]
  std::vector<float> dt_bias;   // [H][K]
  std::vector<float> out_proj;  // [H*V][hidden]
};

struct AttentionLayerWeights {
  // [hidden][Hq*D q | Hkv*D k | Hkv*D v].
  std::vector<float> qkv_proj;
  std::vector<float> out_proj;  // [Hq*D][hidden]
};

struct LayerWeights {
  LayerType type = LayerType::kKda;
  // Index among the layers of the same type (KDA state / KV-cache layer).
  int type_index = 0;
  std::vector<float> mixer_norm;  // [hidden]
  KdaLayerWeights kda;            // Set for kKda.
  AttentionLayerWeights attn;     // Set for kAttention.
  std::vector<float> mlp_norm;    // [hidden]
  std::vector<float> gate_up;     // [hidden][I gate | I up]
  std::vector<float> down;        // [I][hidden]
};

struct ModelWeights {
  std::vector<float> embedding;  // [vocab][hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [hidden][vocab]

  // Total number of parameters.
  int64_t NumParameters() const;
};

// Deterministic in (config shape, config.seed). Precondition: the config
// passed ValidateModelConfig.
ModelWeights GenerateWeights(const ModelConfig& config);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_MODEL_WEIGHTS_H_
