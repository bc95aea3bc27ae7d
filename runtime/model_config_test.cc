#include "runtime/model_config.h"

#include <string>

#include "gtest/gtest.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

// A valid config; tests break one field at a time.
std::string Valid() {
  return R"({
    "name": "t", "vocab_size": 100, "hidden_size": 32, "num_layers": 4,
    "layer_types": ["kda", "kda", "kda", "attention"],
    "kda": {"num_heads": 2, "head_k_dim": 16, "head_v_dim": 8},
    "attention": {"num_heads": 4, "num_kv_heads": 2, "head_dim": 8},
    "mlp": {"intermediate_size": 64},
    "max_context": 128, "seed": 1})";
}

std::string Replace(std::string text, const std::string& from,
                    const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// Parsing fails and the message names `field`.
void ExpectError(const std::string& json, const std::string& field) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(json);
  ASSERT_FALSE(c.ok()) << "accepted: " << json;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(c.status().message()).find(field), std::string::npos)
      << "message does not name " << field << ": " << c.status();
}

TEST(ModelConfigTest, ParsesAValidConfig) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(Valid());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_layers(), 4);
  EXPECT_EQ(c->num_kda_layers(), 3);
  EXPECT_EQ(c->num_attention_layers(), 1);
  EXPECT_EQ(c->kda_head_k_dim, 16);
  EXPECT_EQ(c->kda_head_v_dim, 8);
  EXPECT_EQ(c->attn_kv_heads, 2);
  EXPECT_EQ(c->kv_block_size, 16);  // Default.
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
}

TEST(ModelConfigTest, ShippedConfigsLoad) {
  for (const char* path :
       {"runtime/configs/tiny.json", "runtime/configs/bench.json"}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(path);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_GT(c->num_kda_layers(), 0) << path;
    EXPECT_GT(c->num_attention_layers(), 0) << path;
    // The Kimi-Linear ratio: 3 KDA layers per attention layer.
    EXPECT_EQ(c->num_kda_layers(), 3 * c->num_attention_layers()) << path;
  }
}

TEST(ModelConfigTest, InconsistentShapesNameTheField) {
  ExpectError(Replace(Valid(), "\"num_layers\": 4", "\"num_layers\": 5"),
              "layer_types");
  ExpectError(Replace(Valid(), "\"num_kv_heads\": 2", "\"num_kv_heads\": 3"),
              "attention.num_kv_heads");
  ExpectError(Replace(Valid(), "\"head_dim\": 8", "\"head_dim\": 7"),
              "attention.head_dim");
  ExpectError(Replace(Valid(), "\"head_k_dim\": 16", "\"head_k_dim\": 300"),
              "kda.head_k_dim");
  ExpectError(Replace(Valid(), "\"vocab_size\": 100", "\"vocab_size\": 0"),
              "vocab_size");
  ExpectError(Replace(Valid(), "\"max_context\": 128", "\"max_context\": -1"),
              "max_context");
}

TEST(ModelConfigTest, BadFieldsNameTheField) {
  ExpectError(Replace(Valid(), "\"hidden_size\": 32", "\"hiden_size\": 32"),
              "hiden_size");
  ExpectError(
      Replace(Valid(), "\"hidden_size\": 32", "\"hidden_size\": \"32\""),
      "hidden_size");
  ExpectError(Replace(Valid(), "\"kda\", \"kda\", \"kda\"",
                      "\"kda\", \"mamba\", \"kda\""),
              "layer_types[1]");
  ExpectError(Replace(Valid(), "\"mlp\": {\"intermediate_size\": 64},", ""),
              "mlp");
  ExpectError(
      Replace(Valid(), "\"head_v_dim\": 8", "\"head_v_dim\": 8, \"x\": 1"),
      "kda.x");
}

TEST(ModelConfigTest, NotJsonAndMissingFile) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig("{not json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("not valid JSON"),
            std::string::npos);
  c = LoadModelConfig("runtime/configs/missing.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(c.status().message()).find("missing.json"),
            std::string::npos);
}

}  // namespace
}  // namespace densegate::runtime
