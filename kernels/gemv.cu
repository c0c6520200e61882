#include <string>

#include "common/check.h"
#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {
namespace {

constexpr int kWarps = 8;
// Plain products with at most this many rows of W give each warp one row (R = 1) instead of two:
// o_proj and down_proj of 7B (4096 rows) then fill 512 blocks instead of 256, and the loop is
// unrolled twice as far, so each SM keeps as many bytes in flight as on the larger matrices.
constexpr int kOneRowMaxN = 8192;

// Plain: a warp owns rows n0 .. n0 + R - 1 of W and writes those columns of y.
// kGateUp: W is the fused [gate; up] matrix [2N, K]; a warp owns output j = its index, reads rows
// j (gate) and N + j (up) and writes y[:, j] = round_T(silu_mul(round_T(gate), round_T(up))): the
// GEMM output rounding and launch_swiglu, without the [M, 2N] intermediate or a second launch.
template <typename T, int M, bool kGateUp, int R>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int N, int K) {
  static_assert(R == 2 || (R == 1 && !kGateUp), "gate|up reads two rows per output");
  wait_for_previous_grid();
  constexpr int V = kVec16<T>;
  constexpr int kUnroll = R == 1 ? 8 : 4;  // ~8 16-byte loads of W in flight per lane
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n0 = kGateUp ? blockIdx.x * kWarps + warp : (blockIdx.x * kWarps + warp) * R;
  if (n0 >= N) return;
  const bool two = kGateUp || (R == 2 && n0 + 1 < N);
  const T* w0 = w + static_cast<int64_t>(n0) * K;
  // Plain: a lone last row reads itself twice and writes once.
  const T* w1 = kGateUp ? w + (static_cast<int64_t>(N) + n0) * K : (two ? w0 + K : w0);

  float acc[R][M] = {};
#pragma unroll kUnroll
  for (int k = lane * V; k < K; k += 32 * V) {
    float a[V], b[V];
    load_float<T, V>(w0 + k, a);
    if constexpr (R == 2) load_float<T, V>(w1 + k, b);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      load_float<T, V>(x + static_cast<int64_t>(m) * K + k, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        acc[0][m] = fmaf(a[i], xv[i], acc[0][m]);
        if constexpr (R == 2) acc[R - 1][m] = fmaf(b[i], xv[i], acc[R - 1][m]);
      }
    }
  }
  if constexpr (kGateUp) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float g = round_to<T>(warp_sum(acc[0][m]));
      const float u = round_to<T>(warp_sum(acc[R - 1][m]));
      if (lane == m) y[static_cast<int64_t>(m) * N + n0] = from_float<T>(silu_mul<T>(g, u));
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
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
}

template <typename T, int M, bool kGateUp>
void launch_m(const T* x, const T* w, T* y, int N, int K, cudaStream_t stream) {
  if (!kGateUp && N <= kOneRowMaxN) {
    const int blocks = static_cast<int>(ceil_div(N, kWarps));
    launch_kernel(gemv_kernel<T, M, false, 1>, blocks, kWarps * 32, 0, stream, x, w, y, N, K);
  } else {
    const int blocks = static_cast<int>(ceil_div(N, kGateUp ? kWarps : kWarps * 2));
    launch_kernel(gemv_kernel<T, M, kGateUp, 2>, blocks, kWarps * 32, 0, stream, x, w, y, N, K);
  }
}

template <typename T, bool kGateUp>
cudaError_t launch_gemv_kind(const T* x, const T* w, T* y, int M, int N, int K,
                             cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(M >= 1 && M <= kGemvMaxRows,
                        "M " + std::to_string(M) + ", allowed 1.." + std::to_string(kGemvMaxRows));
  LLAMA2_LAUNCH_REQUIRE(N >= 1, "N " + std::to_string(N));
  LLAMA2_LAUNCH_REQUIRE(K >= 1 && K % kVec16<T> == 0,
                        "K " + std::to_string(K) + " must be a positive multiple of " +
                            std::to_string(kVec16<T>) + " (16 bytes)");
  LLAMA2_LAUNCH_REQUIRE(x != nullptr && w != nullptr && y != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(x, 16) && is_aligned(w, 16), "16-byte alignment");
  switch (M) {
    case 1:
      launch_m<T, 1, kGateUp>(x, w, y, N, K, stream);
      break;
    case 2:
      launch_m<T, 2, kGateUp>(x, w, y, N, K, stream);
      break;
    case 3:
      launch_m<T, 3, kGateUp>(x, w, y, N, K, stream);
      break;
    case 4:
      launch_m<T, 4, kGateUp>(x, w, y, N, K, stream);
      break;
    case 5:
      launch_m<T, 5, kGateUp>(x, w, y, N, K, stream);
      break;
    case 6:
      launch_m<T, 6, kGateUp>(x, w, y, N, K, stream);
      break;
    case 7:
      launch_m<T, 7, kGateUp>(x, w, y, N, K, stream);
      break;
    default:
      launch_m<T, 8, kGateUp>(x, w, y, N, K, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_gemv(const T* x, const T* w, T* y, int M, int N, int K, cudaStream_t stream) {
  return launch_gemv_kind<T, false>(x, w, y, M, N, K, stream);
}

template <typename T>
cudaError_t launch_gemv_gate_up_swiglu(const T* x, const T* w_gate_up, T* act, int M, int F, int K,
                                       cudaStream_t stream) {
  return launch_gemv_kind<T, true>(x, w_gate_up, act, M, F, K, stream);
}

#define LLAMA2_INSTANTIATE(T)                                                               \
  template cudaError_t launch_gemv<T>(const T*, const T*, T*, int, int, int, cudaStream_t); \
  template cudaError_t launch_gemv_gate_up_swiglu<T>(const T*, const T*, T*, int, int, int, \
                                                     cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
