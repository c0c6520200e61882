// Memory arithmetic for one tensor-parallel GPU: how many bytes its weight shard takes, how many
// bytes one token of KV cache takes, and how many KV blocks the rest of the GPU holds.
//
// `llama2 plan` prints these numbers and the engine sizes its KV cache with the same functions at
// start-up, so the planner's promise and the engine's behaviour cannot drift apart. Pure integer
// arithmetic on ModelConfig + ShardPlan: no MPI, no CUDA, no files (except load_model_config's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/shard_plan.h"

namespace llama2 {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kTiB = uint64_t{1} << 40;

// The largest KV block the engine accepts (the same bound as generate's --block-size): beyond it a
// block wastes more memory on a sequence's half-filled last block than paging saves.
constexpr int kMaxKvBlockSize = 1024;
// Degrees up to which plan lists the valid TP degrees (the largest 8-GPU node times 8).
constexpr int kPlanMaxTp = 64;

// 4-bit projections (linear_bytes kInt4LinearBytes, common/engine_config.h) as the CUDA kernels
// hold them (kernels/w4_convert.cuh): half a byte per weight and, per group of input columns and
// output row, a (scale, bias) pair of the compute dtype. The group: a 4-bit checkpoint's
// group_size, or kInt4LoadGroup for --weight-dtype int4 (kernels::kW4LoadGroup).
constexpr int kInt4LoadGroup = 128;
int int4_group(const ModelConfig& c);

// What to plan for. Defaults are the CLI's defaults.
struct CapacityRequest {
  int tp = 1;                             // tensor-parallel degree = GPUs
  int dtype_bytes = 2;                    // weights: 2 fp16/bf16, 4 fp32
  int kv_dtype_bytes = 0;                 // KV cache: 0 same as dtype_bytes; 1 fp8 (e4m3)
  int linear_bytes = 0;                   // projections: 0 same as dtype_bytes; 1 fp8/int8;
                                          // kInt4LinearBytes: 4 bits (int4_group)
  int block_size = 16;                    // tokens per KV block
  uint64_t gpu_mem_bytes = 80 * kGiB;     // memory of ONE GPU
  std::optional<uint64_t> reserve_bytes;  // held back per GPU; unset: default_reserve_bytes()
  std::optional<int> max_seq_len;         // unset: config.max_position_embeddings
};

// An invalid TP degree and why (the reason names heads / kv heads).
struct TpDegreeNote {
  int tp = 0;
  std::string reason;
};

// Every size is per GPU unless named otherwise. Fields marked (valid tp) are 0 when !tp_valid.
struct CapacityPlan {
  // Resolved inputs (defaults applied).
  int tp = 1, dtype_bytes = 2, block_size = 16, max_seq_len = 0;
  int kv_dtype_bytes = 2;  // bytes per KV-cache element: dtype_bytes, or 1 for fp8 (e4m3)
  int linear_bytes = 0;    // bytes per projection weight: 0 as dtype_bytes, 1 fp8/int8 (+ scales)
  uint64_t gpu_mem_bytes = 0, reserve_bytes = 0;
  bool reserve_is_default = true;

  uint64_t model_weight_bytes = 0;  // the whole unsplit model (any tp)
  bool tp_valid = false;
  std::string tp_invalid_reason;  // "" when tp_valid

  // (valid tp) Shard shape of rank 0 (heads and KV heads are the same on every rank).
  int heads_per_gpu = 0, kv_heads_per_gpu = 0;
  bool kv_replicated = false;  // kv_heads < tp: each KV head is stored on tp/kv_heads GPUs
  // (valid tp) The largest shard over all ranks: intermediate and vocab split unevenly when tp
  // does not divide them, and the GPU with the largest shard is the one that runs out first.
  uint64_t weight_bytes_per_gpu = 0;
  // (valid tp) 4-bit projections: prefill's dequantized copy of the largest projection (products
  // of more rows than the 4-bit GEMM takes run through cuBLAS on it); 0 otherwise.
  uint64_t scratch_bytes_per_gpu = 0;
  uint64_t kv_bytes_per_token = 0;     // 2 (K,V) x layers x kv_heads_per_gpu x head_dim x
                                       // kv_dtype_bytes
  uint64_t kv_bytes_per_block = 0;     // kv_bytes_per_token x block_size
  int64_t blocks_per_sequence = 0;     // ceil(max_seq_len / block_size)
  uint64_t kv_bytes_per_sequence = 0;  // blocks_per_sequence x kv_bytes_per_block (whole blocks:
                                       // that is what a paged cache really hands a sequence)
  int64_t free_bytes_for_kv = 0;       // gpu_mem - reserve - weights; negative: weights don't fit
  int64_t kv_blocks = 0;               // floor(max(free, 0) / kv_bytes_per_block)
  int64_t kv_tokens = 0;               // kv_blocks x block_size
  int64_t max_sequences = 0;           // floor(kv_blocks / blocks_per_sequence), full-length
  bool fits = false;                   // tp_valid and kv_blocks >= blocks_per_sequence
  // (valid tp, !fits) Extra bytes each GPU would need to hold one full sequence.
  int64_t shortfall_bytes = 0;

  std::vector<int> valid_tp_degrees;     // in [1, kPlanMaxTp]
  std::vector<TpDegreeNote> invalid_tp;  // degrees 1..8 and the requested one, ascending
  int smallest_fitting_tp = 0;           // smallest valid degree <= kPlanMaxTp that fits; 0: none
};

// Bytes held back per GPU for the CUDA context, cuBLAS(Lt) workspaces, NCCL buffers, activation
// and logits buffers, and allocator fragmentation: max(2 GiB, 10% of gpu_mem). See capacity.cpp.
uint64_t default_reserve_bytes(uint64_t gpu_mem_bytes);

// Weight bytes of one rank's shard: per layer q/k/v/o, gate/up/down and two (replicated) norms,
// plus the vocab slice of the embedding and of the LM head (once when tied) and the final norm.
// linear_bytes 1 (--weight-dtype fp8/int8): the seven projections take 1 byte per weight plus a
// 4-byte scale per output row; 0: everything is dtype_bytes.
uint64_t shard_weight_bytes(const ModelConfig& c, const ShardPlan& s, int dtype_bytes,
                            int linear_bytes = 0);
// The maximum of shard_weight_bytes over the ranks of a valid tp degree (Error if invalid).
uint64_t max_shard_weight_bytes(const ModelConfig& c, int tp, int dtype_bytes,
                                int linear_bytes = 0);
// KV-cache bytes one token takes on one rank: 2 x layers x s.num_kv_heads x head_dim x
// kv_dtype_bytes (the KV cache's element size, which need not be the weights').
uint64_t kv_bytes_per_token(const ModelConfig& c, const ShardPlan& s, int kv_dtype_bytes);
// floor(free / block_bytes), 0 when free <= 0. The engine calls this with its measured free memory.
int64_t kv_blocks_that_fit(int64_t free_bytes, uint64_t block_bytes);

// The full plan. Error (naming the flag and the allowed range) for tp < 1, dtype_bytes not 2|4,
// a KV element size other than the weights' or 1 (fp8, and then only with 2-byte weights),
// block_size outside [1, kMaxKvBlockSize], gpu_mem 0, max_seq_len outside
// [1, max_position_embeddings]. An invalid but positive tp is not an error: tp_valid is false.
CapacityPlan plan_capacity(const ModelConfig& c, const CapacityRequest& req);

// Official Llama-2 shapes: "7b", "13b", "70b" (70B uses grouped-query attention, 8 KV heads).
// Error listing the allowed names otherwise.
ModelConfig preset_config(const std::string& name);
// Bytes per element of a dtype name: fp16|bf16 (also float16|bfloat16) -> 2, fp32|float32 -> 4.
int dtype_bytes_of(const std::string& name);
// Bytes per KV-cache element of a --kv-cache-dtype name: auto -> weight_dtype_bytes,
// fp8|fp8_e4m3 -> 1 (Error unless the weights are 2 bytes: the engine's fp8 cache is for fp16/bf16
// models only). Error listing the allowed names otherwise.
int kv_dtype_bytes_of(const std::string& name, int weight_dtype_bytes);

// "24GiB", "141GB", "512MiB", "1.5TiB", "4096", "4096B": binary (KiB MiB GiB TiB) and decimal
// (kB MB GB TB) suffixes, case-insensitive; at most 6 decimal places, fractions of a byte dropped.
// Error naming the allowed suffixes on anything else (including negative, empty, or > 2^64-1).
uint64_t parse_bytes(const std::string& text);
// Human-readable binary size with two decimals, e.g. "12.12 GiB", "-3.50 GiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace llama2
