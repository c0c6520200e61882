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
//   quant_method "fbgemm_fp8" (per-row scales, dynamic activations; every projection fp8);
//   quant_method "awq": bits 4, version "gemm", zero_point true, group_size > 0;
//   quant_method "gptq": bits 4, group_size > 0 or -1, sym, desc_act, checkpoint_format "gptq"
//     (zeros stored minus one) or "gptq_v2".
// Each q/k/v/o/gate/up/down_proj.weight [out, in] is then F8_E4M3 with a weight_scale beside it
// (rank/fp8_checkpoint.h checks the tensors); embeddings, norms and lm_head stay 16-bit.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace llama2 {

// 4-bit checkpoints (rank/int4_checkpoint.h has the tensor layouts), dequantized at load.
enum class Int4Format {
  kNone,
  kAwq,   // AutoAWQ "gemm": qweight [in, out/8], qzeros [groups, out/8], scales [groups, out]
  kGptq,  // AutoGPTQ / GPTQModel: qweight [in/8, out], qzeros, scales, g_idx [in]
};

struct CheckpointQuant {
  bool fp8 = false;                 // projections stored as F8_E4M3 with weight_scale tensors
  std::string method;               // "fp8" | "compressed-tensors" | "awq" | "gptq" ("": none)
  bool static_activations = false;  // the file carries input_scale tensors; the engine ignores
                                    // them and quantizes activations per token at run time
  Int4Format int4 = Int4Format::kNone;
  int group_size = 0;     // int4: input rows per group; -1: one group over all input rows
  bool sym = false;       // GPTQ: symmetric (zero 8); AWQ always has zero points
  bool desc_act = false;  // GPTQ: rows belong to groups by g_idx (act order), not contiguously
  bool gptq_v2 = false;   // GPTQ checkpoint_format "gptq_v2": zeros as they are (v1: zero - 1)
  // "fp8 e4m3 (compressed-tensors)", "fp8 e4m3 (fp8, static activation scales)",
  // "4-bit AWQ (group 128)", "4-bit GPTQ (group 64, desc_act, gptq_v2)"; "" when none.
  std::string describe() const;
  // Whether a row's group is its index / group_size, so shards can be cut on group boundaries.
  bool int4_contiguous_groups() const { return int4 != Int4Format::kNone && !desc_act; }
  // Whether the CUDA 4-bit kernels take this packing as it is (repacked at load): contiguous
  // groups of a multiple of 64 input columns (kernels/gemv_w4.cuh, w4_shape_fits). Otherwise
  // (desc_act, one group per column, other sizes) cuda dequantizes it at load.
  bool int4_runs_packed() const {
    return int4_contiguous_groups() && group_size > 0 && group_size % 64 == 0;
  }
};

// The "quantization_config" of a config.json object (absent or null: not quantized). Error naming
// `source`, the field and the allowed values for a scheme the engine cannot read.
CheckpointQuant parse_checkpoint_quant(const nlohmann::json& config, const std::string& source);
// AutoGPTQ's quantize_config.json (beside or instead of config.json's block): its object.
CheckpointQuant parse_quantize_config(const nlohmann::json& q, const std::string& source);

}  // namespace llama2
