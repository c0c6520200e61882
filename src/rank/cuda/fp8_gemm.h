// FP8 products on Hopper's tensor cores for --weight-dtype fp8 (W8A8, docs in kernels/quant.cuh):
//   y[m, n] = round_T(x_scale[m] * w_scale[n] * sum_k xq[m, k] * wq[n, k])
// cuBLASLt multiplies the e4m3 operands into fp32 sums (a scratch [max_rows, max_n]), then
// kernels::launch_scale_outer applies both scales and rounds to T. (cuBLASLt's own per-row
// "outer vector" scale mode, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, found no algorithm on an
// H200 with CUDA 13.0 for these shapes; fp16 output of the unscaled sums would overflow.) The GEMV
// kernel (kernels/gemv.cuh, launch_gemv_q) computes the same numbers for a few rows.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <utility>

#include "rank/cuda/device_buffer.h"

namespace llama2 {

class Fp8Gemm {
 public:
  // out_type: CUDA_R_16F or CUDA_R_16BF, the element type of y; at most max_rows x max_n outputs.
  Fp8Gemm(cudaDataType_t out_type, int64_t max_rows, int64_t max_n, cudaStream_t stream);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // xq [M, K] and wq [N, K] e4m3, 16-byte aligned, K a multiple of 16; y [M, N] of out_type.
  // Throws Error when cuBLASLt has no algorithm for the shape (the first call per shape asks) or
  // M x N exceeds the scratch.
  void run(const void* xq, const float* x_scale,  // [M, K], [M]
           const void* wq, const float* w_scale,  // [N, K], [N]
           void* y,                               // [M, N]
           int M, int N, int K);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int M, int N, int K);

  cudaDataType_t out_type_;
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer acc_;  // [max_rows, max_n] fp32 sums
  int64_t acc_elems_;
  std::map<std::pair<int, std::pair<int, int>>, Plan> plans_;  // by (M, (N, K))
};

}  // namespace llama2
