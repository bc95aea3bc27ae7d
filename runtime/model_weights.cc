#include "runtime/model_weights.h"

#include <cmath>

#include "runtime/random.h"

namespace densegate::runtime {
namespace {

// Uniform values with standard deviation `stddev` (cheaper than normal and
// just as good for keeping activations O(1)).
std::vector<float> RandomMatrix(Rng rng, int64_t n, double stddev) {
  std::vector<float> m(n);
  const double half_width = stddev * std::sqrt(3.0);
  for (float& x : m)
    x = static_cast<float>(rng.Uniform(-half_width, half_width));
  return m;
}

// Each tensor draws from its own stream, named by (layer, slot).
class WeightFactory {
 public:
  explicit WeightFactory(uint64_t seed) : seed_(seed) {}
  Rng Stream(int layer, int slot) const {
    return Rng::Stream(seed_, static_cast<uint64_t>(layer + 1) * 64 + slot);
  }

 private:
  uint64_t seed_;
};

void FillKda(const ModelConfig& c, const WeightFactory& f, int layer,
             double out_scale, KdaLayerWeights* w) {
  const int H = c.kda_heads, K = c.kda_head_k_dim, V = c.kda_head_v_dim;
  const int64_t width = 3LL * H * K + static_cast<int64_t>(H) * V + H;
  w->in_proj = RandomMatrix(f.Stream(layer, 1), c.hidden_size * width,
                            1.0 / std::sqrt(c.hidden_size));
  // Kimi Linear: A ~ U[1, 16], dt ~ logU[1e-3, 1e-1], dt_bias = softplus^-1.
  Rng gates = f.Stream(layer, 2);
  w->a_log.resize(H);
  for (float& a : w->a_log)
    a = static_cast<float>(std::log(gates.Uniform(1, 16)));
  w->dt_bias.resize(static_cast<int64_t>(H) * K);
  for (float& b : w->dt_bias) {
    const double dt = std::exp(gates.Uniform(std::log(1e-3), std::log(1e-1)));
    b = static_cast<float>(std::log(std::expm1(dt)));
  }
  w->out_proj = RandomMatrix(f.Stream(layer, 3),
                             static_cast<int64_t>(H) * V * c.hidden_size,
                             out_scale / std::sqrt(H * V));
}

void FillAttention(const ModelConfig& c, const WeightFactory& f, int layer,
                   double out_scale, AttentionLayerWeights* w) {
  const int64_t q = static_cast<int64_t>(c.attn_heads) * c.attn_head_dim;
  const int64_t kv = static_cast<int64_t>(c.attn_kv_heads) * c.attn_head_dim;
  w->qkv_proj = RandomMatrix(f.Stream(layer, 1), c.hidden_size * (q + 2 * kv),
                             1.0 / std::sqrt(c.hidden_size));
  w->out_proj = RandomMatrix(f.Stream(layer, 3), q * c.hidden_size,
                             out_scale / std::sqrt(static_cast<double>(q)));
}

}  // namespace

int64_t ModelWeights::NumParameters() const {
  int64_t n = embedding.size() + final_norm.size() + lm_head.size();
  for (const LayerWeights& l : layers) {
    n += l.mixer_norm.size() + l.mlp_norm.size() + l.gate_up.size() +
         l.down.size() + l.kda.in_proj.size() + l.kda.a_log.size() +
         l.kda.dt_bias.size() + l.kda.out_proj.size() + l.attn.qkv_proj.size() +
         l.attn.out_proj.size();
  }
  return n;
}

ModelWeights GenerateWeights(const ModelConfig& c) {
  const WeightFactory f(c.seed);
  const int64_t hidden = c.hidden_size;
  const int64_t inter = c.mlp_intermediate_size;
  // The token embedding is small next to what the mixers (KDA, attention)
  // add, so the context decides the next token. With a dominant embedding,
  // greedy decoding of a random model is nearly a function of the last
  // token alone and falls into short cycles.
  constexpr double kEmbeddingStddev = 0.15;
  constexpr double kKdaOutScale = 1.0;
  // The few attention layers add less than the KDA layers. At 1.0 the
  // random model leans on its attention layer so much that an fp8 e4m3 KV
  // cache flips ~1.5% of greedy tokens (0.5% at 0.25).
  constexpr double kAttentionOutScale = 0.25;
  // Keeps the residual stream's variance bounded as MLPs add to it.
  const double mlp_scale = 1.0 / std::sqrt(2.0 * c.num_layers());
  ModelWeights w;
  w.embedding =
      RandomMatrix(f.Stream(-1, 0), c.vocab_size * hidden, kEmbeddingStddev);
  int kda_index = 0, attn_index = 0;
  for (int l = 0; l < c.num_layers(); ++l) {
    LayerWeights lw;
    lw.type = c.layers[l];
    lw.mixer_norm.assign(hidden, 1.0f);
    lw.mlp_norm.assign(hidden, 1.0f);
    if (lw.type == LayerType::kKda) {
      lw.type_index = kda_index++;
      FillKda(c, f, l, kKdaOutScale, &lw.kda);
    } else {
      lw.type_index = attn_index++;
      FillAttention(c, f, l, kAttentionOutScale, &lw.attn);
    }
    lw.gate_up = RandomMatrix(f.Stream(l, 4), hidden * 2 * inter,
                              1.0 / std::sqrt(static_cast<double>(hidden)));
    lw.down = RandomMatrix(f.Stream(l, 5), inter * hidden,
                           mlp_scale / std::sqrt(static_cast<double>(inter)));
    w.layers.push_back(std::move(lw));
  }
  w.final_norm.assign(hidden, 1.0f);
  w.lm_head = RandomMatrix(f.Stream(-1, 1), hidden * c.vocab_size,
                           1.0 / std::sqrt(static_cast<double>(hidden)));
  return w;
}

}  // namespace densegate::runtime
