#include "common/meta_params.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/check.h"

namespace llama2 {
namespace {

using nlohmann::json;

// A positive integer params.json key (required) or its fallback.
int positive_int(const json& j, const char* key, const std::string& src, int fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback > 0) return fallback;
    throw Error(src + ": missing required key \"" + key + "\"");
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1LL << 30)) {
    throw Error(src + ": \"" + key + "\" must be a positive integer (got " + it->dump() + ")");
  }
  return static_cast<int>(it->get<int64_t>());
}

double number(const json& j, const char* key, const std::string& src, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() > 0)) {
    throw Error(src + ": \"" + key + "\" must be a positive number (got " + it->dump() + ")");
  }
  return it->get<double>();
}

}  // namespace

int meta_intermediate_size(int dim, int multiple_of, double ffn_dim_multiplier) {
  int64_t hidden = 8 * static_cast<int64_t>(dim) / 3;  // int(2 * (4 * dim) / 3)
  if (ffn_dim_multiplier > 0) {
    hidden = static_cast<int64_t>(ffn_dim_multiplier * static_cast<double>(hidden));
  }
  return static_cast<int>(multiple_of * ((hidden + multiple_of - 1) / multiple_of));
}

ModelConfig parse_meta_params(const json& params, const std::string& src,
                              const SentencePieceInfo& tokenizer) {
  if (!params.is_object()) throw Error(src + ": expected a JSON object");
  if (auto it = params.find("use_scaled_rope"); it != params.end() && *it == true) {
    throw Error(src +
                ": \"use_scaled_rope\": true is Llama 3.1's RoPE scaling (rope_type "
                "\"llama3\"), which is not supported (Llama-2 folders have plain RoPE)");
  }
  const int dim = positive_int(params, "dim", src, 0);
  const int heads = positive_int(params, "n_heads", src, 0);
  const int multiple_of = positive_int(params, "multiple_of", src, 256);
  const double ffn_mult = number(params, "ffn_dim_multiplier", src, 0.0);
  const double theta = number(params, "rope_theta", src, 10000.0);
  int vocab = tokenizer.pieces;
  if (auto it = params.find("vocab_size"); it != params.end() && *it != -1) {
    vocab = positive_int(params, "vocab_size", src, 0);  // CodeLlama states its 32016
  }
  // The Hugging Face config.json the conversion script would write; parse_model_config then
  // applies every check the engine makes of any model.
  json hf = {{"hidden_size", dim},
             {"intermediate_size", meta_intermediate_size(dim, multiple_of, ffn_mult)},
             {"num_hidden_layers", positive_int(params, "n_layers", src, 0)},
             {"num_attention_heads", heads},
             {"num_key_value_heads", positive_int(params, "n_kv_heads", src, heads)},
             {"vocab_size", vocab},
             {"rms_norm_eps", number(params, "norm_eps", src, 1e-5)},
             {"rope_theta", theta},
             {"max_position_embeddings", theta > 10000.0 ? 16384 : 4096},
             {"bos_token_id", tokenizer.bos_id},
             {"eos_token_id", tokenizer.eos_id},
             {"tie_word_embeddings", false},
             {"torch_dtype", "bfloat16"}};
  ModelConfig c = parse_model_config(hf, src + " (as Hugging Face's config.json)");
  c.layout = CheckpointLayout::kMeta;
  return c;
}

}  // namespace llama2
