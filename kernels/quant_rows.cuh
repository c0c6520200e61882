// Device side of kernels/quant.cuh's RowsE4m3: the tail a row kernel runs to also write its row
// quantized (device code only; quant.cu, rmsnorm.cu).
#pragma once

#include <cuda_fp8.h>

#include "kernels/dtype.cuh"
#include "kernels/quant.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {

// e4m3's largest finite value: a row's scale is its absolute maximum over this.
constexpr float kE4m3Max = 448.f;

// The row's scale from the block's maxima of |stored value| (each thread passes its own), written
// by thread 0, and returned to every thread. Calls block_max: once per kernel.
__device__ __forceinline__ float e4m3_row_scale(float amax, float* scale_out) {
  amax = block_max(amax);
  const float s = amax > 0.f ? amax / kE4m3Max : 1.f;
  if (threadIdx.x == 0) *scale_out = s;
  return s;
}

// q[i] = e4m3(v[i] / s) for N values (N % 4 == 0: 32-bit stores; else one byte each), the
// rounding of launch_quantize_rows (round to nearest even, saturating).
template <int N>
__device__ __forceinline__ void store_e4m3(__nv_fp8_e4m3* q, float (&v)[N], float s) {
#pragma unroll
  for (int e = 0; e < N; ++e) v[e] = v[e] / s;
  if constexpr (N % 4 == 0) {
    store_float<__nv_fp8_e4m3, N>(q, v);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) q[e] = from_float<__nv_fp8_e4m3>(v[e]);
  }
}

}  // namespace llama2::kernels
