#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"
#include "kernels/gemv_common.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {
namespace {
using namespace gemv_detail;

// Plain: a warp owns rows n0 .. n0 + R - 1 of W and writes those columns of y.
// kGateUp: W is the fused [gate; up] matrix [2N, K]; a warp owns output j = its index, reads rows
// j (gate) and N + j (up) and writes y[:, j] = round_T(silu_mul(round_T(gate), round_T(up))): the
// GEMM output rounding and launch_swiglu, without the [M, 2N] intermediate or a second launch.
// Types: y is T; W is T, or int8 / fp8 e4m3 with w_scale[rows of W] (quantized weights); x is T,
// or fp8 e4m3 with x_scale[M] (fp8 activations). A sum is multiplied by its scales once, at the
// end: y[m, n] = round_T(x_scale[m] * w_scale[n] * sum_k x[m, k] * w[n, k]).
// F (GemvFusion, gemv_common.cuh): kFuseNorm reads x as the residual stream and multiplies its
// rmsnorm (in shared memory), kFuseAdd adds the product to y. One row only.
template <typename T, typename X, typename W, int M, bool kGateUp, int R, int F>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const X* __restrict__ x, const float* __restrict__ x_scale, const W* __restrict__ w,
                const float* __restrict__ w_scale, T* __restrict__ y, int N, int K,
                const GemvFusion<T> fuse, int prefetch) {
  static_assert(R == 2 || (R == 1 && !kGateUp), "gate|up reads two rows per output");
  static_assert(F == 0 || (M == 1 && std::is_same_v<X, T>), "fusions: one row, x in T");
  constexpr bool kXScale = std::is_same_v<X, __nv_fp8_e4m3>;
  constexpr bool kWScale = !std::is_same_v<W, T>;
  constexpr int V = kVec16<W>;  // elements per 16-byte load of W
  // ~8 16-byte loads of W in flight per lane (fewer for 1-byte weights: each load feeds 16 FMAs
  // per row of x, and the registers for x grow with it).
  constexpr int kUnroll = (R == 1 ? 8 : 4) / (V > 8 ? 2 : 1);
  const int lane = threadIdx.x & 31;
  const WarpRows<W, kGateUp, R, (F & kFuseRope) != 0> rows(w, N, K, fuse.rope.head_dim / 2);
  const int n0 = rows.n0, n1 = rows.n1;
  const bool two = rows.two;
  const W *w0 = rows.w0, *w1 = rows.w1;
  const X* xin = gemv_begin<X, T, W, F>(x, w0, w1, n0 < N, two, K, prefetch, fuse);
  if (n0 >= N) return;

  float acc[R][M] = {};
#pragma unroll kUnroll
  for (int k = lane * V; k < K; k += 32 * V) {
    float a[V], b[V];
    load_float<W, V>(w0 + k, a);
    if constexpr (R == 2) load_float<W, V>(w1 + k, b);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[V];
      load_float<X, V>(xin + static_cast<int64_t>(m) * K + k, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        acc[0][m] = fmaf(a[i], xv[i], acc[0][m]);
        if constexpr (R == 2) acc[R - 1][m] = fmaf(b[i], xv[i], acc[R - 1][m]);
      }
    }
  }
  // The factor of a row's sum: x_scale[m] * w_scale[row] (1 for unquantized operands).
  auto factor = [&](int m, int row) {
    float f = 1.f;
    if constexpr (kXScale) f *= x_scale[m];
    if constexpr (kWScale) f *= w_scale[row];
    return f;
  };
  gemv_end<T, M, kGateUp, R, F>(acc, factor, y, N, n0, n1, two, lane, fuse);
}

template <typename T, typename X, typename W, int M, bool kGateUp, int F>
void launch_m(const X* x, const float* xs, const W* w, const float* ws, T* y, int N, int K,
              cudaStream_t stream, const GemvFusion<T>& fuse) {
  const size_t smem = (F & kFuseNorm) != 0 ? static_cast<size_t>(K) * sizeof(T) : 0;
  const int prefetch = prefetch_row_bytes(int64_t{K} * static_cast<int64_t>(sizeof(W)),
                                          kGateUp ? 2 * int64_t{N} : N);
  if constexpr ((F & kFuseRope) != 0) {  // a warp per rotation pair (WarpRows, kPairs)
    const int blocks = static_cast<int>(ceil_div(N / 2, kWarps));
    launch_kernel(gemv_kernel<T, X, W, M, false, 2, F>, blocks, kWarps * 32, smem, stream, x, xs, w,
                  ws, y, N, K, fuse, prefetch);
  } else if (!kGateUp && N <= kOneRowMaxN) {
    const int blocks = static_cast<int>(ceil_div(N, kWarps));
    launch_kernel(gemv_kernel<T, X, W, M, false, 1, F>, blocks, kWarps * 32, smem, stream, x, xs, w,
                  ws, y, N, K, fuse, prefetch);
  } else {
    const int blocks = static_cast<int>(ceil_div(N, kGateUp ? kWarps : kWarps * 2));
    launch_kernel(gemv_kernel<T, X, W, M, kGateUp, 2, F>, blocks, kWarps * 32, smem, stream, x, xs,
                  w, ws, y, N, K, fuse, prefetch);
  }
}

template <typename T, typename X, typename W, bool kGateUp>
cudaError_t launch_gemv_kind(const X* x, const float* xs, const W* w, const float* ws, T* y, int M,
                             int N, int K, cudaStream_t stream, GemvMath math,
                             const GemvFusion<T>& fuse) {
  // W8A16: 1-byte W, x in T. The generic kernel (kConvert) is kept only for int8 W (the A/B).
  constexpr bool kW8A16 = sizeof(W) == 1 && std::is_same_v<X, T>;
  constexpr bool kConvertable = !kW8A16 || std::is_same_v<W, int8_t>;
  if (math == GemvMath::kAuto) math = kW8A16 ? GemvMath::kFp32 : GemvMath::kConvert;
  LLAMA2_LAUNCH_REQUIRE(
      math == GemvMath::kConvert ? kConvertable
                                 : kW8A16 && (math == GemvMath::kFp32 || std::is_same_v<T, __half>),
      "GemvMath " + std::to_string(static_cast<int>(math)) + " does not take W " +
          std::to_string(sizeof(W)) + " bytes, x " + (std::is_same_v<X, T> ? "in T" : "fp8") +
          ", T " + dtype_name<T>() + " (kHalf2: fp16 x; kFp32/kHalf2: 1-byte W, x in T)");
  LLAMA2_LAUNCH_REQUIRE(M >= 1 && M <= kGemvMaxRows,
                        "M " + std::to_string(M) + ", allowed 1.." + std::to_string(kGemvMaxRows));
  LLAMA2_LAUNCH_REQUIRE(N >= 1, "N " + std::to_string(N));
  LLAMA2_LAUNCH_REQUIRE(K >= 1 && K % kVec16<W> == 0,
                        "K " + std::to_string(K) + " must be a positive multiple of " +
                            std::to_string(kVec16<W>) + " (16 bytes)");
  LLAMA2_LAUNCH_REQUIRE(x != nullptr && w != nullptr && y != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(
      (std::is_same_v<X, T> || xs != nullptr) && (std::is_same_v<W, T> || ws != nullptr),
      "a quantized operand needs its scales");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(x, 16) && is_aligned(w, 16), "16-byte alignment");
  if (fuse.any()) {
    LLAMA2_LAUNCH_REQUIRE((M == 1 && std::is_same_v<X, T>),
                          "a fusion (norm, residual add, RoPE) needs one row (M " +
                              std::to_string(M) + ") and x in T (not fp8)");
    LLAMA2_LAUNCH_REQUIRE(!kGateUp || !fuse.add_to_y, "gate|up takes no residual add");
    const GemvRopeKv& r = fuse.rope;
    LLAMA2_LAUNCH_REQUIRE(
        !r.on() || (!kGateUp && !fuse.add_to_y && r.heads > 0 && r.kv_heads > 0 && r.head_dim > 0 &&
                    r.head_dim % 2 == 0 && r.block_size > 0 &&
                    N == (r.heads + 2 * r.kv_heads) * r.head_dim && r.pos != nullptr &&
                    r.slot != nullptr && r.v_cache != nullptr && r.table != nullptr),
        "the RoPE epilogue needs a plain product without residual add, N (" + std::to_string(N) +
            ") = (heads " + std::to_string(r.heads) + " + 2 x kv_heads " +
            std::to_string(r.kv_heads) + ") x head_dim " + std::to_string(r.head_dim) +
            " (even), a block size, pos, slot, both caches and the (cos, sin) table");
    LLAMA2_LAUNCH_REQUIRE(
        fuse.norm_weight == nullptr ||
            (K % kVec16<T> == 0 && static_cast<int64_t>(K) * sizeof(T) <= kGemvNormMaxBytes &&
             is_aligned(fuse.norm_weight, 16)),
        "the fused norm needs K (" + std::to_string(K) + ") a multiple of " +
            std::to_string(kVec16<T>) + " with K x " + std::to_string(sizeof(T)) +
            " bytes <= " + std::to_string(kGemvNormMaxBytes) + " and a 16-byte aligned weight");
  }
  if constexpr (kW8A16) {
    if (math != GemvMath::kConvert) {
      launch_gemv_w8<T, W, kGateUp>(x, w, ws, y, M, N, K, math == GemvMath::kHalf2, stream, fuse);
      return cudaGetLastError();
    }
  }
  if constexpr (kConvertable) {
    if (fuse.any()) {
      if constexpr (std::is_same_v<X, T>) {
        with_fusion<kGateUp>(fusion_bits(fuse), [&](auto f) {
          launch_m<T, X, W, 1, kGateUp, decltype(f)::value>(x, xs, w, ws, y, N, K, stream, fuse);
        });
      }
      return cudaGetLastError();
    }
    with_rows(M, [&](auto m) {
      launch_m<T, X, W, decltype(m)::value, kGateUp, 0>(x, xs, w, ws, y, N, K, stream, fuse);
    });
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_gemv(const T* x, const T* w, T* y, int M, int N, int K, cudaStream_t stream,
                        const GemvFusion<T>& fuse) {
  return launch_gemv_kind<T, T, T, false>(x, nullptr, w, nullptr, y, M, N, K, stream,
                                          GemvMath::kAuto, fuse);
}

template <typename T>
cudaError_t launch_gemv_gate_up_swiglu(const T* x, const T* w_gate_up, T* act, int M, int F, int K,
                                       cudaStream_t stream, const GemvFusion<T>& fuse) {
  return launch_gemv_kind<T, T, T, true>(x, nullptr, w_gate_up, nullptr, act, M, F, K, stream,
                                         GemvMath::kAuto, fuse);
}

template <typename T, typename X, typename W>
cudaError_t launch_gemv_q(const X* x, const float* x_scale, const W* w, const float* w_scale, T* y,
                          int M, int N, int K, cudaStream_t stream, GemvMath math,
                          const GemvFusion<T>& fuse) {
  return launch_gemv_kind<T, X, W, false>(x, x_scale, w, w_scale, y, M, N, K, stream, math, fuse);
}

template <typename T, typename X, typename W>
cudaError_t launch_gemv_q_gate_up_swiglu(const X* x, const float* x_scale, const W* w_gate_up,
                                         const float* w_scale, T* act, int M, int F, int K,
                                         cudaStream_t stream, GemvMath math,
                                         const GemvFusion<T>& fuse) {
  return launch_gemv_kind<T, X, W, true>(x, x_scale, w_gate_up, w_scale, act, M, F, K, stream, math,
                                         fuse);
}

#define LLAMA2_INSTANTIATE(T)                                                               \
  template cudaError_t launch_gemv<T>(const T*, const T*, T*, int, int, int, cudaStream_t,  \
                                      const GemvFusion<T>&);                                \
  template cudaError_t launch_gemv_gate_up_swiglu<T>(const T*, const T*, T*, int, int, int, \
                                                     cudaStream_t, const GemvFusion<T>&);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

#define LLAMA2_INSTANTIATE_Q(T, X, W)                                                             \
  template cudaError_t launch_gemv_q<T, X, W>(const X*, const float*, const W*, const float*, T*, \
                                              int, int, int, cudaStream_t, GemvMath,              \
                                              const GemvFusion<T>&);                              \
  template cudaError_t launch_gemv_q_gate_up_swiglu<T, X, W>(                                     \
      const X*, const float*, const W*, const float*, T*, int, int, int, cudaStream_t, GemvMath,  \
      const GemvFusion<T>&);
LLAMA2_INSTANTIATE_Q(__half, __half, int8_t)
LLAMA2_INSTANTIATE_Q(__nv_bfloat16, __nv_bfloat16, int8_t)
LLAMA2_INSTANTIATE_Q(__half, __half, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE_Q(__nv_bfloat16, __nv_bfloat16, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE_Q(__half, __nv_fp8_e4m3, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE_Q(__nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e4m3)
#undef LLAMA2_INSTANTIATE_Q

}  // namespace llama2::kernels
