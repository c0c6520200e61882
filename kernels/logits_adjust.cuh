// A step's vocabulary adjustments on this rank's fp32 logit rows, before the slice reductions
// (rank/logits_adjust.h has the CPU version these kernels are tested against, and packs the
// adjustments: PackedAdjustments).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// For a = 0..n_masked-1: row mask_rows[a] of logits [*, ld] (columns [0, vocab_local) used) keeps
// column j only when bit b = vocab_begin + j - mask_base of its mask is set (word
// mask_words[a * words_per_row + b / 32], bit b % 32); every other column becomes -inf.
// Launch: grid (ceil(vocab_local / 256), n_masked), 256 threads, one column per thread.
cudaError_t launch_apply_token_mask(float* logits,  // [rows, ld]
                                    int64_t ld, int vocab_local, int vocab_begin, int n_masked,
                                    const int32_t* mask_rows,    // [n_masked]
                                    const uint32_t* mask_words,  // [n_masked, words_per_row]
                                    int words_per_row, int mask_base, cudaStream_t stream);

// logits[bias_rows[i] * ld + bias_cols[i]] += bias_values[i] for i < n_bias; each (row, column)
// at most once (no two threads write one element). Launch: ceil(n_bias / 256) blocks of 256.
cudaError_t launch_add_token_bias(float* logits,  // [rows, ld]
                                  int64_t ld, int n_bias,
                                  const int32_t* bias_rows,  // [n_bias]
                                  const int32_t* bias_cols,  // [n_bias], < the row's width
                                  const float* bias_values,  // [n_bias]
                                  cudaStream_t stream);

}  // namespace llama2::kernels
