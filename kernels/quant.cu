#include <cmath>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/quant.cuh"
#include "kernels/quant_rows.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {
namespace {

constexpr int kThreads = 256;

template <typename Q>
__device__ __forceinline__ float q_max() {
  return std::is_same_v<Q, int8_t> ? 127.f : kE4m3Max;
}

template <typename Q>
__device__ __forceinline__ Q quantize(float v) {
  if constexpr (std::is_same_v<Q, int8_t>) {
    return static_cast<int8_t>(
        fminf(fmaxf(rintf(v), -127.f), 127.f));  // ties to even, as torch.round
  } else {
    return from_float<__nv_fp8_e4m3>(v);
  }
}

// One block per row: the row's absolute maximum, then each element divided by the scale.
template <typename Q, typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ x, Q* __restrict__ q, float* __restrict__ scale,
                         int K) {
  wait_for_previous_grid();
  const int64_t r = blockIdx.x;
  const T* row = x + r * K;
  float amax = 0.f;
  for (int k = threadIdx.x; k < K; k += kThreads) amax = fmaxf(amax, fabsf(to_float(row[k])));
  amax = block_max(amax);
  const float s = amax > 0.f ? amax / q_max<Q>() : 1.f;  // as e4m3_row_scale (quant_rows.cuh)
  if (threadIdx.x == 0) scale[r] = s;
  Q* out = q + r * K;
  for (int k = threadIdx.x; k < K; k += kThreads) out[k] = quantize<Q>(to_float(row[k]) / s);
}

template <typename Q, typename T>
__global__ void __launch_bounds__(kThreads)
    dequantize_rows_kernel(const Q* __restrict__ q, const float* __restrict__ scale,
                           T* __restrict__ out, int K) {
  wait_for_previous_grid();
  const int64_t r = blockIdx.y;
  const int k = blockIdx.x * kThreads + threadIdx.x;
  if (k < K) out[r * K + k] = from_float<T>(scale[r] * to_float(q[r * K + k]));
}

// The same with 16 weights per thread (one 16-byte load, two 16-byte stores of fp16/bf16): the
// prefill path of --weight-dtype int8 dequantizes every projection once per forward pass, and the
// element-per-thread kernel above moved ~2.5 bytes per thread and instruction chain.
template <typename Q, typename T>
__global__ void __launch_bounds__(kThreads)
    dequantize_rows_vec16_kernel(const Q* __restrict__ q, const float* __restrict__ scale,
                                 T* __restrict__ out, int64_t pieces, int pieces_per_row) {
  wait_for_previous_grid();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= pieces) return;
  const float s = scale[i / pieces_per_row];
  float v[16];
  load_float<Q, 16>(q + i * 16, v);
#pragma unroll
  for (int j = 0; j < 16; ++j) v[j] *= s;
  store_float<T, 16>(out + i * 16, v);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scale_outer_kernel(const Fp8Sum* __restrict__ acc, const float* __restrict__ xs,
                       const float* __restrict__ ws, T* __restrict__ y, int N) {
  wait_for_previous_grid();
  const int64_t m = blockIdx.y;
  const int n = blockIdx.x * kThreads + threadIdx.x;
  if (n < N) y[m * N + n] = from_float<T>(to_float(acc[m * N + n]) * (xs[m] * ws[n]));
}

// act[j] = round_T(silu_mul(gate_j, up_j)) with gate_j and up_j the rounded scaled sums: the
// expressions of scale_outer_kernel, then swiglu_kernel.
template <typename T>
__device__ __forceinline__ float scaled_swiglu(float gate, float up, float sx, float wg, float wu) {
  return round_to<T>(silu_mul<T>(round_to<T>(gate * (sx * wg)), round_to<T>(up * (sx * wu))));
}

// One block of 1024 threads per row m, four values per thread and chunk, held in registers between
// act, the row's absolute maximum and the quantized stores: a row is one read of its sums. (A first
// version with 256 threads, one value per access and act recomputed for the stores took ~20 us
// at 64 rows of the 7B MLP, more than the three launches it replaced.)
constexpr int kSwigluThreads = 1024;

template <typename T, int kChunks>
__global__ void __launch_bounds__(kSwigluThreads)
    scale_swiglu_quantize_vec_kernel(const Fp8Sum* __restrict__ acc, const float* __restrict__ xs,
                                     const float* __restrict__ ws, int F,
                                     __nv_fp8_e4m3* __restrict__ q, float* __restrict__ q_scale) {
  wait_for_previous_grid();
  const int64_t m = blockIdx.x;
  const int n4 = F / 4;
  const Fp8Sum* gate = acc + m * 2 * F;  // 4 sums per access
  const Fp8Sum* up = gate + F;
  const float4* w_gate = reinterpret_cast<const float4*>(ws);
  const float4* w_up = w_gate + n4;
  const float sx = xs[m];
  float a[kChunks][4];
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kSwigluThreads;
    if (i < n4) {
      float g[4], u[4];
      load_float<Fp8Sum, 4>(gate + 4 * i, g);
      load_float<Fp8Sum, 4>(up + 4 * i, u);
      const float4 wg = w_gate[i], wu = w_up[i];
      a[c][0] = scaled_swiglu<T>(g[0], u[0], sx, wg.x, wu.x);
      a[c][1] = scaled_swiglu<T>(g[1], u[1], sx, wg.y, wu.y);
      a[c][2] = scaled_swiglu<T>(g[2], u[2], sx, wg.z, wu.z);
      a[c][3] = scaled_swiglu<T>(g[3], u[3], sx, wg.w, wu.w);
#pragma unroll
      for (int e = 0; e < 4; ++e) amax = fmaxf(amax, fabsf(a[c][e]));
    }
  }
  const float s = e4m3_row_scale(amax, q_scale + m);
  __nv_fp8_e4m3* row = q + m * F;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kSwigluThreads;
    if (i < n4) store_e4m3<4>(row + 4 * i, a[c], s);
  }
}

// Any F (not a multiple of 4, or wider than the vector kernel's registers): one value per access,
// act recomputed for the stores.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    scale_swiglu_quantize_kernel(const Fp8Sum* __restrict__ acc, const float* __restrict__ xs,
                                 const float* __restrict__ ws, int F, __nv_fp8_e4m3* __restrict__ q,
                                 float* __restrict__ q_scale) {
  wait_for_previous_grid();
  const int64_t m = blockIdx.x;
  const Fp8Sum* gate = acc + m * 2 * F;
  const Fp8Sum* up = gate + F;
  const float sx = xs[m];
  float amax = 0.f;
  for (int j = threadIdx.x; j < F; j += kThreads) {
    amax = fmaxf(amax,
                 fabsf(scaled_swiglu<T>(to_float(gate[j]), to_float(up[j]), sx, ws[j], ws[F + j])));
  }
  const float s = e4m3_row_scale(amax, q_scale + m);
  __nv_fp8_e4m3* row = q + m * F;
  for (int j = threadIdx.x; j < F; j += kThreads) {
    row[j] = from_float<__nv_fp8_e4m3>(
        scaled_swiglu<T>(to_float(gate[j]), to_float(up[j]), sx, ws[j], ws[F + j]) / s);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_scale_swiglu_quantize(const Fp8Sum* acc, const float* x_scale,
                                         const float* w_scale, int M, int F, RowsE4m3 out,
                                         cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(M >= 1 && F >= 1, "M " + std::to_string(M) + ", F " + std::to_string(F));
  LLAMA2_LAUNCH_REQUIRE(acc != nullptr && x_scale != nullptr && w_scale != nullptr &&
                            out.q != nullptr && out.scale != nullptr,
                        "");
  const unsigned rows = static_cast<unsigned>(M);
  const int n4 = F / 4;
  const bool vec = F % 4 == 0 && is_aligned(acc, 16) && is_aligned(w_scale, 16) &&
                   is_aligned(out.q, 4) && n4 <= 8 * kSwigluThreads;
  if (vec && n4 <= 4 * kSwigluThreads) {
    launch_kernel(scale_swiglu_quantize_vec_kernel<T, 4>, rows, kSwigluThreads, 0, stream, acc,
                  x_scale, w_scale, F, out.q, out.scale);
  } else if (vec) {
    launch_kernel(scale_swiglu_quantize_vec_kernel<T, 8>, rows, kSwigluThreads, 0, stream, acc,
                  x_scale, w_scale, F, out.q, out.scale);
  } else {
    launch_kernel(scale_swiglu_quantize_kernel<T>, rows, kThreads, 0, stream, acc, x_scale, w_scale,
                  F, out.q, out.scale);
  }
  return cudaGetLastError();
}
template cudaError_t launch_scale_swiglu_quantize<__half>(const Fp8Sum*, const float*, const float*,
                                                          int, int, RowsE4m3, cudaStream_t);
template cudaError_t launch_scale_swiglu_quantize<__nv_bfloat16>(const Fp8Sum*, const float*,
                                                                 const float*, int, int, RowsE4m3,
                                                                 cudaStream_t);

template <typename T>
cudaError_t launch_scale_outer(const Fp8Sum* acc, const float* x_scale, const float* w_scale, T* y,
                               int M, int N, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(M >= 1 && M <= 65535, "M " + std::to_string(M) + ", allowed 1..65535");
  LLAMA2_LAUNCH_REQUIRE(N >= 1, "N " + std::to_string(N));
  LLAMA2_LAUNCH_REQUIRE(acc != nullptr && x_scale != nullptr && w_scale != nullptr && y != nullptr,
                        "");
  const dim3 grid(static_cast<unsigned>(ceil_div(N, kThreads)), static_cast<unsigned>(M));
  launch_kernel(scale_outer_kernel<T>, grid, kThreads, 0, stream, acc, x_scale, w_scale, y, N);
  return cudaGetLastError();
}
template cudaError_t launch_scale_outer<__half>(const Fp8Sum*, const float*, const float*, __half*,
                                                int, int, cudaStream_t);
template cudaError_t launch_scale_outer<__nv_bfloat16>(const Fp8Sum*, const float*, const float*,
                                                       __nv_bfloat16*, int, int, cudaStream_t);

template <typename Q, typename T>
cudaError_t launch_quantize_rows(const T* x, Q* q, float* scale, int64_t rows, int K,
                                 cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(rows >= 1 && rows <= 0x7fffffff, "rows " + std::to_string(rows));
  LLAMA2_LAUNCH_REQUIRE(K >= 1, "K " + std::to_string(K));
  LLAMA2_LAUNCH_REQUIRE(x != nullptr && q != nullptr && scale != nullptr, "");
  launch_kernel(quantize_rows_kernel<Q, T>, static_cast<unsigned>(rows), kThreads, 0, stream, x, q,
                scale, K);
  return cudaGetLastError();
}

template <typename Q, typename T>
cudaError_t launch_dequantize_rows(const Q* q, const float* scale, T* out, int64_t rows, int K,
                                   cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(K >= 1, "K " + std::to_string(K));
  LLAMA2_LAUNCH_REQUIRE(q != nullptr && scale != nullptr && out != nullptr, "");
  if (K % 16 == 0 && is_aligned(q, 16) && is_aligned(out, 16)) {
    const int64_t pieces = rows * (K / 16);
    LLAMA2_LAUNCH_REQUIRE(rows >= 1 && ceil_div(pieces, kThreads) <= 0x7fffffff,
                          "rows " + std::to_string(rows));
    launch_kernel(dequantize_rows_vec16_kernel<Q, T>,
                  static_cast<unsigned>(ceil_div(pieces, kThreads)), kThreads, 0, stream, q, scale,
                  out, pieces, K / 16);
    return cudaGetLastError();
  }
  LLAMA2_LAUNCH_REQUIRE(rows >= 1 && rows <= 65535,
                        "rows " + std::to_string(rows) + ", allowed 1..65535");
  const dim3 grid(static_cast<unsigned>(ceil_div(K, kThreads)), static_cast<unsigned>(rows));
  launch_kernel(dequantize_rows_kernel<Q, T>, grid, kThreads, 0, stream, q, scale, out, K);
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(Q, T)                                                              \
  template cudaError_t launch_quantize_rows<Q, T>(const T*, Q*, float*, int64_t, int,         \
                                                  cudaStream_t);                              \
  template cudaError_t launch_dequantize_rows<Q, T>(const Q*, const float*, T*, int64_t, int, \
                                                    cudaStream_t);
LLAMA2_INSTANTIATE(int8_t, float)
LLAMA2_INSTANTIATE(int8_t, __half)
LLAMA2_INSTANTIATE(int8_t, __nv_bfloat16)
LLAMA2_INSTANTIATE(__nv_fp8_e4m3, float)
LLAMA2_INSTANTIATE(__nv_fp8_e4m3, __half)
LLAMA2_INSTANTIATE(__nv_fp8_e4m3, __nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
