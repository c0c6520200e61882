#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/convert.cuh"
#include "kernels/dtype.cuh"

namespace llama2::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_source(const void* src, SourceType type, int64_t i) {
  switch (type) {
    case SourceType::kF32:
      return static_cast<const float*>(src)[i];
    case SourceType::kF16:
      return __half2float(static_cast<const __half*>(src)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
  }
}

template <typename T>
__global__ void convert_kernel(const void* src, SourceType type, int64_t n, T* dst) {
  wait_for_previous_grid();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<T>(load_source(src, type, i));
  }
}

// SplitMix64 finaliser: a bijective mix, so distinct (seed, i) never collide before the fold.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void fill_uniform_kernel(T* dst, int64_t n, uint64_t seed, float mean, float scale) {
  wait_for_previous_grid();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * 0x1.0p-23f - 1.0f;  // 24 bits -> [-1, 1)
    dst[i] = from_float<T>(mean + scale * u);
  }
}

int grid_for(int64_t n) {
  // Enough blocks to fill an H200 several times over; the grid-stride loop covers the rest.
  return static_cast<int>(std::min<int64_t>(ceil_div(n, kThreads), 132 * 16));
}

}  // namespace

template <typename T>
cudaError_t launch_convert(const void* src, SourceType type, int64_t n, T* dst,
                           cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n >= 0, "n " + std::to_string(n));
  LLAMA2_LAUNCH_REQUIRE(static_cast<int>(type) >= 0 && static_cast<int>(type) <= 2,
                        "source type " + std::to_string(static_cast<int>(type)));
  if (n == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(src != nullptr && dst != nullptr, "");
  launch_kernel(convert_kernel<T>, grid_for(n), kThreads, 0, stream, src, type, n, dst);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_fill_uniform(T* dst, int64_t n, uint64_t seed, float mean, float scale,
                                cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n >= 0, "n " + std::to_string(n));
  if (n == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(dst != nullptr, "");
  launch_kernel(fill_uniform_kernel<T>, grid_for(n), kThreads, 0, stream, dst, n, seed, mean,
                scale);
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T)                                                                 \
  template cudaError_t launch_convert<T>(const void*, SourceType, int64_t, T*, cudaStream_t); \
  template cudaError_t launch_fill_uniform<T>(T*, int64_t, uint64_t, float, float, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
