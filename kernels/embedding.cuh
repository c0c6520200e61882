// Vocab-parallel embedding lookup: each rank holds rows [vocab_begin, vocab_begin + vocab_local) of
// the table; tokens outside the slice give zero rows, and the all-reduce over ranks completes them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// out[t, :] = table[tokens[t] - vocab_begin, :] if the token is in this rank's slice, else 0.
// Matches llama2::cpu::embedding. Launch: one block per token, 16-byte accesses when hidden and
// the pointers allow it.
template <typename T>
cudaError_t launch_embedding(const int32_t* tokens,  // [n_tokens], global token ids, device
                             int n_tokens,
                             const T* table,  // [vocab_local, hidden], this rank's rows
                             int vocab_begin, int vocab_local, int hidden,
                             T* out,  // [n_tokens, hidden]
                             cudaStream_t stream);

}  // namespace llama2::kernels
