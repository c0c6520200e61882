#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/sum_ranks.cuh"

namespace llama2::kernels {
namespace {
constexpr int kThreads = 256;

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    sum_ranks_kernel(const T* gathered, int ranks, int64_t n, T* out) {
  wait_for_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float s = to_float(gathered[i]);
    for (int r = 1; r < ranks; ++r) s += to_float(gathered[r * n + i]);
    out[i] = from_float<T>(s);
  }
}
}  // namespace

template <typename T>
cudaError_t launch_sum_ranks(const T* gathered, int ranks, int64_t n, T* out, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(ranks >= 1 && n >= 0,
                        "ranks " + std::to_string(ranks) + ", n " + std::to_string(n));
  if (n == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(gathered != nullptr && out != nullptr, "");
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  const cudaError_t e =
      launch_kernel(sum_ranks_kernel<T>, blocks, kThreads, 0, stream, gathered, ranks, n, out);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template cudaError_t launch_sum_ranks<float>(const float*, int, int64_t, float*, cudaStream_t);
template cudaError_t launch_sum_ranks<__half>(const __half*, int, int64_t, __half*, cudaStream_t);
template cudaError_t launch_sum_ranks<__nv_bfloat16>(const __nv_bfloat16*, int, int64_t,
                                                     __nv_bfloat16*, cudaStream_t);

}  // namespace llama2::kernels
