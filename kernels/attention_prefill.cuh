// Causal prefill attention over the paged KV cache for a chunk of new tokens of several sequences
// (flash-attention style: query tiles x 64-key tiles, online softmax, nothing T x T in memory).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "kernels/paged_kv.cuh"

namespace llama2::kernels {

// Which prefill kernel runs (A/B runs; fp32 always takes the FMA path of the WMMA kernel).
//   kMma:  mma.sync m16n8k16 with P kept in registers, 128-query tiles of 4 warps x 32 rows (64 of
//          4 x 16 for small grids), double-buffered K/V tiles (kernels/attention_prefill_mma.cu);
//          the default for fp16/bf16.
//   kWmma: the earlier WMMA kernel, 64-query tiles, P and scores through shared memory.
enum class PrefillKernel { kAuto, kWmma, kMma };

// "auto", "wmma" or "mma" (the LLAMA2_PREFILL_KERNEL values) -> *out; false for anything else.
inline bool parse_prefill_kernel(const char* value, PrefillKernel* out) {
  if (std::strcmp(value, "auto") == 0) {
    *out = PrefillKernel::kAuto;
  } else if (std::strcmp(value, "wmma") == 0) {
    *out = PrefillKernel::kWmma;
  } else if (std::strcmp(value, "mma") == 0) {
    *out = PrefillKernel::kMma;
  } else {
    return false;
  }
  return true;
}

// T: queries and output; C: the cache's element type, T or fp8 e4m3 (fp16/bf16 models).
template <typename T, typename C = T>
struct PrefillAttentionArgs {
  const T* q = nullptr;  // [n_tokens, q_stride], heads * head_dim used, already rotated
  int64_t q_stride = 0;
  PagedKvCache<C> cache;  // read only; holds positions [0, pos_begin[s] + new tokens) of every
                          // sequence, the chunk's own K/V included (launch_rope_kv first)
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks], cache block ids
  int max_blocks = 0;
  // Sequence s owns rows [cu_tokens[s], cu_tokens[s + 1]) of q and out, at positions
  // pos_begin[s], pos_begin[s] + 1, ... (the StepPlan order: sequence after sequence).
  const int32_t* cu_tokens = nullptr;  // [num_seqs + 1], cu_tokens[0] = 0
  const int32_t* pos_begin = nullptr;  // [num_seqs], tokens already cached before this chunk
  int num_seqs = 0;
  int heads = 0;           // query heads on this rank; heads % cache.kv_heads == 0
  int max_new_tokens = 0;  // host-side bound >= every cu_tokens[s + 1] - cu_tokens[s]
  T* out = nullptr;        // [n_tokens, heads, head_dim]
  PrefillKernel kernel = PrefillKernel::kAuto;
  int mma_query_tile = 0;  // kMma: 0 automatic, or 64 / 128 query rows per block (tests, tuning)
  // kMma's key split (below): max_kv_len is a host-side bound >= every pos_begin[s] + new tokens
  // (0: unknown, no split); workspace holds the splits' partials.
  int max_kv_len = 0;
  void* workspace = nullptr;  // attention_prefill_workspace_bytes(head_dim) bytes for the automatic
  size_t workspace_bytes = 0;  // split; attention_prefill_split_bytes(...) for a forced one
  int mma_kv_splits = 0;  // kMma: 0 automatic, 1 none, or 2..kPrefillMaxKvSplits (tests, tuning)
};

// The mma kernel's key split ("flash-decoding" for short chunks over long caches): a grid of at
// most half as many blocks as the GPU has multiprocessors (a few new tokens after a long cached
// prefix: a prefix-cache hit, the last piece of a chunked prompt) gives each block's keys to up to
// kPrefillMaxKvSplits blocks of at least 2 key tiles each; each writes its rows' fp32 O / l and
// max + log2 l, and a merge kernel combines the splits by log-sum-exp. The automatic split keeps
// blocks x splits <= 2 x multiprocessors with 64-query tiles, which the workspace below covers.
inline constexpr int kPrefillMaxKvSplits = 16;
// Workspace of the automatic split on the current device (0 < bytes; the partials of 2 blocks
// per multiprocessor).
size_t attention_prefill_workspace_bytes(int head_dim);
// Workspace of `split_blocks` (blocks x splits) blocks of `query_tile` rows.
size_t attention_prefill_split_bytes(int64_t split_blocks, int query_tile, int head_dim);
// The automatic split count for a grid of `blocks` 64-query blocks over keys up to max_kv_len on
// `sm_count` multiprocessors: 1 unless 2 x blocks <= sm_count; then the most splits of >= 2 key
// tiles that keep blocks x splits <= 2 x sm_count, evened out over the longest block's tiles.
int plan_prefill_kv_splits(int64_t blocks, int max_kv_len, int sm_count);

// out[t, h, :] = softmax_{p <= pos(t)}(q[t, h] . k[p] / sqrt(d)) v[p] over the sequence's cache,
// KV head h / (heads / kv_heads). Matches llama2::cpu::paged_attention.
//
// kMma (the default for fp16/bf16): see kernels/attention_prefill_mma.cu.
// kWmma: grid (heads, query tiles of 64, num_seqs), 128 threads = 4 warps of 16 query rows each,
// heaviest (last) query tiles scheduled first, dynamic shared memory (fp16/bf16 d = 128: 64 KB, 3
// blocks per SM; fp32: 170 KB). Per 64-key tile: the keys' cache rows are resolved one tile ahead,
// K and V are gathered from the paged cache into shared memory with cp.async (V lands while Q K^T
// and the softmax run); fp16/bf16: S = Q K^T and O += P V on tensor cores (WMMA 16x16x16, fp32
// accumulate), Q and O held in registers, P rounded to T for the P V product; fp32: the same tiles
// with plain FMA loops and O in shared memory. Softmax (fp32, running max/sum per row) and the
// causal mask are applied between the two products.
// An fp8 cache is gathered through registers (8-byte loads, converted to T in shared memory)
// instead of cp.async. head_dim 64 and 128 are instantiated.
template <typename T, typename C>
cudaError_t launch_attention_prefill(const PrefillAttentionArgs<T, C>& args, cudaStream_t stream);

}  // namespace llama2::kernels
