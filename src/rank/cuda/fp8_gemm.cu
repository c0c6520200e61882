#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>

#include "common/check.h"
#include "kernels/quant.cuh"
#include "rank/cuda/fp8_gemm.h"

namespace llama2 {
namespace {
constexpr size_t kWorkspace = 32u << 20;
// cuBLASLt's D (and C) type: the sums' element type (kernels::Fp8Sum).
constexpr cudaDataType_t kSumType =
    std::is_same_v<kernels::Fp8Sum, float> ? CUDA_R_32F : CUDA_R_16BF;

// An algorithm's tile and split of K (1 when cuBLASLt does not say).
std::pair<int, int> tile_and_splitk(const cublasLtMatmulAlgo_t& algo) {
  uint32_t tile = 0;
  int32_t splitk = 1;
  size_t written = 0;
  (void)cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                             sizeof(tile), &written);
  (void)cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof(splitk), &written);
  return {static_cast<int>(tile), std::max(1, static_cast<int>(splitk))};
}
}  // namespace

Fp8Gemm::Fp8Gemm(cudaDataType_t out_type, int64_t max_rows, int64_t max_n, cudaStream_t stream)
    : out_type_(out_type),
      stream_(stream),
      workspace_(kWorkspace, "cuBLASLt FP8 workspace"),
      acc_(static_cast<size_t>(max_rows * max_n) * sizeof(kernels::Fp8Sum), "fp8 GEMM sums"),
      acc_elems_(max_rows * max_n) {
  LLAMA2_CHECK(out_type == CUDA_R_16F || out_type == CUDA_R_16BF);
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [shape, p] : plans_) destroy(p);
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
}

// Column-major view (cuBLAS's): D [N x M] = op(A) . B with A = W stored [N, K] row-major, i.e.
// a K x N column-major matrix read transposed, and B = x [M, K] row-major = K x M column-major:
// the "TN" layout FP8 requires. D's N x M column-major is the sums' [M, N] row-major, in
// kernels::Fp8Sum (bf16 by default), accumulated in fp32.
Fp8Gemm::Plan Fp8Gemm::describe(int M, int N, int K) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, kSumType, N, M, N));
  return p;
}

void Fp8Gemm::destroy(Plan& p) {
  (void)cublasLtMatrixLayoutDestroy(p.a);
  (void)cublasLtMatrixLayoutDestroy(p.b);
  (void)cublasLtMatrixLayoutDestroy(p.d);
  (void)cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

std::vector<cublasLtMatmulHeuristicResult_t> Fp8Gemm::candidates(const Plan& p, int count, int M,
                                                                 int N, int K) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspace;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
  std::vector<cublasLtMatmulHeuristicResult_t> result(static_cast<size_t>(count));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d,
                                                           pref, count, result.data(), &found);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw Error("cuBLASLt has no FP8 algorithm for M " + std::to_string(M) + ", N " +
                std::to_string(N) + ", K " + std::to_string(K) + " (" + cublasGetStatusString(st) +
                "); --weight-dtype fp8 needs an sm_89+ GPU (use int8 or auto)");
  }
  result.resize(static_cast<size_t>(found));
  return result;
}

const Fp8Gemm::Plan& Fp8Gemm::plan(int M, int N, int K) {
  const auto key = std::make_pair(M, std::make_pair(N, K));
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p = describe(M, N, K);
  try {
    // The algorithm tune() chose for the smallest tuned M >= this one, if cuBLASLt takes it here.
    bool have = false;
    const auto tuned = tuned_.find({N, K});
    if (tuned != tuned_.end()) {
      const auto up = tuned->second.lower_bound(M);
      cublasLtMatmulHeuristicResult_t check{};
      if (up != tuned->second.end() &&
          cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &up->second, &check) ==
              CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kWorkspace) {
        p.algo = up->second;
        have = true;
      }
    }
    if (!have) p.algo = candidates(p, 1, M, N, K)[0].algo;
  } catch (...) {
    destroy(p);
    throw;
  }
  return plans_.emplace(key, p).first->second;
}

cublasStatus_t Fp8Gemm::launch(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* xq,
                               const void* wq) {
  const float alpha = 1.f, beta = 0.f;
  kernels::Fp8Sum* acc = acc_.as<kernels::Fp8Sum>();
  return cublasLtMatmul(handle_, p.desc, &alpha, wq, p.a, xq, p.b, &beta, acc, p.d, acc, p.d, &algo,
                        workspace_.as<void>(), kWorkspace, stream_);
}

Fp8Gemm::TuneResult Fp8Gemm::tune(const void* xq, const std::vector<const void*>& weights, int M,
                                  int N, int K) {
  LLAMA2_CHECK(!weights.empty() && M >= 1 && int64_t{M} * N <= acc_elems_);
  TuneResult r;
  Plan p = describe(M, N, K);
  cudaEvent_t begin = nullptr, end = nullptr;
  try {
    const auto found = candidates(p, kTuneCandidates, M, N, K);
    CUDA_CHECK(cudaEventCreate(&begin));
    CUDA_CHECK(cudaEventCreate(&end));
    // Each candidate: one untimed product (first-use costs), then one per weight tensor (at
    // least 4, at most 16), timed together.
    const int reps = std::clamp(static_cast<int>(weights.size()), 4, 16);
    for (size_t i = 0; i < found.size(); ++i) {
      const cublasLtMatmulAlgo_t& algo = found[i].algo;
      if (launch(p, algo, xq, weights[0]) != CUBLAS_STATUS_SUCCESS) continue;
      CUDA_CHECK(cudaEventRecord(begin, stream_));
      bool ok = true;
      for (int j = 0; j < reps && ok; ++j) {
        ok = launch(p, algo, xq, weights[static_cast<size_t>(j) % weights.size()]) ==
             CUBLAS_STATUS_SUCCESS;
      }
      CUDA_CHECK(cudaEventRecord(end, stream_));
      CUDA_CHECK(cudaEventSynchronize(end));
      if (!ok) continue;
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, begin, end));
      const double us = 1e3 * ms / reps;
      if (i == 0) {
        r.first_us = us;
        std::tie(r.first_tile, r.first_splitk) = tile_and_splitk(algo);
      }
      if (r.candidates == 0 || us < r.chosen_us) {
        r.chosen = static_cast<int>(i);
        r.chosen_us = us;
        p.algo = algo;
      }
      ++r.candidates;
    }
  } catch (...) {
    if (begin != nullptr) (void)cudaEventDestroy(begin);
    if (end != nullptr) (void)cudaEventDestroy(end);
    destroy(p);
    throw;
  }
  (void)cudaEventDestroy(begin);
  (void)cudaEventDestroy(end);
  if (r.candidates == 0) {
    destroy(p);
    throw Error("cuBLASLt's FP8 algorithms all failed for M " + std::to_string(M) + ", N " +
                std::to_string(N) + ", K " + std::to_string(K));
  }
  std::tie(r.chosen_tile, r.chosen_splitk) = tile_and_splitk(p.algo);
  tuned_[{N, K}][M] = p.algo;
  const auto key = std::make_pair(M, std::make_pair(N, K));
  auto old = plans_.find(key);
  if (old != plans_.end()) {
    destroy(old->second);
    plans_.erase(old);
  }
  plans_.emplace(key, p);
  return r;
}

void Fp8Gemm::run(const void* xq, const float* x_scale, const void* wq, const float* w_scale,
                  void* y, int M, int N, int K) {
  if (M == 0) return;
  const kernels::Fp8Sum* acc = run_sums(xq, wq, M, N, K);
  if (out_type_ == CUDA_R_16F) {
    CUDA_CHECK(kernels::launch_scale_outer<__half>(acc, x_scale, w_scale, static_cast<__half*>(y),
                                                   M, N, stream_));
  } else {
    CUDA_CHECK(kernels::launch_scale_outer<__nv_bfloat16>(
        acc, x_scale, w_scale, static_cast<__nv_bfloat16*>(y), M, N, stream_));
  }
}

const kernels::Fp8Sum* Fp8Gemm::run_sums(const void* xq, const void* wq, int M, int N, int K) {
  LLAMA2_CHECK(M >= 1 && int64_t{M} * N <= acc_elems_);
  const Plan& p = plan(M, N, K);
  CUBLAS_CHECK(launch(p, p.algo, xq, wq));
  return acc_.as<kernels::Fp8Sum>();
}

void Fp8Gemm::run_swiglu_e4m3(const void* xq, const float* x_scale, const void* wq,
                              const float* w_scale, kernels::RowsE4m3 act, int M, int N, int K) {
  if (M == 0) return;
  LLAMA2_CHECK(N % 2 == 0);
  const kernels::Fp8Sum* acc = run_sums(xq, wq, M, N, K);
  if (out_type_ == CUDA_R_16F) {
    CUDA_CHECK(kernels::launch_scale_swiglu_quantize<__half>(acc, x_scale, w_scale, M, N / 2, act,
                                                             stream_));
  } else {
    CUDA_CHECK(kernels::launch_scale_swiglu_quantize<__nv_bfloat16>(acc, x_scale, w_scale, M, N / 2,
                                                                    act, stream_));
  }
}

}  // namespace llama2
