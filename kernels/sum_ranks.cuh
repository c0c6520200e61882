// The second half of --deterministic's all-reduce on the GPU (NcclComm with rank order,
// docs/deterministic.md): after an all-gather of every rank's values, each rank adds them in rank
// order, ((v0 + v1) + v2) + ..., in fp32 with one rounding to T at the end (the one-shot
// kernel's arithmetic, kernels/allreduce.cuh), at every message size. Elementwise: an element's
// sum never depends on the message's length or on where the element sits in it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// out[i] = round_T(sum over r in 0..ranks-1, in order, of gathered[r * n + i]) for i < n.
// T: float, __half, __nv_bfloat16. out may alias none of gathered.
template <typename T>
cudaError_t launch_sum_ranks(const T* gathered,  // [ranks, n]
                             int ranks, int64_t n,
                             T* out,  // [n]
                             cudaStream_t stream);

}  // namespace llama2::kernels
