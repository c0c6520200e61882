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

// config.json's "rope_scaling" (transformers >= 5: "rope_parameters"), with Hugging Face's meaning
// (transformers' modeling_rope_utils; common/rope_frequencies.h computes the frequencies):
//   kLinear:  every inverse frequency divided by `factor` (positions stretched x factor);
//   kDynamic: dynamic NTK: for a sequence longer than original_max_position_embeddings the base
//             becomes theta * (factor * len / original - (factor - 1))^(d / (d - 2)), len the
//             sequence's length at that step; unchanged up to the original length.
// YaRN, Llama 3.1's "llama3" and longrope are refused by name.
enum class RopeScalingType { kNone, kLinear, kDynamic };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // kDynamic: config.json's max_position_embeddings, the length past which the base grows. The
  // engine's context limit (ModelConfig::max_position_embeddings) is then this x factor, the
  // length NTK scaling is meant to reach (as vLLM derives it).
  int original_max_position_embeddings = 0;
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
  RopeScaling rope_scaling;
  int max_position_embeddings = 0;  // the longest sequence the engine admits
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
// {"rope_type": .., "type": .., "factor": ..} (both spellings of the type, for every transformers
// version), or null without scaling.
nlohmann::json rope_scaling_to_json(const RopeScaling& r);

}  // namespace llama2
