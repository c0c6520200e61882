#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "common/check.h"
#include "kernels/quant.cuh"
#include "rank/cuda/fp8_gemm.h"

namespace llama2 {
namespace {
constexpr size_t kWorkspace = 32u << 20;
}  // namespace

Fp8Gemm::Fp8Gemm(cudaDataType_t out_type, int64_t max_rows, int64_t max_n, cudaStream_t stream)
    : out_type_(out_type),
      stream_(stream),
      workspace_(kWorkspace, "cuBLASLt FP8 workspace"),
      acc_(static_cast<size_t>(max_rows * max_n) * sizeof(float), "fp8 GEMM fp32 sums"),
      acc_elems_(max_rows * max_n) {
  LLAMA2_CHECK(out_type == CUDA_R_16F || out_type == CUDA_R_16BF);
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [shape, p] : plans_) {
    (void)cublasLtMatrixLayoutDestroy(p.a);
    (void)cublasLtMatrixLayoutDestroy(p.b);
    (void)cublasLtMatrixLayoutDestroy(p.d);
    (void)cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
}

// Column-major view (cuBLAS's): D [N x M] = op(A) . B with A = W stored [N, K] row-major, i.e.
// a K x N column-major matrix read transposed, and B = x [M, K] row-major = K x M column-major:
// the "TN" layout FP8 requires. D's N x M column-major is the sums' [M, N] row-major, in fp32.
const Fp8Gemm::Plan& Fp8Gemm::plan(int M, int N, int K) {
  const auto key = std::make_pair(M, std::make_pair(N, K));
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, N, M, N));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspace;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    (void)cublasLtMatrixLayoutDestroy(p.a);
    (void)cublasLtMatrixLayoutDestroy(p.b);
    (void)cublasLtMatrixLayoutDestroy(p.d);
    (void)cublasLtMatmulDescDestroy(p.desc);
    throw Error("cuBLASLt has no FP8 algorithm for M " + std::to_string(M) + ", N " +
                std::to_string(N) + ", K " + std::to_string(K) + " (" + cublasGetStatusString(st) +
                "); --weight-dtype fp8 needs an sm_89+ GPU (use int8 or auto)");
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Fp8Gemm::run(const void* xq, const float* x_scale, const void* wq, const float* w_scale,
                  void* y, int M, int N, int K) {
  if (M == 0) return;
  LLAMA2_CHECK(int64_t{M} * N <= acc_elems_);
  const Plan& p = plan(M, N, K);
  const float alpha = 1.f, beta = 0.f;
  float* acc = acc_.as<float>();
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, wq, p.a, xq, p.b, &beta, acc, p.d, acc, p.d,
                              &p.algo, workspace_.as<void>(), kWorkspace, stream_));
  if (out_type_ == CUDA_R_16F) {
    CUDA_CHECK(kernels::launch_scale_outer<__half>(acc, x_scale, w_scale, static_cast<__half*>(y),
                                                   M, N, stream_));
  } else {
    CUDA_CHECK(kernels::launch_scale_outer<__nv_bfloat16>(
        acc, x_scale, w_scale, static_cast<__nv_bfloat16*>(y), M, N, stream_));
  }
}

}  // namespace llama2
