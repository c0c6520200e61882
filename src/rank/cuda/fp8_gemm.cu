#include <cublas_v2.h>

#include <string>

#include "common/check.h"
#include "rank/cuda/fp8_gemm.h"

namespace llama2 {
namespace {
constexpr size_t kWorkspace = 32u << 20;
}  // namespace

Fp8Gemm::Fp8Gemm(cudaDataType_t out_type, cudaStream_t stream)
    : out_type_(out_type), stream_(stream), workspace_(kWorkspace, "cuBLASLt FP8 workspace") {
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
// the "TN" layout FP8 requires. D's N x M column-major is y's [M, N] row-major. A's outer vector
// has one scale per row of op(A) = per output channel, B's one per column of B = per token.
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
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer,
                                              sizeof(outer)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer,
                                              sizeof(outer)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, out_type_, N, M, N));
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
    throw Error("cuBLASLt has no FP8 algorithm with per-row scales for M " + std::to_string(M) +
                ", N " + std::to_string(N) + ", K " + std::to_string(K) + " (" +
                cublasGetStatusString(st) +
                "); --weight-dtype fp8 needs an sm_90+ GPU and cuBLAS 12.9+ (use int8 or fp16)");
  }
  p.algo = result.algo;
  return plans_.emplace(key, p).first->second;
}

void Fp8Gemm::run(const void* xq, const float* x_scale, const void* wq, const float* w_scale,
                  void* y, int M, int N, int K) {
  if (M == 0) return;
  const Plan& p = plan(M, N, K);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &w_scale, sizeof(w_scale)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &x_scale, sizeof(x_scale)));
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, wq, p.a, xq, p.b, &beta, y, p.d, y, p.d,
                              &p.algo, workspace_.as<void>(), kWorkspace, stream_));
}

}  // namespace llama2
