// The model hyper-parameters read from a Hugging Face Llama `config.json`.
// A shared value type: included by both the rank and the coordinator side.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/checkpoint_quant.h"

namespace llama2 {

// How the checkpoint names and lays out its tensors (rank/weight_store.h reads both).
enum class CheckpointLayout {
  kHuggingFace,  // config.json; model*.safetensors or pytorch_model*.bin with HF tensor names
  kMeta,         // params.json; consolidated.NN.pth, Meta's model-parallel shards
                 // (common/meta_params.h, rank/meta_checkpoint.h)
};

struct ModelConfig {
  int hidden_size = 0;        // H
  int intermediate_size = 0;  // I (SwiGLU inner width)
  int num_layers = 0;         // L
  int num_heads = 0;          // query heads
  int num_kv_heads = 0;       // key/value heads (== num_heads for MHA, fewer for GQA)
  int vocab_size = 0;         // V
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  int eos_token_id = 2;
  std::string torch_dtype = "float32";  // informational; tensors carry their own dtype
  CheckpointQuant quant;  // "quantization_config": fp8 projections (checkpoint_quant.h) or none
  CheckpointLayout layout = CheckpointLayout::kHuggingFace;

  int head_dim() const { return hidden_size / num_heads; }
};

// Parses and validates a config.json object; `source` names the file in error messages.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);
// Reads DIR/config.json, or for Meta's folder (no config.json) DIR/params.json with
// DIR/tokenizer.model (common/meta_params.h); Error naming the file on any defect.
ModelConfig load_model_config(const std::string& model_dir);
nlohmann::json model_config_to_json(const ModelConfig& c);

}  // namespace llama2
