// Paged decode attention: one new query token per sequence against that sequence's cached keys and
// values, split along the context ("flash-decoding") when the grid would otherwise be too small or
// the context too long for one block.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/decode_plan.cuh"
#include "kernels/paged_kv.cuh"

namespace llama2::kernels {

// T: queries and output (fp32/fp16/bf16); C: the cache's element type, T or fp8 e4m3 (fp16/bf16).
template <typename T, typename C = T>
struct DecodeAttentionArgs {
  const T* q = nullptr;  // [num_seqs, q_stride], heads * head_dim used: the query of position
                         // context_lens[s] - 1, already rotated
  int64_t q_stride = 0;
  PagedKvCache<C> cache;                  // read only; the current token's K/V are already written
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks], cache block ids
  int max_blocks = 0;
  const int32_t* context_lens = nullptr;  // [num_seqs], tokens to attend over (>= 1)
  int num_seqs = 0;
  int heads = 0;              // query heads on this rank; heads % cache.kv_heads == 0, group <= 8
  int max_context = 0;        // host-side bound >= every context_lens[s]; sizes the split
  T* out = nullptr;           // [num_seqs, heads, head_dim], 16-byte aligned
  void* workspace = nullptr;  // attention_decode_workspace_bytes(...) bytes, only when split
  size_t workspace_bytes = 0;
  DecodeKernel kernel = DecodeKernel::kAuto;
  int min_partition = 0;  // plan_decode's min_partition (A/B runs): 0, or 32..512, a power of two
};

// Workspace for every launch with these sizes and a max_context up to this one (0 when none
// splits): a shorter bound can split into more partitions, so sizing for the longest alone is not
// enough. Depends on the current device's multiprocessor count and the kernel choice, like the
// launch.
size_t attention_decode_workspace_bytes(int num_seqs, int heads, int kv_heads, int head_dim,
                                        int max_context, DecodeKernel kernel = DecodeKernel::kAuto);

// out[s, h, :] = softmax(q[s, h] . K[s, g(h), 0:ctx]^T / sqrt(d)) V[s, g(h), 0:ctx], g(h) = h /
// group, fp32 scores, softmax and accumulation, one rounding to T at the end. Matches
// llama2::cpu::paged_attention for one token per sequence.
//
// Block kernel: grid (partitions, kv_heads, num_seqs), 128 threads. A block takes one (sequence, KV
// head, partition of <= 512 positions) and the whole query group of that KV head, so each K/V row
// is read once per group. Each row's cache offset is computed once into shared memory; lanes split
// a K/V row in 16-byte pieces (d = 128 fp16: 16 lanes per row, 2 rows per warp) and stream 4 rows
// per lane per step (8 when group = 1) with the next step's rows already requested. Register arrays
// are sized by the group (instantiated for groups 1, <= 4 and <= 8). The partition size halves
// (down to 64) while the grid has fewer than 4 blocks per multiprocessor. With one partition the
// block writes `out` directly; otherwise it writes unnormalized fp32 partials plus (max, sum) and a
// second kernel, grid (heads, num_seqs) x head_dim threads, merges them by log-sum-exp. A
// context_lens[s] > max_context yields NaN rows (a loud failure), 0 yields zero rows. head_dim 64
// and 128 are instantiated.
//
// Warp kernel (group 1): a warp per (sequence, head, partition of <= 512 positions), 4 warps per
// block, an online softmax in registers over K and V rows requested together; its many small
// independent work items keep more loads in flight than ~5 resident blocks per multiprocessor
// when a large batch has short contexts. Same partials and merge kernel as the block kernel.
// An fp8 cache is read in 8-byte pieces with the fp16 lane layout (the warp kernel streams twice
// the rows per step) and converted to fp32 on load; instantiated for (fp32, fp32), (fp16, fp16),
// (bf16, bf16), (fp16, fp8 e4m3) and (bf16, fp8 e4m3).
template <typename T, typename C>
cudaError_t launch_attention_decode(const DecodeAttentionArgs<T, C>& args, cudaStream_t stream);

}  // namespace llama2::kernels
