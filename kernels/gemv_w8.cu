// The quantized GEMV for 1-byte weights and activations in T (W8A16: --weight-dtype int8, and
// fp8 at GEMV sizes, src/rank/cuda/linear.h). A 16-byte load of W holds 16 weights, so the
// conversions per byte decide whether the kernel reaches the HBM roofline: kernels/w8_convert.cuh
// replaces the generic ones (int8's I2F runs at a quarter of the FMA rate on sm_90).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>
#include <type_traits>

#include "kernels/gemv_common.cuh"
#include "kernels/w8_convert.cuh"

namespace llama2::kernels::gemv_detail {
namespace {

// Rows, lanes and the epilogue as gemv_kernel (kernels/gemv.cu); x and W are read as raw 16-byte
// words. kHalf2 (fp16 x): w8_to_half2 gives 8 f16x2 of W / kHalf2Scale per load; the 16 products
// with x are summed by 8 HFMA2 into one f16x2 (each half a sum of 8 products, below 4 max|x|:
// see w8_convert.cuh), which then goes to the fp32 accumulator. One fp16 rounding per product
// and add, over 8 terms, instead of fp32's: the GPU test bounds it (tests/gpu/test_quant.cu).
// Otherwise: w8_to_float and fp32 FMAs in the order of gemv_kernel, so the sums are the same as
// the generic path's bit for bit.
// F: the fusions of gemv_kernel (GemvFusion, gemv_common.cuh), one row only.
template <typename T, typename W, int M, bool kGateUp, int R, bool kHalf2, int F>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_w8_kernel(const T* __restrict__ x, const W* __restrict__ w,
                   const float* __restrict__ w_scale, T* __restrict__ y, int N, int K,
                   const GemvFusion<T> fuse, int prefetch) {
  static_assert(F == 0 || M == 1, "fusions: one row");
  static_assert(R == 2 || (R == 1 && !kGateUp), "gate|up reads two rows per output");
  static_assert(sizeof(W) == 1, "1-byte weights");
  static_assert(!kHalf2 || std::is_same_v<T, __half>, "f16x2 products need fp16 activations");
  // 4 (R = 1) or 2 (R = 2) iterations in flight: ~4 16-byte loads of W per lane, as the generic
  // kernel for 1-byte weights (x's registers grow with M).
  constexpr int kUnroll = R == 1 ? 4 : 2;
  const int lane = threadIdx.x & 31;
  const WarpRows<W, kGateUp, R, (F & kFuseRope) != 0> rows(w, N, K, fuse.rope.head_dim / 2);
  const int n0 = rows.n0, n1 = rows.n1;
  const bool two = rows.two;
  const W *w0 = rows.w0, *w1 = rows.w1;
  const T* xin = gemv_begin<T, T, W, F>(x, w0, w1, n0 < N, two, K, prefetch, fuse);
  if (n0 >= N) return;

  float acc[R][M] = {};
#pragma unroll kUnroll
  for (int k = lane * 16; k < K; k += 32 * 16) {
    uint4 p[R];
    p[0] = *reinterpret_cast<const uint4*>(w0 + k);
    if constexpr (R == 2) p[1] = *reinterpret_cast<const uint4*>(w1 + k);
    if constexpr (kHalf2) {
      __half2 h[R][8];
#pragma unroll
      for (int r = 0; r < R; ++r) w8_to_half2<W>(p[r], h[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4* xp = reinterpret_cast<const uint4*>(xin + static_cast<int64_t>(m) * K + k);
        const uint4 xw[2] = {xp[0], xp[1]};  // x[m, k .. k + 15]
        __half2 xv[8];
        memcpy(xv, xw, sizeof xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          __half2 s = __hmul2(h[r][0], xv[0]);
#pragma unroll
          for (int i = 1; i < 8; ++i) s = __hfma2(h[r][i], xv[i], s);
          const float2 f = __half22float2(s);
          acc[r][m] += f.x + f.y;
        }
      }
    } else {
      float a[R][16];
#pragma unroll
      for (int r = 0; r < R; ++r) w8_to_float<W>(p[r], a[r]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[16];
        load_float<T, 16>(xin + static_cast<int64_t>(m) * K + k, xv);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][m] = fmaf(a[r][i], xv[i], acc[r][m]);
        }
      }
    }
  }
  // kHalf2 summed W / kHalf2Scale: the power of two goes back into the row's scale (exact).
  auto factor = [&](int, int row) { return w_scale[row] * (kHalf2 ? kHalf2Scale<W> : 1.f); };
  gemv_end<T, M, kGateUp, R, F>(acc, factor, y, N, n0, n1, two, lane, fuse);
}

template <typename T, typename W, int M, bool kGateUp, bool kHalf2, int F>
void launch_rows(const T* x, const W* w, const float* ws, T* y, int N, int K, cudaStream_t stream,
                 const GemvFusion<T>& fuse) {
  const size_t smem = (F & kFuseNorm) != 0 ? static_cast<size_t>(K) * sizeof(T) : 0;
  const int prefetch = prefetch_row_bytes(int64_t{K} * static_cast<int64_t>(sizeof(W)),
                                          kGateUp ? 2 * int64_t{N} : N);
  if constexpr ((F & kFuseRope) != 0) {  // a warp per rotation pair (WarpRows, kPairs)
    const int blocks = static_cast<int>(ceil_div(N / 2, kWarps));
    launch_kernel(gemv_w8_kernel<T, W, M, false, 2, kHalf2, F>, blocks, kWarps * 32, smem, stream,
                  x, w, ws, y, N, K, fuse, prefetch);
  } else if (!kGateUp && N <= kOneRowMaxN) {
    const int blocks = static_cast<int>(ceil_div(N, kWarps));
    launch_kernel(gemv_w8_kernel<T, W, M, false, 1, kHalf2, F>, blocks, kWarps * 32, smem, stream,
                  x, w, ws, y, N, K, fuse, prefetch);
  } else {
    const int blocks = static_cast<int>(ceil_div(N, kGateUp ? kWarps : kWarps * 2));
    launch_kernel(gemv_w8_kernel<T, W, M, kGateUp, 2, kHalf2, F>, blocks, kWarps * 32, smem, stream,
                  x, w, ws, y, N, K, fuse, prefetch);
  }
}

template <typename T, typename W, int M, bool kGateUp, int F>
void launch_math(const T* x, const W* w, const float* ws, T* y, int N, int K, bool half2,
                 cudaStream_t stream, const GemvFusion<T>& fuse) {
  if constexpr (std::is_same_v<T, __half>) {
    if (half2) return launch_rows<T, W, M, kGateUp, true, F>(x, w, ws, y, N, K, stream, fuse);
  }
  launch_rows<T, W, M, kGateUp, false, F>(x, w, ws, y, N, K, stream, fuse);
}

}  // namespace

template <typename T, typename W, bool kGateUp>
void launch_gemv_w8(const T* x, const W* w, const float* w_scale, T* y, int M, int N, int K,
                    bool half2, cudaStream_t stream, const GemvFusion<T>& fuse) {
  if (fuse.any()) {  // M == 1, checked by the caller
    return with_fusion<kGateUp>(fusion_bits(fuse), [&](auto f) {
      launch_math<T, W, 1, kGateUp, decltype(f)::value>(x, w, w_scale, y, N, K, half2, stream,
                                                        fuse);
    });
  }
  with_rows(M, [&](auto m) {
    launch_math<T, W, decltype(m)::value, kGateUp, 0>(x, w, w_scale, y, N, K, half2, stream, fuse);
  });
}

#define LLAMA2_INSTANTIATE(T, W)                                                                 \
  template void launch_gemv_w8<T, W, false>(const T*, const W*, const float*, T*, int, int, int, \
                                            bool, cudaStream_t, const GemvFusion<T>&);           \
  template void launch_gemv_w8<T, W, true>(const T*, const W*, const float*, T*, int, int, int,  \
                                           bool, cudaStream_t, const GemvFusion<T>&);
LLAMA2_INSTANTIATE(__half, int8_t)
LLAMA2_INSTANTIATE(__nv_bfloat16, int8_t)
LLAMA2_INSTANTIATE(__half, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE(__nv_bfloat16, __nv_fp8_e4m3)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels::gemv_detail
