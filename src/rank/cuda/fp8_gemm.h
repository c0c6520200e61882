// FP8 products on Hopper's tensor cores for --weight-dtype fp8 (W8A8, docs in kernels/quant.cuh):
//   y[m, n] = round_T(x_scale[m] * w_scale[n] * sum_k xq[m, k] * wq[n, k])
// cuBLASLt multiplies the e4m3 operands into sums (fp32 accumulation, stored as kernels::Fp8Sum,
// bf16: a scratch [max_rows, max_n]), then
// kernels::launch_scale_outer applies both scales and rounds to T. (cuBLASLt's own per-row
// "outer vector" scale mode, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, found no algorithm on an
// H200 with CUDA 13.0 for these shapes; fp16 output of the unscaled sums would overflow.) The GEMV
// kernel (kernels/gemv.cuh, launch_gemv_q) computes the same numbers for a few rows.
//
// Which cuBLASLt algorithm: the heuristic's first choice, unless tune() timed the shape (start-up,
// LLAMA2_FP8_TUNE=1; CudaLinear::tune_fp8). Measured on an H200 at 7B shapes (llama2_bench_kernels
// fp8): the heuristic's choice is within 0-18% of its fastest candidate (most often the same one);
// what the product costs beyond the GEMM at decode sizes is the two small launches around it.
// Every candidate computes the same sums up to the order of their additions.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "kernels/quant.cuh"
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

  // The product without its scales: the sums [M, N] (valid until the next product), for a
  // consumer that applies the scales itself (kernels::ScaledSums).
  const kernels::Fp8Sum* run_sums(const void* xq, const void* wq, int M, int N, int K);

  // The gate|up product [M, N = 2F] of an fp8 MLP straight to the down projection's input: act =
  // SwiGLU of the scaled sums, quantized to e4m3 rows in `act` (kernels/quant.cuh,
  // launch_scale_swiglu_quantize): the numbers of run() + launch_swiglu + launch_quantize_rows.
  void run_swiglu_e4m3(const void* xq, const float* x_scale,  // [M, K], [M]
                       const void* wq, const float* w_scale,  // [N, K], [N]
                       kernels::RowsE4m3 act,                 // [M, N / 2], [M]
                       int M, int N, int K);

  // Times up to kTuneCandidates of the heuristic's algorithms for M x N x K (xq: [M, K] e4m3,
  // any values; weights: [N, K] e4m3 tensors of the same shape, taken in turn so that W streams
  // from HBM as in a forward pass) and keeps the fastest as this shape's algorithm. A product of
  // the same N x K with fewer rows than a tuned M takes, if cuBLASLt accepts it for that shape,
  // the algorithm of the smallest tuned M above it. Synchronizes the stream: not while it
  // captures a graph. Error as run() when cuBLASLt has no algorithm.
  struct TuneResult {
    int candidates = 0;    // algorithms that ran
    int chosen = 0;        // the fastest, as an index into the heuristic's order (0: its choice)
    double first_us = 0;   // the heuristic's first choice, microseconds per product
    double chosen_us = 0;  // the fastest
    // cuBLASLt's tile (cublasLtMatmulTile_t) and split of K of the two (for the benchmark).
    int first_tile = 0, chosen_tile = 0, first_splitk = 1, chosen_splitk = 1;
  };
  static constexpr int kTuneCandidates = 8;
  TuneResult tune(const void* xq, const std::vector<const void*>& weights, int M, int N, int K);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int M, int N, int K);
  // The descriptors of an M x N x K product, without an algorithm.
  static Plan describe(int M, int N, int K);
  static void destroy(Plan& p);
  // Up to `count` heuristic candidates, best first; Error when there is none.
  std::vector<cublasLtMatmulHeuristicResult_t> candidates(const Plan& p, int count, int M, int N,
                                                          int K);
  cublasStatus_t launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* xq,
                        const void* wq);

  cudaDataType_t out_type_;
  cudaStream_t stream_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  DeviceBuffer acc_;  // [max_rows, max_n] sums (kernels::Fp8Sum)
  int64_t acc_elems_;
  std::map<std::pair<int, std::pair<int, int>>, Plan> plans_;  // by (M, (N, K))
  // tune()'s choices: (N, K) -> M -> algorithm.
  std::map<std::pair<int, int>, std::map<int, cublasLtMatmulAlgo_t>> tuned_;
};

}  // namespace llama2
