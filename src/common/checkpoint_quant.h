// How a checkpoint stores its projection weights, from config.json's "quantization_config": the
// FP8 layout that vLLM, llm-compressor and Hugging Face publish for Llama models. A shared value
// type (the planner reads it from config.json; the rank loaders follow it).
//
// Accepted (anything else is refused by parse_checkpoint_quant with the field and allowed values):
//   quant_method "fp8" (AutoFP8 / transformers' FP8 config): activation_scheme "dynamic" or
//     "static", no weight_block_size (block-wise scales are refused), fmt "e4m3" if present;
//   quant_method "compressed-tensors" (llm-compressor), format "float-quantized": every config
//     group's weights {num_bits 8, type "float", symmetric, strategy "tensor" | "channel", no
//     group_size / block_structure}, input_activations null (weight-only) or {num_bits 8, type
//     "float", strategy "token" (dynamic) | "tensor" (dynamic or static)}, no kv_cache_scheme;
//   quant_method "fbgemm_fp8" (per-row scales, dynamic activations; every projection fp8).
// Each q/k/v/o/gate/up/down_proj.weight [out, in] is then F8_E4M3 with a weight_scale beside it
// (rank/fp8_checkpoint.h checks the tensors); embeddings, norms and lm_head stay 16-bit.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace llama2 {

struct CheckpointQuant {
  bool fp8 = false;                 // projections stored as F8_E4M3 with weight_scale tensors
  std::string method;               // "fp8" | "compressed-tensors" (empty when !fp8)
  bool static_activations = false;  // the file carries input_scale tensors; the engine ignores
                                    // them and quantizes activations per token at run time
  // "fp8 e4m3 (compressed-tensors)", "fp8 e4m3 (fp8, static activation scales)"; "" when !fp8.
  std::string describe() const;
};

// The "quantization_config" of a config.json object (absent or null: not quantized). Error naming
// `source`, the field and the allowed values for a scheme the engine cannot read.
CheckpointQuant parse_checkpoint_quant(const nlohmann::json& config, const std::string& source);

}  // namespace llama2
