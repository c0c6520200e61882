// Row-wise symmetric quantization for --weight-dtype fp8 | int8 (src/rank/cuda/cuda_weights.h).
// One fp32 scale per row: per output channel for a weight W[N, K], per token for an activation
// x[M, K] (fp8 only: W8A8 with dynamic per-token scales, the scheme vLLM calls fp8 "dynamic").
//   s[r] = max_k |x[r, k]| / Qmax   (Qmax = 448 for e4m3, 127 for int8; s = 1 for an all-zero row)
//   q[r, k] = round(x[r, k] / s[r]) (e4m3: round to nearest even, saturating; int8: nearest, ties
//             to even as torch.round, clamped to +-127)
// so that x ~= s[r] * q[r, k]. The same rule is applied by the PyTorch reference
// (tests/reference/make_fixtures.py --weight-dtype).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// Q: int8_t or __nv_fp8_e4m3; T: float, __half or __nv_bfloat16. One block per row.
// Where a kernel that produces activation rows also writes them quantized by the rule above (e4m3,
// per-row scale, applied to the values it stores): the first step of the fp8 product that reads
// them, which then skips its own launch_quantize_rows (src/rank/cuda/linear.h, fp8_rows).
struct RowsE4m3 {
  __nv_fp8_e4m3* q = nullptr;  // [rows, K]
  float* scale = nullptr;      // [rows]
  __host__ __device__ bool on() const { return q != nullptr; }
};

// The element type of an fp8 product's unscaled sums (cuBLASLt's output, read once by the kernel
// that applies the scales): bf16, fp32's exponent range in half the bytes. The sums of e4m3
// products do not fit fp16 (up to K x 448^2), and at 2048 rows of a 7B layer their fp32 copies
// were ~700 MB written and read back per layer. One more rounding (kFp8SumRoundoff relative)
// before the scales, far inside the e4m3 operands' own error (2^-4 per element).
// -DLLAMA2_FP8_SUMS_FP32=1: fp32 (the A/B build).
#if defined(LLAMA2_FP8_SUMS_FP32) && LLAMA2_FP8_SUMS_FP32
using Fp8Sum = float;
constexpr double kFp8SumRoundoff = 0x1p-24;
#else
using Fp8Sum = __nv_bfloat16;
constexpr double kFp8SumRoundoff = 0x1p-8;  // 8 significant bits: half an ulp
#endif

// An fp8 product's output before its scales: y[m, n] = round_T(acc[m, n] * (x_scale[m] *
// w_scale[n])) (launch_scale_outer's numbers), for a consumer that applies them as it reads y
// (kernels/rmsnorm.cuh, launch_add_rmsnorm_scaled).
struct ScaledSums {
  const Fp8Sum* acc = nullptr;     // [M, N] sums
  const float* x_scale = nullptr;  // [M]
  const float* w_scale = nullptr;  // [N]
  __host__ __device__ bool on() const { return acc != nullptr; }
};

template <typename Q, typename T>
cudaError_t launch_quantize_rows(const T* x,    // [rows, K]
                                 Q* q,          // [rows, K]
                                 float* scale,  // [rows]
                                 int64_t rows, int K, cudaStream_t stream);

// out[r, k] = round_T(scale[r] * q[r, k]): the weights int8 products of many rows (prefill) are
// multiplied as (cuBLAS on a dequantized copy; src/rank/cuda/linear.h). 16 elements per thread
// when K % 16 == 0 and q, out are 16-byte aligned (any rows); one per thread otherwise (rows up
// to 65535).
template <typename Q, typename T>
cudaError_t launch_dequantize_rows(const Q* q,          // [rows, K]
                                   const float* scale,  // [rows]
                                   T* out,              // [rows, K]
                                   int64_t rows, int K, cudaStream_t stream);

// y[m, n] = round_T(acc[m, n] * (x_scale[m] * w_scale[n])): the scales of an fp8 product applied
// to its sums (the same factor, in the same order, as launch_gemv_q's epilogue).
template <typename T>
cudaError_t launch_scale_outer(const Fp8Sum* acc,     // [M, N]
                               const float* x_scale,  // [M]
                               const float* w_scale,  // [N]
                               T* y,                  // [M, N]
                               int M, int N, cudaStream_t stream);

// The gate|up product of an fp8 MLP from its sums to the down projection's e4m3 input, in one
// launch instead of three: act = SwiGLU of the scaled gate and up values (launch_scale_outer, then
// launch_swiglu: the same roundings), then act's rows quantized (launch_quantize_rows), bit for
// bit the numbers of the three kernels. act itself is not stored. One block per row.
template <typename T>
cudaError_t launch_scale_swiglu_quantize(const Fp8Sum* acc,     // [M, 2F]: gate sums, then up
                                         const float* x_scale,  // [M]
                                         const float* w_scale,  // [2F]
                                         int M, int F,
                                         RowsE4m3 out,  // [M, F] and [M]
                                         cudaStream_t stream);

}  // namespace llama2::kernels
