// Warp- and block-level reductions shared by the kernel families (device code only).
#pragma once

#include <cuda_runtime.h>

namespace llama2::kernels {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// The sum (kMax false) or the maximum (kMax true, of values >= 0: absent warps count as 0) over the
// block, returned to every thread. blockDim.x must be a multiple of 32 (<= 1024) and every thread
// must call it. Each of the two uses its own shared scratch array, so a kernel may call each once
// (a second call of the same one would need a __syncthreads() before it to protect the scratch).
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
  return kMax ? warp_max(v) : warp_sum(v);
}

__device__ __forceinline__ float block_sum(float v) {
  return block_reduce<false>(v);
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce<true>(v);
}

}  // namespace llama2::kernels
