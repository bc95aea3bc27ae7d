#include "runtime/model_config.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/kda/kda_types.h"
#include "nlohmann/json.hpp"
#include "runtime/status_macros.h"

namespace densegate::runtime {
namespace {

using Json = nlohmann::json;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("model config field '", field, "': ", what));
}

// Reads the members of one JSON object that may hold only `known` keys.
class ObjectReader {
 public:
  ObjectReader(const Json& object, std::string prefix,
               std::vector<std::string> known)
      : object_(object), prefix_(std::move(prefix)), known_(std::move(known)) {}

  // A typo is reported as itself, before any "missing field" it causes.
  absl::Status RejectUnknown() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
        return FieldError(Path(it.key()),
                          absl::StrCat("unknown field (check the spelling); "
                                       "known fields: ",
                                       absl::StrJoin(known_, ", ")));
      }
    }
    return absl::OkStatus();
  }

  std::string Path(absl::string_view key) const {
    return prefix_.empty() ? std::string(key) : absl::StrCat(prefix_, ".", key);
  }

  // Returns the member, or nullptr (with *status set when required).
  const Json* Get(absl::string_view key, bool required, absl::Status* status) {
    auto it = object_.find(std::string(key));
    if (it == object_.end()) {
      if (required) *status = FieldError(Path(key), "is required but missing");
      return nullptr;
    }
    return &*it;
  }

  // Reads `key` into *out if present (and it must be when `required`);
  // `has_type` checks the JSON type, `expected` names it in the error.
  template <typename T>
  absl::Status Read(absl::string_view key, bool required,
                    bool (Json::*has_type)() const noexcept,
                    absl::string_view expected, T* out) {
    absl::Status status;
    const Json* v = Get(key, required, &status);
    if (v == nullptr) return status;
    if (!(v->*has_type)()) {
      return FieldError(Path(key), absl::StrCat("expected ", expected,
                                                ", found ", v->dump()));
    }
    *out = v->get<T>();
    return absl::OkStatus();
  }

  absl::Status Int(absl::string_view key, bool required, int* out) {
    int64_t x = *out;
    RT_RETURN_IF_ERROR(
        Read(key, required, &Json::is_number_integer, "an integer", &x));
    if (x < std::numeric_limits<int>::min() ||
        x > std::numeric_limits<int>::max()) {
      return FieldError(Path(key), absl::StrCat("value ", x, " out of range"));
    }
    *out = static_cast<int>(x);
    return absl::OkStatus();
  }
  absl::Status Uint64(absl::string_view key, bool required, uint64_t* out) {
    return Read(key, required, &Json::is_number_unsigned,
                "a non-negative integer", out);
  }
  absl::Status Double(absl::string_view key, bool required, double* out) {
    return Read(key, required, &Json::is_number, "a number", out);
  }
  absl::Status String(absl::string_view key, bool required, std::string* out) {
    return Read(key, required, &Json::is_string, "a string", out);
  }

  // A nested object, or nullptr when it is absent and not required.
  absl::StatusOr<const Json*> Object(absl::string_view key, bool required) {
    absl::Status status;
    const Json* v = Get(key, required, &status);
    if (v == nullptr) {
      if (!status.ok()) return status;
      return nullptr;
    }
    if (!v->is_object()) {
      return FieldError(Path(key),
                        absl::StrCat("expected an object, found ", v->dump()));
    }
    return v;
  }

 private:
  const Json& object_;
  std::string prefix_;
  std::vector<std::string> known_;
};

absl::Status CheckRange(absl::string_view field, int value, int lo, int hi) {
  if (value < lo || value > hi) {
    return FieldError(
        field, absl::StrFormat("must be in [%d, %d], found %d", lo, hi, value));
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerType> ParseLayerType(const Json& v, int index) {
  const std::string field = absl::StrCat("layer_types[", index, "]");
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "kda") return LayerType::kKda;
    if (s == "attention") return LayerType::kAttention;
  }
  return FieldError(field, absl::StrCat("expected \"kda\" or \"attention\", "
                                        "found ",
                                        v.dump()));
}

absl::Status ParseInto(const Json& root, ModelConfig* c) {
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        "model config: the top level must be a JSON object");
  }
  ObjectReader r(root, "",
                 {"name", "vocab_size", "hidden_size", "num_layers",
                  "layer_types", "kda", "attention", "mlp", "rms_norm_eps",
                  "max_context", "kv_block_size", "seed"});
  RT_RETURN_IF_ERROR(r.RejectUnknown());
  RT_RETURN_IF_ERROR(r.String("name", /*required=*/false, &c->name));
  RT_RETURN_IF_ERROR(r.Int("vocab_size", true, &c->vocab_size));
  RT_RETURN_IF_ERROR(r.Int("hidden_size", true, &c->hidden_size));
  int num_layers = 0;
  RT_RETURN_IF_ERROR(r.Int("num_layers", true, &num_layers));
  absl::Status status;
  const Json* types = r.Get("layer_types", true, &status);
  RT_RETURN_IF_ERROR(status);
  if (!types->is_array()) {
    return FieldError("layer_types",
                      absl::StrCat("expected an array, found ", types->dump()));
  }
  for (size_t i = 0; i < types->size(); ++i) {
    absl::StatusOr<LayerType> t = ParseLayerType((*types)[i], i);
    if (!t.ok()) return t.status();
    c->layers.push_back(*t);
  }
  if (num_layers != c->num_layers()) {
    return FieldError("layer_types",
                      absl::StrFormat("has %d entries but num_layers is %d",
                                      c->num_layers(), num_layers));
  }

  absl::StatusOr<const Json*> kda = r.Object("kda", c->num_kda_layers() > 0);
  if (!kda.ok()) return kda.status();
  if (*kda != nullptr) {
    ObjectReader k(**kda, "kda", {"num_heads", "head_k_dim", "head_v_dim"});
    RT_RETURN_IF_ERROR(k.RejectUnknown());
    RT_RETURN_IF_ERROR(k.Int("num_heads", true, &c->kda_heads));
    RT_RETURN_IF_ERROR(k.Int("head_k_dim", true, &c->kda_head_k_dim));
    RT_RETURN_IF_ERROR(k.Int("head_v_dim", true, &c->kda_head_v_dim));
  }
  absl::StatusOr<const Json*> attn =
      r.Object("attention", c->num_attention_layers() > 0);
  if (!attn.ok()) return attn.status();
  if (*attn != nullptr) {
    ObjectReader a(**attn, "attention",
                   {"num_heads", "num_kv_heads", "head_dim", "rope_theta"});
    RT_RETURN_IF_ERROR(a.RejectUnknown());
    RT_RETURN_IF_ERROR(a.Int("num_heads", true, &c->attn_heads));
    RT_RETURN_IF_ERROR(a.Int("num_kv_heads", true, &c->attn_kv_heads));
    RT_RETURN_IF_ERROR(a.Int("head_dim", true, &c->attn_head_dim));
    RT_RETURN_IF_ERROR(a.Double("rope_theta", false, &c->rope_theta));
  }
  absl::StatusOr<const Json*> mlp = r.Object("mlp", true);
  if (!mlp.ok()) return mlp.status();
  ObjectReader m(**mlp, "mlp", {"intermediate_size"});
  RT_RETURN_IF_ERROR(m.RejectUnknown());
  RT_RETURN_IF_ERROR(
      m.Int("intermediate_size", true, &c->mlp_intermediate_size));

  RT_RETURN_IF_ERROR(r.Double("rms_norm_eps", false, &c->rms_norm_eps));
  RT_RETURN_IF_ERROR(r.Int("max_context", true, &c->max_context));
  RT_RETURN_IF_ERROR(r.Int("kv_block_size", false, &c->kv_block_size));
  return r.Uint64("seed", true, &c->seed);
}

}  // namespace

int ModelConfig::num_kda_layers() const {
  return static_cast<int>(
      std::count(layers.begin(), layers.end(), LayerType::kKda));
}

int ModelConfig::num_attention_layers() const {
  return num_layers() - num_kda_layers();
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  constexpr int kBig = 1 << 20;
  RT_RETURN_IF_ERROR(CheckRange("vocab_size", c.vocab_size, 2, 1 << 24));
  RT_RETURN_IF_ERROR(CheckRange("hidden_size", c.hidden_size, 1, kBig));
  if (c.layers.empty()) {
    return FieldError("layer_types", "must name at least one layer");
  }
  if (c.num_kda_layers() > 0) {
    RT_RETURN_IF_ERROR(CheckRange("kda.num_heads", c.kda_heads, 1, 4096));
    // The KDA kernels size their scratch by kKdaMaxDim.
    RT_RETURN_IF_ERROR(CheckRange("kda.head_k_dim", c.kda_head_k_dim, 1,
                                  kernels::kda::kKdaMaxDim));
    RT_RETURN_IF_ERROR(CheckRange("kda.head_v_dim", c.kda_head_v_dim, 1,
                                  kernels::kda::kKdaMaxDim));
  }
  if (c.num_attention_layers() > 0) {
    RT_RETURN_IF_ERROR(
        CheckRange("attention.num_heads", c.attn_heads, 1, 4096));
    RT_RETURN_IF_ERROR(
        CheckRange("attention.num_kv_heads", c.attn_kv_heads, 1, c.attn_heads));
    if (c.attn_heads % c.attn_kv_heads != 0) {
      return FieldError(
          "attention.num_kv_heads",
          absl::StrFormat("(%d) must divide attention.num_heads (%d)",
                          c.attn_kv_heads, c.attn_heads));
    }
    RT_RETURN_IF_ERROR(
        CheckRange("attention.head_dim", c.attn_head_dim, 2, 1024));
    if (c.attn_head_dim % 2 != 0) {
      return FieldError(
          "attention.head_dim",
          absl::StrFormat("must be even for RoPE, found %d", c.attn_head_dim));
    }
    if (!(c.rope_theta > 1.0)) {
      return FieldError("attention.rope_theta",
                        absl::StrFormat("must be > 1, found %g", c.rope_theta));
    }
  }
  RT_RETURN_IF_ERROR(
      CheckRange("mlp.intermediate_size", c.mlp_intermediate_size, 1, kBig));
  if (!(c.rms_norm_eps > 0.0 && c.rms_norm_eps < 1.0)) {
    return FieldError(
        "rms_norm_eps",
        absl::StrFormat("must be in (0, 1), found %g", c.rms_norm_eps));
  }
  RT_RETURN_IF_ERROR(CheckRange("max_context", c.max_context, 2, 1 << 24));
  RT_RETURN_IF_ERROR(CheckRange("kv_block_size", c.kv_block_size, 1, 4096));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text) {
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config is not valid JSON: ", e.what()));
  }
  ModelConfig config;
  RT_RETURN_IF_ERROR(ParseInto(root, &config));
  RT_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read model config file '", path,
                     "' (pass --config with a path to a JSON config, e.g. "
                     "runtime/configs/tiny.json)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace densegate::runtime
