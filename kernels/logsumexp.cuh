// The per-slice part of a log-softmax over a vocabulary split across ranks (rank/logits_gather.h
// combines the slices on rank 0): each rank reduces its logit rows to three floats per row, so a
// log-probability needs no full logits on rank 0 (perplexity; a sampled token's logprob).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// For each row r of logits [rows, ld] (columns [0, vocab_local) used), out[r] = {m, s, t}:
//   m = max_j logits[r, j], s = sum_j exp(logits[r, j] - m), t = logits[r, targets[r] -
//   vocab_begin] when the global id targets[r] lies in [vocab_begin, vocab_begin + vocab_local),
//   else 0 (targets may be nullptr: t = 0). fp32 arithmetic whatever T is. NaN logits propagate.
// Launch: one block of 256 threads per row; each thread keeps a running (max, sum) over its
// columns (rescaling the sum when the max grows: one pass over the row), then the block merges
// the pairs.
template <typename T>
cudaError_t launch_slice_logsumexp(const T* logits,  // [rows, ld]
                                   int64_t ld, int rows, int vocab_local, int vocab_begin,
                                   const int32_t* targets,  // [rows] global ids, -1 none; or null
                                   float* out,              // [rows, 3]
                                   cudaStream_t stream);

}  // namespace llama2::kernels
