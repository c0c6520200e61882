#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;

template <typename T, int M>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int K) {
  constexpr int V = kVec16<T>;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n0 = (blockIdx.x * kWarps + warp) * kRowsPerWarp;
  if (n0 >= N) return;
  const bool two = n0 + 1 < N;
  const T* w0 = w + static_cast<int64_t>(n0) * K;
  const T* w1 = two ? w0 + K : w0;  // a lone last row reads itself twice and writes once

  float acc[kRowsPerWarp][M] = {};
#pragma unroll 4
  for (int k = lane * V; k < K; k += 32 * V) {
    float a[V], b[V];
    load_float<T, V>(w0 + k, a);
    load_float<T, V>(w1 + k, b);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      load_float<T, V>(x + static_cast<int64_t>(m) * K + k, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        acc[0][m] = fmaf(a[i], xv[i], acc[0][m]);
        acc[1][m] = fmaf(b[i], xv[i], acc[1][m]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float s = warp_sum(acc[r][m]);
      // Lane (r * M + m) writes one output: the stores of a warp go out together.
      if (lane == r * M + m && (r == 0 || two)) {
        y[static_cast<int64_t>(m) * N + n0 + r] = from_float<T>(s);
      }
    }
  }
}

template <typename T, int M>
void launch_m(const T* x, const T* w, T* y, int N, int K, cudaStream_t stream) {
  const int rows_per_block = kWarps * kRowsPerWarp;
  const int blocks = static_cast<int>(ceil_div(N, rows_per_block));
  gemv_kernel<T, M><<<blocks, kWarps * 32, 0, stream>>>(x, w, y, N, K);
}

}  // namespace

template <typename T>
cudaError_t launch_gemv(const T* x, const T* w, T* y, int M, int N, int K, cudaStream_t stream) {
  if (M < 1 || M > kGemvMaxRows || N < 1 || K < 1 || K % kVec16<T> != 0) return cudaErrorInvalidValue;
  if (x == nullptr || w == nullptr || y == nullptr || !is_aligned(x, 16) || !is_aligned(w, 16)) {
    return cudaErrorInvalidValue;
  }
  switch (M) {
    case 1: launch_m<T, 1>(x, w, y, N, K, stream); break;
    case 2: launch_m<T, 2>(x, w, y, N, K, stream); break;
    case 3: launch_m<T, 3>(x, w, y, N, K, stream); break;
    case 4: launch_m<T, 4>(x, w, y, N, K, stream); break;
    case 5: launch_m<T, 5>(x, w, y, N, K, stream); break;
    case 6: launch_m<T, 6>(x, w, y, N, K, stream); break;
    case 7: launch_m<T, 7>(x, w, y, N, K, stream); break;
    default: launch_m<T, 8>(x, w, y, N, K, stream); break;
  }
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T) \
  template cudaError_t launch_gemv<T>(const T*, const T*, T*, int, int, int, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
