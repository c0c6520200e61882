// --deterministic's attention in the CUDA runner: every row of a step, decoding or prefilling,
// through the one batch-invariant kernel (kernels/attention_invariant.cuh) instead of the decode
// kernel (which splits the context by batch size and context length) and the prefill kernels
// (whose key tiles start at the chunk and whose key split depends on the grid).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "common/check.h"
#include "kernels/attention_invariant.cuh"
#include "kernels/paged_kv.cuh"

namespace llama2 {

// The step's sequences as the kernel reads them (the StepLayout regions on the device).
struct InvariantAttentionRows {
  const int32_t* block_tables = nullptr;  // [seqs, max_blocks]
  int max_blocks = 0;
  const int32_t* cu_tokens = nullptr;     // [seqs + 1]
  const int32_t* pos_begin = nullptr;     // [seqs]
  const int32_t* context_lens = nullptr;  // [seqs]
  int seqs = 0;
  int max_new_tokens = 0;
};

// out [tokens, heads, head_dim] = attention of every row of q [tokens, q_stride] over the cache.
// Two launches of the one kernel, as the default path splits decode and prefill: the leading
// decode_seqs one-token sequences (a grid of one query tile per sequence), then the others (a
// tile per 16 new tokens of the longest): one grid over a saturated server's 500 decoding
// sequences and its one 2048-token chunk would be 500 x 128 tiles, nearly all empty. A row's
// arithmetic is the kernel's either way (cu_tokens holds absolute rows, so q and out stay).
// T fp16/bf16 with the cache in T: choose_deterministic refuses the other pairs at start.
template <typename T, typename C>
void attention_invariant(const kernels::PagedKvCache<C>& cache, const T* q, int64_t q_stride,
                         const InvariantAttentionRows& rows, int decode_seqs, int heads, T* out,
                         cudaStream_t stream) {
  if constexpr (std::is_same_v<T, C> && !std::is_same_v<T, float>) {
    auto launch = [&](int first, int seqs, int max_new_tokens) {
      if (seqs == 0) return;
      kernels::InvariantAttentionArgs<T> a;
      a.q = q;
      a.q_stride = q_stride;
      a.cache = cache;
      a.block_tables = rows.block_tables + static_cast<int64_t>(first) * rows.max_blocks;
      a.max_blocks = rows.max_blocks;
      a.cu_tokens = rows.cu_tokens + first;
      a.pos_begin = rows.pos_begin + first;
      a.context_lens = rows.context_lens + first;
      a.num_seqs = seqs;
      a.heads = heads;
      a.max_new_tokens = max_new_tokens;
      a.out = out;
      CUDA_CHECK(kernels::launch_attention_invariant(a, stream));
    };
    LLAMA2_CHECK(decode_seqs >= 0 && decode_seqs <= rows.seqs);
    launch(0, decode_seqs, 1);
    launch(decode_seqs, rows.seqs - decode_seqs, rows.max_new_tokens);
  } else {
    (void)cache, (void)q, (void)q_stride, (void)rows, (void)decode_seqs, (void)heads, (void)out,
        (void)stream;
    LLAMA2_CHECK(false && "--deterministic takes fp16/bf16 with the KV cache in the same dtype");
  }
}

}  // namespace llama2
