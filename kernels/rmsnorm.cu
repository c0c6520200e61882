#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/add_rmsnorm_row.cuh"
#include "kernels/dtype.cuh"
#include "kernels/quant_rows.cuh"
#include "kernels/reduce.cuh"
#include "kernels/rmsnorm.cuh"

namespace llama2::kernels {

// Both kernels make two passes over the row. Each thread revisits exactly the elements it touched
// in pass 1, so the in-place cases (out == x; residual rewritten in pass 1, re-read in pass 2) need
// no barrier beyond the reduction's. The second read of a row of <= 16 KB hits L1/L2.

// With q8 on, a third pass: the row's stored values quantized (kernels/quant_rows.cuh), re-read
// by each thread from its own pass-2 stores.
template <typename T, int N>
__device__ __forceinline__ void quantize_out_row(const T* orow, int n_vec, float amax, RowsE4m3 q8,
                                                 int64_t row, int hidden) {
  const float s = e4m3_row_scale(amax, q8.scale + row);
  __nv_fp8_e4m3* qrow = q8.q + row * hidden;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float v[N];
    load_float<T, N>(orow + i * N, v);
    store_e4m3<N>(qrow + i * N, v, s);
  }
}

template <typename T, int N>
static __global__ void rmsnorm_kernel(const T* x, const T* weight, int hidden, float eps, T* out,
                                      RowsE4m3 q8) {
  wait_for_previous_grid();
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  T* orow = out + row * hidden;
  const int n_vec = hidden / N;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float v[N];
    load_float<T, N>(xr + i * N, v);
#pragma unroll
    for (int e = 0; e < N; ++e) ss += v[e] * v[e];
  }
  ss = block_sum(ss);
  // sqrtf and the division are correctly rounded (no fast-math), so inv is within 1 ulp of HF's.
  const float inv = 1.f / sqrtf(ss / static_cast<float>(hidden) + eps);
  float amax = 0.f;
  for (int i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float v[N], w[N];
    load_float<T, N>(xr + i * N, v);
    load_float<T, N>(weight + i * N, w);
#pragma unroll
    for (int e = 0; e < N; ++e) {
      v[e] = w[e] * round_to<T>(v[e] * inv);
      if (q8.on()) amax = fmaxf(amax, fabsf(round_to<T>(v[e])));  // only for e4m3 rows
    }
    store_float<T, N>(orow + i * N, v);
  }
  if (q8.on()) quantize_out_row<T, N>(orow, n_vec, amax, q8, row, hidden);
}

// kScaled: x is `sums` (an fp8 product's unscaled sums (Fp8Sum) and scales), not `x`.
template <typename T, int N, bool kScaled>
static __global__ void add_rmsnorm_kernel(T* residual, const T* x, ScaledSums sums, const T* weight,
                                          int hidden, float eps, T* out, RowsE4m3 q8) {
  wait_for_previous_grid();
  const int64_t row = blockIdx.x;
  T* rrow = residual + row * hidden;
  const T* xr = x + row * hidden;
  T* orow = out + row * hidden;
  const int n_vec = hidden / N;
  // Read before the barriers: q8.scale may be the same array (launch_add_rmsnorm_scaled).
  const float sx = kScaled ? sums.x_scale[row] : 0.f;
  auto addend = [&](int i, float(&v)[N]) {
    if constexpr (kScaled) {
      float w[N];
      load_float<Fp8Sum, N>(sums.acc + row * hidden + i * N, v);
      load_float<float, N>(sums.w_scale + i * N, w);
#pragma unroll
      for (int e = 0; e < N; ++e) v[e] = round_to<T>(v[e] * (sx * w[e]));  // scale_outer's
    } else {
      load_float<T, N>(xr + i * N, v);
    }
  };
  const float amax = add_rmsnorm_row<T, N>(rrow, addend, weight, hidden, eps, orow, q8.on());
  if (q8.on()) quantize_out_row<T, N>(orow, n_vec, amax, q8, row, hidden);
}

namespace {

// 16-byte accesses when the row and every pointer allow them.
template <typename T>
bool can_vectorize(int hidden, const void* a, const void* b, const void* c, const void* d,
                   const RowsE4m3& q8) {
  return hidden % kVec16<T> == 0 && is_aligned(a, 16) && is_aligned(b, 16) && is_aligned(c, 16) &&
         is_aligned(d, 16) && (!q8.on() || is_aligned(q8.q, 16));
}

// One thread per access, rounded up to whole warps, capped at 512: a 4096-wide fp16 row is 512
// 16-byte accesses, so every thread does one load per pass; wider rows loop.
int row_threads(int n_vec) {
  return static_cast<int>(std::min<int64_t>(512, ceil_div(n_vec, 32) * 32));
}

}  // namespace

template <typename T>
cudaError_t launch_rmsnorm(const T* x, const T* weight, int n_rows, int hidden, float eps, T* out,
                           cudaStream_t stream, RowsE4m3 q8) {
  LLAMA2_LAUNCH_REQUIRE(n_rows >= 0, "n_rows " + std::to_string(n_rows));
  LLAMA2_LAUNCH_REQUIRE(hidden > 0, "hidden " + std::to_string(hidden));
  LLAMA2_LAUNCH_REQUIRE(eps >= 0.f, "eps " + std::to_string(eps));
  if (n_rows == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(x != nullptr && weight != nullptr && out != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(!q8.on() || q8.scale != nullptr, "e4m3 rows without scales");
  constexpr int V = kVec16<T>;
  if (can_vectorize<T>(hidden, x, weight, out, out, q8)) {
    launch_kernel(rmsnorm_kernel<T, V>, n_rows, row_threads(hidden / V), 0, stream, x, weight,
                  hidden, eps, out, q8);
  } else {
    launch_kernel(rmsnorm_kernel<T, 1>, n_rows, row_threads(hidden), 0, stream, x, weight, hidden,
                  eps, out, q8);
  }
  return cudaGetLastError();
}

namespace {

// Both residual-add launchers: the block's output is x (T) or, when sums.on(), the scaled sums.
template <typename T>
cudaError_t launch_add_rmsnorm_from(T* residual, const T* x, const ScaledSums& sums,
                                    const T* weight, int n_rows, int hidden, float eps, T* out,
                                    cudaStream_t stream, const RowsE4m3& q8) {
  LLAMA2_LAUNCH_REQUIRE(n_rows >= 0, "n_rows " + std::to_string(n_rows));
  LLAMA2_LAUNCH_REQUIRE(hidden > 0, "hidden " + std::to_string(hidden));
  LLAMA2_LAUNCH_REQUIRE(eps >= 0.f, "eps " + std::to_string(eps));
  if (n_rows == 0) return cudaSuccess;
  const bool scaled = sums.on();
  LLAMA2_LAUNCH_REQUIRE(scaled ? sums.x_scale != nullptr && sums.w_scale != nullptr : x != nullptr,
                        "");
  LLAMA2_LAUNCH_REQUIRE(residual != nullptr && weight != nullptr && out != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(out != residual, "the sum stays in residual, the norm goes to out");
  LLAMA2_LAUNCH_REQUIRE(!q8.on() || q8.scale != nullptr, "e4m3 rows without scales");
  constexpr int V = kVec16<T>;
  const void* in = scaled ? static_cast<const void*>(sums.acc) : x;
  const bool vec = can_vectorize<T>(hidden, residual, in, weight, out, q8) &&
                   (!scaled || is_aligned(sums.w_scale, 16));
  const int threads = row_threads(vec ? hidden / V : hidden);
  if (scaled) {
    launch_kernel(vec ? add_rmsnorm_kernel<T, V, true> : add_rmsnorm_kernel<T, 1, true>, n_rows,
                  threads, 0, stream, residual, x, sums, weight, hidden, eps, out, q8);
  } else {
    launch_kernel(vec ? add_rmsnorm_kernel<T, V, false> : add_rmsnorm_kernel<T, 1, false>, n_rows,
                  threads, 0, stream, residual, x, sums, weight, hidden, eps, out, q8);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t launch_add_rmsnorm(T* residual, const T* x, const T* weight, int n_rows, int hidden,
                               float eps, T* out, cudaStream_t stream, RowsE4m3 q8) {
  return launch_add_rmsnorm_from<T>(residual, x, ScaledSums{}, weight, n_rows, hidden, eps, out,
                                    stream, q8);
}

template <typename T>
cudaError_t launch_add_rmsnorm_scaled(T* residual, ScaledSums x, const T* weight, int n_rows,
                                      int hidden, float eps, T* out, cudaStream_t stream,
                                      RowsE4m3 q8) {
  return launch_add_rmsnorm_from<T>(residual, static_cast<const T*>(nullptr), x, weight, n_rows,
                                    hidden, eps, out, stream, q8);
}

#define LLAMA2_INSTANTIATE(T)                                                                      \
  template cudaError_t launch_rmsnorm<T>(const T*, const T*, int, int, float, T*, cudaStream_t,    \
                                         RowsE4m3);                                                \
  template cudaError_t launch_add_rmsnorm<T>(T*, const T*, const T*, int, int, float, T*,          \
                                             cudaStream_t, RowsE4m3);                              \
  template cudaError_t launch_add_rmsnorm_scaled<T>(T*, ScaledSums, const T*, int, int, float, T*, \
                                                    cudaStream_t, RowsE4m3);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
