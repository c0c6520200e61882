#include "rank/weight_layout.h"

#include "common/check.h"

namespace llama2 {
namespace {

TensorSlice rows(std::string name, int64_t n_rows, int64_t n_cols, int64_t r0, int64_t r1) {
  return {std::move(name), {n_rows, n_cols}, r0, r1, 0, n_cols};
}
TensorSlice cols(std::string name, int64_t n_rows, int64_t n_cols, int64_t c0, int64_t c1) {
  return {std::move(name), {n_rows, n_cols}, 0, n_rows, c0, c1};
}
TensorSlice vec(std::string name, int64_t n) {
  return {std::move(name), {n}, 0, 1, 0, n};
}

std::string layer_name(int layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

}  // namespace

TensorSlice layer_slice(const ModelConfig& c, const ShardPlan& s, int layer, LayerTensor which) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim();
  const int64_t q_rows = static_cast<int64_t>(c.num_heads) * d;
  const int64_t kv_rows = static_cast<int64_t>(c.num_kv_heads) * d;
  const int64_t q0 = s.head_begin * d, q1 = q0 + s.num_heads * d;
  const int64_t k0 = s.kv_head_begin * d, k1 = k0 + s.num_kv_heads * d;
  const int64_t f0 = s.ffn_begin, f1 = f0 + s.ffn_size;
  switch (which) {
    case LayerTensor::kAttnNorm:
      return vec(layer_name(layer, "input_layernorm.weight"), H);
    case LayerTensor::kWq:
      return rows(layer_name(layer, "self_attn.q_proj.weight"), q_rows, H, q0, q1);
    case LayerTensor::kWk:
      return rows(layer_name(layer, "self_attn.k_proj.weight"), kv_rows, H, k0, k1);
    case LayerTensor::kWv:
      return rows(layer_name(layer, "self_attn.v_proj.weight"), kv_rows, H, k0, k1);
    case LayerTensor::kWo:
      return cols(layer_name(layer, "self_attn.o_proj.weight"), H, q_rows, q0, q1);
    case LayerTensor::kMlpNorm:
      return vec(layer_name(layer, "post_attention_layernorm.weight"), H);
    case LayerTensor::kWgate:
      return rows(layer_name(layer, "mlp.gate_proj.weight"), I, H, f0, f1);
    case LayerTensor::kWup:
      return rows(layer_name(layer, "mlp.up_proj.weight"), I, H, f0, f1);
    case LayerTensor::kWdown:
      return cols(layer_name(layer, "mlp.down_proj.weight"), H, I, f0, f1);
    case LayerTensor::kCount:
      break;
  }
  LLAMA2_CHECK(false && "unknown layer tensor");
  return {};
}

TensorSlice embedding_slice(const ModelConfig& c, const ShardPlan& s) {
  return rows("model.embed_tokens.weight", c.vocab_size, c.hidden_size, s.vocab_begin,
              s.vocab_begin + s.vocab_size);
}

TensorSlice lm_head_slice(const ModelConfig& c, const ShardPlan& s) {
  TensorSlice t = embedding_slice(c, s);
  if (!c.tie_word_embeddings) t.name = "lm_head.weight";
  return t;
}

TensorSlice final_norm_slice(const ModelConfig& c) {
  return vec("model.norm.weight", c.hidden_size);
}

std::vector<TensorSlice> all_full_tensors(const ModelConfig& c) {
  // A one-rank plan owns every full tensor.
  const ShardPlan whole = make_shard_plan(c, 1, 0);
  std::vector<TensorSlice> out{embedding_slice(c, whole), final_norm_slice(c)};
  if (!c.tie_word_embeddings) out.push_back(lm_head_slice(c, whole));
  for (int l = 0; l < c.num_layers; ++l) {
    for (int w = 0; w < static_cast<int>(LayerTensor::kCount); ++w) {
      out.push_back(layer_slice(c, whole, l, static_cast<LayerTensor>(w)));
    }
  }
  return out;
}

}  // namespace llama2
