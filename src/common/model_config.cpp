#include "common/model_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"
#include "common/meta_params.h"
#include "common/sentencepiece_model.h"

namespace llama2 {
namespace {

using nlohmann::json;

int get_int(const json& j, const char* key, const std::string& src, bool required, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw Error(src + ": missing required key \"" + key + "\"");
    return fallback;
  }
  if (!it->is_number_integer()) {
    throw Error(src + ": \"" + key + "\" must be an integer (got " + it->dump() + ")");
  }
  const auto v = it->get<int64_t>();
  if (v < 0 || v > (1LL << 31) - 1) {
    throw Error(src + ": \"" + key + "\" out of range (got " + std::to_string(v) + ")");
  }
  return static_cast<int>(v);
}

double get_float(const json& j, const char* key, const std::string& src, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    throw Error(src + ": \"" + key + "\" must be a number (got " + it->dump() + ")");
  }
  return it->get<double>();
}

// bos/eos may be an int or (in some exported configs) a list; Llama-2 uses a single id.
int get_token_id(const json& j, const char* key, const std::string& src, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  const json& v = it->is_array() && !it->empty() ? it->front() : *it;
  if (!v.is_number_integer()) {
    throw Error(src + ": \"" + key + "\" must be an integer token id (got " + it->dump() + ")");
  }
  // Range-check before narrowing: 2^32 + 1 must not wrap around to a valid id.
  const auto id = v.get<int64_t>();
  if (id < 0 || id > (1LL << 31) - 1) {
    throw Error(src + ": \"" + key + "\" out of range (got " + v.dump() + ")");
  }
  return static_cast<int>(id);
}

// The scaling of one rope_scaling / rope_parameters object (absent or null: none).
RopeScaling parse_rope_scaling(const json& j, const char* key, const std::string& src) {
  auto rs = j.find(key);
  if (rs == j.end() || rs->is_null()) return {};
  const std::string where = src + ": " + key;
  if (!rs->is_object()) throw Error(where + " must be an object or null (got " + rs->dump() + ")");
  // No type named: plain RoPE only if nothing but the base is given (a bare "factor" scales).
  bool only_theta = true;
  for (const auto& item : rs->items()) only_theta = only_theta && item.key() == "rope_theta";
  const json type_json =
      rs->value("rope_type", rs->value("type", json(only_theta ? "default" : "?")));
  const std::string type = type_json.is_string() ? type_json.get<std::string>() : type_json.dump();
  RopeScaling r;
  if (type == "default") return r;
  if (type == "linear" || type == "dynamic") {
    r.type = type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kDynamic;
    auto f = rs->find("factor");
    if (f == rs->end() || !f->is_number() || !(f->get<double>() >= 1.0) ||
        f->get<double>() > 1024.0) {
      throw Error(where + " " + rs->dump() + ": \"factor\" must be a number in [1, 1024] for " +
                  type + " scaling");
    }
    r.factor = f->get<double>();
    return r;
  }
  const std::string name = type == "yarn"                       ? " (YaRN)"
                           : type == "llama3"                   ? " (Llama 3.1's scaling)"
                           : type == "longrope" || type == "su" ? " (LongRoPE)"
                                                                : "";
  throw Error(where + " " + rs->dump() + ": rope type \"" + type + "\"" + name +
              " is not supported (allowed: \"linear\", \"dynamic\", \"default\")");
}

// rope_scaling and rope_parameters (transformers >= 5 writes the type there); both may be given
// only if they agree.
RopeScaling parse_rope(const json& j, const std::string& src) {
  const RopeScaling a = parse_rope_scaling(j, "rope_scaling", src);
  const RopeScaling b = parse_rope_scaling(j, "rope_parameters", src);
  if (a.type != RopeScalingType::kNone && b.type != RopeScalingType::kNone &&
      (a.type != b.type || a.factor != b.factor)) {
    throw Error(src + ": rope_scaling " + j.at("rope_scaling").dump() + " and rope_parameters " +
                j.at("rope_parameters").dump() + " disagree");
  }
  return a.type != RopeScalingType::kNone ? a : b;
}

}  // namespace

ModelConfig parse_model_config(const json& j, const std::string& src) {
  if (!j.is_object()) throw Error(src + ": expected a JSON object");
  ModelConfig c;
  c.hidden_size = get_int(j, "hidden_size", src, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", src, true, 0);
  c.num_layers = get_int(j, "num_hidden_layers", src, true, 0);
  c.num_heads = get_int(j, "num_attention_heads", src, true, 0);
  c.num_kv_heads = get_int(j, "num_key_value_heads", src, false, c.num_heads);
  c.vocab_size = get_int(j, "vocab_size", src, true, 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", src, false, 4096);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", src, 1e-5);
  // transformers >= 5 may nest theta in rope_parameters; older configs have a top-level rope_theta.
  c.rope_theta = get_float(j, "rope_theta", src, 10000.0);
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    c.rope_theta = get_float(*rp, "rope_theta", src + " rope_parameters", c.rope_theta);
  }
  c.rope_scaling = parse_rope(j, src);
  if (auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw Error(src + ": \"tie_word_embeddings\" must be true or false");
    c.tie_word_embeddings = it->get<bool>();
  }
  c.bos_token_id = get_token_id(j, "bos_token_id", src, 1);
  c.eos_token_id = get_token_id(j, "eos_token_id", src, 2);
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string()) {
    c.torch_dtype = it->get<std::string>();
  } else if (auto d = j.find("dtype"); d != j.end() && d->is_string()) {
    c.torch_dtype = d->get<std::string>();
  }
  c.quant = parse_checkpoint_quant(j, src);
  if (auto it = j.find("hidden_act"); it != j.end() && it->is_string() && *it != "silu") {
    throw Error(src + ": hidden_act " + it->dump() + " is not supported (allowed: \"silu\")");
  }

  auto positive = [&](int v, const char* key) {
    if (v <= 0) throw Error(src + ": \"" + key + "\" must be > 0 (got " + std::to_string(v) + ")");
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_position_embeddings, "max_position_embeddings");
  if (c.hidden_size % c.num_heads != 0) {
    throw Error(src + ": hidden_size (" + std::to_string(c.hidden_size) +
                ") must be divisible by num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  if (c.head_dim() % 2 != 0) {
    throw Error(src + ": head dimension " + std::to_string(c.head_dim()) +
                " must be even for rotary embeddings");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    throw Error(src + ": num_attention_heads (" + std::to_string(c.num_heads) +
                ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ")");
  }
  if (c.rope_scaling.type == RopeScalingType::kDynamic) {
    // The context the engine admits: NTK scaling's target length (positions are int32).
    c.rope_scaling.original_max_position_embeddings = c.max_position_embeddings;
    const double longest = c.max_position_embeddings * c.rope_scaling.factor;
    if (longest > (1 << 28)) {
      throw Error(src + ": max_position_embeddings x rope_scaling factor (" +
                  std::to_string(longest) + ") is above 2^28 tokens");
    }
    c.max_position_embeddings = static_cast<int>(longest);
  }
  if (!(c.rms_norm_eps > 0.0)) throw Error(src + ": \"rms_norm_eps\" must be > 0");
  if (!(c.rope_theta > 0.0)) throw Error(src + ": \"rope_theta\" must be > 0");
  for (auto [id, key] :
       {std::pair{c.bos_token_id, "bos_token_id"}, {c.eos_token_id, "eos_token_id"}}) {
    if (id < 0 || id >= c.vocab_size) {
      throw Error(src + ": \"" + key + "\" " + std::to_string(id) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
    }
  }
  return c;
}

namespace {

json read_config_json(const std::string& path, const char* hint) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open (" + hint + ")");
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  return j;
}

}  // namespace

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  const std::string meta = model_dir + "/params.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && std::filesystem::exists(meta, ec)) {
    const json params = read_config_json(meta, "Meta's params.json");
    return parse_meta_params(params, meta, read_sentencepiece_info(model_dir + "/tokenizer.model"));
  }
  ModelConfig c = parse_model_config(
      read_config_json(path,
                       "is --model a Hugging Face Llama directory, or Meta's folder with "
                       "params.json?"),
      path);
  // AutoGPTQ writes its settings to quantize_config.json, beside or instead of config.json's
  // quantization_config (which wins when both exist).
  const std::string gptq = model_dir + "/quantize_config.json";
  if (c.quant.method.empty() && std::filesystem::exists(gptq, ec)) {
    c.quant = parse_quantize_config(read_config_json(gptq, "AutoGPTQ's settings"), gptq);
  }
  return c;
}

nlohmann::json rope_scaling_to_json(const RopeScaling& r) {
  switch (r.type) {
    case RopeScalingType::kNone:
      return nullptr;
    case RopeScalingType::kLinear:
      return json{{"rope_type", "linear"}, {"type", "linear"}, {"factor", r.factor}};
    case RopeScalingType::kDynamic:
      return json{{"rope_type", "dynamic"}, {"type", "dynamic"}, {"factor", r.factor}};
  }
  return nullptr;
}

nlohmann::json model_config_to_json(const ModelConfig& c) {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", c.hidden_size},
              {"intermediate_size", c.intermediate_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"vocab_size", c.vocab_size},
              {"rms_norm_eps", c.rms_norm_eps},
              {"rope_theta", c.rope_theta},
              {"rope_scaling", rope_scaling_to_json(c.rope_scaling)},
              {"max_position_embeddings", c.rope_scaling.type == RopeScalingType::kDynamic
                                              ? c.rope_scaling.original_max_position_embeddings
                                              : c.max_position_embeddings},
              {"tie_word_embeddings", c.tie_word_embeddings},
              {"bos_token_id", c.bos_token_id},
              {"eos_token_id", c.eos_token_id},
              {"hidden_act", "silu"},
              {"attention_bias", false},
              {"mlp_bias", false},
              {"pretraining_tp", 1},
              {"torch_dtype", c.torch_dtype}};
}

}  // namespace llama2
