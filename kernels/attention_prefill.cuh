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
};

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
