#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/swiglu.cuh"

namespace llama2::kernels {

template <typename T, int N>
static __global__ void swiglu_kernel(const T* __restrict__ gate_up, int64_t n_tokens, int ffn,
                                     T* __restrict__ out) {
  wait_for_previous_grid();
  const int64_t per_row = ffn / N;
  const int64_t total = n_tokens * per_row;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / per_row;
    const int64_t j = (idx - t * per_row) * N;
    const T* g_ptr = gate_up + t * 2 * ffn + j;
    float g[N], u[N];
    load_float<T, N>(g_ptr, g);
    load_float<T, N>(g_ptr + ffn, u);
#pragma unroll
    for (int e = 0; e < N; ++e) g[e] = silu_mul<T>(g[e], u[e]);
    store_float<T, N>(out + t * ffn + j, g);
  }
}

template <typename T>
cudaError_t launch_swiglu(const T* gate_up, int n_tokens, int ffn, T* out, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n_tokens >= 0, "n_tokens " + std::to_string(n_tokens));
  LLAMA2_LAUNCH_REQUIRE(ffn > 0, "ffn " + std::to_string(ffn));
  if (n_tokens == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(gate_up != nullptr && out != nullptr, "");
  constexpr int V = kVec16<T>;
  const bool vec = ffn % V == 0 && is_aligned(gate_up, 16) && is_aligned(out, 16);
  const int64_t work = static_cast<int64_t>(n_tokens) * (vec ? ffn / V : ffn);
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(work, kThreads), 4096));
  if (vec) {
    launch_kernel(swiglu_kernel<T, V>, blocks, kThreads, 0, stream, gate_up, n_tokens, ffn, out);
  } else {
    launch_kernel(swiglu_kernel<T, 1>, blocks, kThreads, 0, stream, gate_up, n_tokens, ffn, out);
  }
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T) \
  template cudaError_t launch_swiglu<T>(const T*, int, int, T*, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
