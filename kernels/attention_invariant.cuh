// The batch-invariant attention of --deterministic (docs/deterministic.md): one kernel for every
// query row of a step (decoding rows, prefill chunks, the suffix after a prefix-cache hit), whose
// output for a row depends only on its query, its position and the cached keys and values up to
// that position, never on the other rows, the chunking or the step's shape:
//   - every key and value comes from the paged cache (the chunk's own too: launch_rope_kv writes
//     them first), so fresh and reused keys are the same numbers;
//   - keys are taken in tiles of 32 at absolute positions [0, 32), [32, 64), ...; in each tile the
//     row's keys at or before its position (and only those) are scored, fp32 dot products in
//     element order; then one online-softmax update in fp32 (running max, rescaled sum and
//     output), the tile's exp-sum by a fixed warp butterfly and its values accumulated in key
//     order; nothing split, nothing combined across blocks, no atomics;
//   - out = round_T(acc / sum).
// The rows of a block share the K/V tiles in shared memory, and a warp's rows each K/V load from
// it (that is all they share: each row's sums are its own, every rounding explicit). Scores and
// products run on the CUDA cores (no tensor-core fragments whose padding rows or masked keys
// could reach a row's sums), so it is slower than the default kernels (attention_decode.cuh,
// attention_prefill.cuh) on long prompts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/paged_kv.cuh"

namespace llama2::kernels {

template <typename T>
struct InvariantAttentionArgs {
  const T* q = nullptr;  // [n_tokens, q_stride], heads * head_dim used, already rotated
  int64_t q_stride = 0;
  PagedKvCache<T> cache;                  // read only; holds every row's own K/V already
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks], cache block ids
  int max_blocks = 0;
  // Sequence s owns rows [cu_tokens[s], cu_tokens[s + 1]) at positions pos_begin[s], ...; a row
  // at a position >= context_lens[s] (a CUDA graph's padding sequence: context 0) gets zeros and
  // reads nothing.
  const int32_t* cu_tokens = nullptr;     // [num_seqs + 1], cu_tokens[0] = 0
  const int32_t* pos_begin = nullptr;     // [num_seqs]
  const int32_t* context_lens = nullptr;  // [num_seqs]: pos_begin + new tokens
  int num_seqs = 0;
  int heads = 0;           // query heads on this rank; heads % cache.kv_heads == 0
  int max_new_tokens = 0;  // host-side bound >= every sequence's new tokens (the grid)
  T* out = nullptr;        // [n_tokens, heads, head_dim]
};

// out[t, h, :] = softmax_{p <= pos(t)}(q[t, h] . k[p] / sqrt(d)) v[p], KV head h / (heads /
// kv_heads), in the fixed order above. Grid (query tiles of 16 rows, heads, num_seqs), 4 warps of
// 4 rows each. T: __half or __nv_bfloat16 (the cache holds T); head_dim 64 or 128.
template <typename T>
cudaError_t launch_attention_invariant(const InvariantAttentionArgs<T>& args, cudaStream_t stream);

}  // namespace llama2::kernels
