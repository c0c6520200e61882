// Pieces shared by the GEMV kernels (kernels/gemv.cu: weights in T and the generic conversion
// path; kernels/gemv_w8.cu: 1-byte weights with cheap conversions). Device code, internal to the
// kernel family: the launchers are declared in kernels/gemv.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels::gemv_detail {

constexpr int kWarps = 8;
// Plain products with at most this many rows of W give each warp one row (R = 1) instead of two:
// o_proj and down_proj of 7B (4096 rows) then fill 512 blocks instead of 256, and the loop is
// unrolled twice as far, so each SM keeps as many bytes in flight as on the larger matrices.
constexpr int kOneRowMaxN = 8192;

// The end of every GEMV kernel: warp sums of acc times factor(m, row of W), stored to y (plain)
// or through SwiGLU (kGateUp: acc[0] is gate row n0, acc[1] up row n1 = N + n0).
template <typename T, int M, bool kGateUp, int R, typename Factor>
__device__ __forceinline__ void store_rows(float (&acc)[R][M], const Factor& factor, T* y, int N,
                                           int n0, int n1, bool two, int lane) {
  if constexpr (kGateUp) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float g = round_to<T>(warp_sum(acc[0][m]) * factor(m, n0));
      const float u = round_to<T>(warp_sum(acc[R - 1][m]) * factor(m, n1));
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
          y[static_cast<int64_t>(m) * N + n0 + r] = from_float<T>(s * factor(m, n0 + r));
        }
      }
    }
  }
}

// The W8A16 GEMV with cheap conversions (kernels/gemv_w8.cu): W int8 or e4m3 with one scale per
// row, x in T (fp16 / bf16); half2 (T = __half only): f16x2 products summed over each 16-byte
// load of W, otherwise fp32 FMAs. Arguments as launch_gemv_q's, already checked by the caller.
template <typename T, typename W, bool kGateUp>
void launch_gemv_w8(const T* x, const W* w, const float* w_scale, T* y, int M, int N, int K,
                    bool half2, cudaStream_t stream);

// f(std::integral_constant<int, M>{}) for the runtime M in 1..8 (the kernels are instantiated per
// M so that the accumulators stay in registers). The caller has checked 1 <= M <= kGemvMaxRows.
template <typename F>
void with_rows(int M, F&& f) {
  switch (M) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace llama2::kernels::gemv_detail
