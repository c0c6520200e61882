// Internal to the prefill launcher: the mma.sync prefill kernel (kernels/attention_prefill_mma.cu).
#pragma once

#include <cuda_runtime.h>

#include "kernels/attention_prefill.cuh"

namespace llama2::kernels {

// Launches the mma.sync kernel for arguments that launch_attention_prefill has already validated
// (fp16/bf16 activations, a cache of T or fp8 e4m3, head_dim 64 or 128, at least one token).
template <typename T, typename C>
cudaError_t launch_attention_prefill_mma(const PrefillAttentionArgs<T, C>& args,
                                         cudaStream_t stream);

}  // namespace llama2::kernels
