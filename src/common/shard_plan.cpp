#include "common/shard_plan.h"

#include "common/check.h"

namespace llama2 {

int ShardPlan::kv_head_for(int local_head) const {
  // The global KV head of a global query head is head / group_size; heads and KV heads are laid
  // out in the same order in HF checkpoints, so the division is all GQA needs.
  const int group = (num_heads * tp) / (num_kv_heads_total());
  const int global_kv = (head_begin + local_head) / group;
  return global_kv - kv_head_begin;
}

int int4_split_unit(const ModelConfig& c) {
  const CheckpointQuant& q = c.quant;
  if (q.int4 == Int4Format::kNone) return 1;
  // Whole groups where a row's group is row / group_size (group_size is a multiple of 8, which
  // also keeps AWQ's and the zero points' 8 packed output columns and GPTQ's 8 packed input rows
  // whole); 8 rows otherwise (act-order groups, or one group over all rows).
  return q.int4_contiguous_groups() && q.group_size > 0 ? q.group_size : 8;
}

std::string tp_invalid_reason(const ModelConfig& c, int tp) {
  if (tp < 1) return "tensor-parallel degree must be >= 1";
  if (c.num_heads % tp != 0) {
    return "num_attention_heads (" + std::to_string(c.num_heads) + ") is not divisible by " +
           std::to_string(tp);
  }
  if (c.num_kv_heads % tp != 0 && tp % c.num_kv_heads != 0) {
    return "num_key_value_heads (" + std::to_string(c.num_kv_heads) +
           ") neither divides nor is divisible by " + std::to_string(tp);
  }
  if (c.intermediate_size < tp) return "intermediate_size is smaller than " + std::to_string(tp);
  if (const int unit = int4_split_unit(c); unit > 1) {
    const std::string what = c.quant.int4_contiguous_groups()
                                 ? "4-bit groups of " + std::to_string(unit) + " input rows"
                                 : "4-bit packing (8 rows per int32)";
    if (c.intermediate_size % unit != 0) {
      return "intermediate_size (" + std::to_string(c.intermediate_size) +
             ") is not a multiple of the " + what;
    }
    const int o_cols = c.num_heads / tp * c.head_dim();
    if (o_cols % unit != 0) {
      return "each rank's " + std::to_string(o_cols) + " input columns of o_proj would cut its " +
             what;
    }
    if (c.intermediate_size / unit < tp) {
      return "down_proj's " + std::to_string(c.intermediate_size) + " input columns hold " +
             std::to_string(c.intermediate_size / unit) + " units of " + what + ", fewer than " +
             std::to_string(tp) + " ranks";
    }
  }
  if (c.vocab_size < tp) return "vocab_size is smaller than " + std::to_string(tp);
  return "";
}

std::vector<int> valid_tp_degrees(const ModelConfig& c, int max_tp) {
  std::vector<int> out;
  for (int tp = 1; tp <= max_tp; ++tp) {
    if (tp_invalid_reason(c, tp).empty()) out.push_back(tp);
  }
  return out;
}

void split_range(int n, int parts, int index, int* begin, int* size) {
  const int base = n / parts, extra = n % parts;
  *size = base + (index < extra ? 1 : 0);
  *begin = index * base + (index < extra ? index : extra);
}

ShardPlan make_shard_plan(const ModelConfig& c, int tp, int rank) {
  if (std::string why = tp_invalid_reason(c, tp); !why.empty()) {
    std::string valid;
    for (int d : valid_tp_degrees(c)) valid += (valid.empty() ? "" : ", ") + std::to_string(d);
    throw Error("cannot run with " + std::to_string(tp) + " ranks: " + why +
                ". Valid tensor-parallel degrees for this model: " + valid);
  }
  LLAMA2_CHECK(rank >= 0 && rank < tp);
  ShardPlan s;
  s.tp = tp;
  s.rank = rank;
  s.head_dim = c.head_dim();
  s.num_heads = c.num_heads / tp;
  s.head_begin = rank * s.num_heads;
  if (c.num_kv_heads >= tp) {
    s.num_kv_heads = c.num_kv_heads / tp;
    s.kv_head_begin = rank * s.num_kv_heads;
  } else {
    // Fewer KV heads than ranks: replicate, ranks [k*r, (k+1)*r) share KV head k, r = tp/kv.
    s.num_kv_heads = 1;
    s.kv_head_begin = rank / (tp / c.num_kv_heads);
  }
  s.total_kv_heads = c.num_kv_heads;
  // 4-bit checkpoints: the FFN columns go out in whole groups (unevenly when the group count
  // does not divide: 7B's 86 groups of 128 at TP 4 are 22, 22, 21, 21).
  const int unit = int4_split_unit(c);
  split_range(c.intermediate_size / unit, tp, rank, &s.ffn_begin, &s.ffn_size);
  s.ffn_begin *= unit;
  s.ffn_size *= unit;
  split_range(c.vocab_size, tp, rank, &s.vocab_begin, &s.vocab_size);
  return s;
}

}  // namespace llama2
