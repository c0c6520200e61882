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

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32 (<= 1024) and
// every thread must call it. It uses one shared scratch array, so a kernel may call it only once
// (a second call would need a __syncthreads() before it to protect the scratch).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
  return warp_sum(v);
}

// Maximum over the block of values >= 0 (absent warps count as 0), returned to every thread; the
// same rules as block_sum (its own shared scratch, so a kernel may call each of the two once).
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
  return warp_max(v);
}

}  // namespace llama2::kernels
