// Candidate selection over this rank's vocabulary slice, so that rank 0 gathers 1 or k (value,
// index) pairs per rank and row instead of full logits when greedy or top-k sampling is enough.
//
// Order (both kernels, and the same as llama2::Sampler's argmax): larger value first, equal values
// by lower index. NaN ranks above everything (so a numerics bug reaches rank 0, whose sampler
// rejects NaN, instead of being hidden); -0.0 equals +0.0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// For each row r: out_value[r] = max_j logits[r, j], out_index[r] = vocab_begin + the lowest j
// attaining it. Launch: one block of 512 threads per row, warp-shuffle + shared-memory reduction.
template <typename T>
cudaError_t launch_argmax(const T* logits,  // [rows, ld], columns [0, vocab_local) used
                          int64_t ld, int rows, int vocab_local, int vocab_begin,
                          float* out_value,    // [rows]
                          int32_t* out_index,  // [rows], global token ids
                          cudaStream_t stream);

// For each row r: the k best (value, vocab_begin + j) of the row in the order above, best first.
// If vocab_local < k the tail is padded with (-inf, -1). 1 <= k <= 64.
// Launch: one block of 512 threads per row. A 4-pass radix select (8 bits per pass over the
// order-preserving uint32 image of the fp32 value) finds the k-th largest key; an order-preserving
// block-wide compaction (ballot + prefix sums, in index order) collects the keys above it and the
// lowest-index ties at it; the k candidates are then ranked by pairwise comparison.
template <typename T>
cudaError_t launch_topk(const T* logits,  // [rows, ld], columns [0, vocab_local) used
                        int64_t ld, int rows, int vocab_local, int vocab_begin, int k,
                        float* out_values,     // [rows, k]
                        int32_t* out_indices,  // [rows, k], global token ids
                        cudaStream_t stream);

constexpr int kTopKMax = 64;

}  // namespace llama2::kernels
