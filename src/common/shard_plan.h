// Which slice of every weight a rank owns under Megatron-style tensor parallelism.
//
// Q/K/V, gate and up are split by output columns (whole heads per rank); O and down by input rows;
// embedding and LM head by vocabulary rows. When tp > num_kv_heads each KV head is replicated on
// tp / num_kv_heads consecutive ranks, so every rank still holds the KV head its query heads use.
#pragma once

#include <string>
#include <vector>

#include "common/model_config.h"

namespace llama2 {

struct ShardPlan {
  int tp = 1;    // tensor-parallel degree (number of ranks in the group)
  int rank = 0;  // this rank's index in the group

  int head_begin = 0, num_heads = 0;        // query heads [head_begin, head_begin + num_heads)
  int kv_head_begin = 0, num_kv_heads = 0;  // KV heads this rank stores
  int ffn_begin = 0, ffn_size = 0;          // intermediate columns of gate/up = rows of down^T
  int vocab_begin = 0, vocab_size = 0;      // embedding / LM head rows
  int head_dim = 0;
  int total_kv_heads = 0;  // num_key_value_heads of the model

  int num_kv_heads_total() const { return total_kv_heads; }

  // Local KV head used by local query head h (grouped-query attention).
  int kv_head_for(int local_head) const;
};

// The FFN split unit (common/checkpoint_quant.h): 1 for 16-bit and fp8 checkpoints; for 4-bit
// ones whole groups (contiguous groups) or 8 rows (GPTQ act order, group_size -1), so that no rank
// cuts a group or a packed int32. o_proj's per-rank input columns must be multiples of it too.
int int4_split_unit(const ModelConfig& c);

// "" when tp is a valid degree for the config, otherwise the reason (names heads/kv heads, or
// the 4-bit groups a degree would cut).
std::string tp_invalid_reason(const ModelConfig& c, int tp);
// Valid degrees in [1, max_tp], ascending.
std::vector<int> valid_tp_degrees(const ModelConfig& c, int max_tp = 64);
// Throws Error listing the valid degrees when tp is invalid.
ShardPlan make_shard_plan(const ModelConfig& c, int tp, int rank);

// Even split of n items over `parts`: the first n % parts parts get one extra.
void split_range(int n, int parts, int index, int* begin, int* size);

}  // namespace llama2
