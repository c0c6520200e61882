// Which byte ranges of which checkpoint tensors a rank needs: the single description of the
// tensor-parallel split that every backend's loader follows (CPU: fp32 copies; CUDA: raw uploads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/shard_plan.h"

namespace llama2 {

// A 2-D block [row_begin, row_end) x [col_begin, col_end) of a tensor whose full shape is
// `full_shape` (1-D tensors: full_shape {n}, rows [0, 1), cols [0, n)).
struct TensorSlice {
  std::string name;
  std::vector<int64_t> full_shape;
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  int64_t numel() const { return (row_end - row_begin) * (col_end - col_begin); }
};

enum class LayerTensor { kAttnNorm, kWq, kWk, kWv, kWo, kMlpNorm, kWgate, kWup, kWdown, kCount };

// The slice of one layer tensor this rank owns. HF layouts: q/k/v/gate/up [out, in] split by out
// rows (contiguous bytes); o/down [out, in] split by in columns (one range per row).
TensorSlice layer_slice(const ModelConfig& c, const ShardPlan& s, int layer, LayerTensor which);

// model.embed_tokens.weight [V, H] rows of this rank's vocab slice.
TensorSlice embedding_slice(const ModelConfig& c, const ShardPlan& s);
// lm_head.weight [V, H] rows (or the embedding's when tie_word_embeddings).
TensorSlice lm_head_slice(const ModelConfig& c, const ShardPlan& s);
// model.norm.weight [H].
TensorSlice final_norm_slice(const ModelConfig& c);

// Every full tensor name with its expected shape (for validating a checkpoint before loading).
std::vector<TensorSlice> all_full_tensors(const ModelConfig& c);

}  // namespace llama2
