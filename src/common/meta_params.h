// Meta's own checkpoint folder (the download from Meta, before any conversion): params.json with
// the hyper-parameters, consolidated.NN.pth holding the model-parallel shards
// (rank/meta_checkpoint.h reads them) and the SentencePiece tokenizer.model.
//
// params.json, e.g. Llama-2-70B's:
//   {"dim": 8192, "multiple_of": 4096, "ffn_dim_multiplier": 1.3, "n_heads": 64,
//    "n_kv_heads": 8, "n_layers": 80, "norm_eps": 1e-05, "vocab_size": -1}
// gives the ModelConfig Hugging Face's conversion script (convert_llama_weights_to_hf.py) writes
// into config.json: the vocabulary size from tokenizer.model when vocab_size is -1, the
// intermediate size from multiple_of and ffn_dim_multiplier (meta_intermediate_size), rope_theta
// (CodeLlama: 1000000) with its default 10000, max_position_embeddings 4096, or 16384 when
// rope_theta is above 10000 (CodeLlama), as the script sets them (params.json has no context
// length), and BOS/EOS from the tokenizer. Meta's checkpoints are bf16, which the CUDA backend's
// --dtype auto takes.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/model_config.h"
#include "common/sentencepiece_model.h"

namespace llama2 {

// The SwiGLU width of Meta's model.py (FeedForward): hidden = int(2 * 4 * dim / 3), times
// ffn_dim_multiplier when given (> 0), rounded up to a multiple of multiple_of. 7B: 11008; 13B:
// 13824; 70B (multiple_of 4096, x1.3): 28672; CodeLlama-34B (256, x1.0): 22016.
int meta_intermediate_size(int dim, int multiple_of, double ffn_dim_multiplier);

// params.json's object with the tokenizer's facts; `source` names the file in errors. Error
// naming the key for a missing or bad value, and for Llama 3.1's use_scaled_rope (refused).
ModelConfig parse_meta_params(const nlohmann::json& params, const std::string& source,
                              const SentencePieceInfo& tokenizer);

}  // namespace llama2
