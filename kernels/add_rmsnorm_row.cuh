// The two passes of the residual add + RMSNorm over one row, shared by add_rmsnorm_kernel
// (kernels/rmsnorm.cu: the addend is x, or an fp8 product's scaled sums) and the one-shot
// all-reduce fused with them (kernels/allreduce.cu: the addend is the ranks' sum). One body, so the
// fused form stays bit-identical to the all-reduce followed by add_rmsnorm. Device code only.
#pragma once

#include <cuda_runtime.h>

#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {

// Pass 1: rrow[i] = round_T(rrow[i] + addend), and the sum of squares of the stored values;
// pass 2: orow = round_T(weight * round_T(rrow * inv_rms)), each thread re-reading exactly the
// elements it stored in pass 1 (so no barrier beyond the reduction's). Thread t takes vectors
// t, t + blockDim.x, ...; block_sum counts warps with no element as 0, so any block of at least
// ceil32(n_vec) threads (<= 1024) gives the same bits. addend(i, v) fills v with the N values added
// at vector i, already in T's precision. Returns the largest |out| value when `amax` (for e4m3
// rows), else 0. Every thread of the block must call it; a second row needs a __syncthreads()
// first (block_sum's scratch).
template <typename T, int N, typename Addend>
__device__ __forceinline__ float add_rmsnorm_row(T* rrow, const Addend& addend, const T* weight,
                                                 int hidden, float eps, T* orow, bool amax) {
  const int n_vec = hidden / N;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float r[N], v[N];
    load_float<T, N>(rrow + i * N, r);
    addend(i, v);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      r[e] = round_to<T>(r[e] + v[e]);  // the value stored below, exactly
      ss += r[e] * r[e];
    }
    store_float<T, N>(rrow + i * N, r);
  }
  ss = block_sum(ss);
  // sqrtf and the division are correctly rounded (no fast-math), so inv is within 1 ulp of HF's.
  const float inv = 1.f / sqrtf(ss / static_cast<float>(hidden) + eps);
  float out_max = 0.f;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float r[N], w[N];
    load_float<T, N>(rrow + i * N, r);  // this thread's own pass-1 store
    load_float<T, N>(weight + i * N, w);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      r[e] = w[e] * round_to<T>(r[e] * inv);
      if (amax) out_max = fmaxf(out_max, fabsf(round_to<T>(r[e])));
    }
    store_float<T, N>(orow + i * N, r);
  }
  return out_max;
}

}  // namespace llama2::kernels
