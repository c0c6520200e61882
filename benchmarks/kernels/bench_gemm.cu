// The engine's projections (y[M,N] = x[M,K] w[N,K]^T, fp16, fp32 accumulation) at Llama-2-7B
// TP1 shapes, for the row counts serving produces: cublasGemmEx with its default heuristic (what
// gemm_xwt in src/rank/cuda/device_buffer.cu calls) against every algorithm cuBLASLt's heuristic
// offers for the same problem (up to 16), each timed. Says how much a per-shape algorithm choice
// could gain over the default before the engine grows one.
//
// Build: ninja -C build-gpu llama2_bench_gemm        Run: ./build-gpu/llama2_bench_gemm  (one GPU)
//
// Timing: CUDA events around 20 launches after 5 warm-ups, median of 5 such batches; inputs are
// random fp16 so that the tensor cores see realistic bit patterns. TFLOP/s = 2 M N K / time.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "common/check.h"
#include "rank/cuda/device_buffer.h"

namespace {

using llama2::DeviceBuffer;

struct Shape {
  const char* name;
  int N, K;
};

using llama2::bench::time_us;

void fill_random(DeviceBuffer& buf, size_t n, uint32_t seed) {
  std::vector<__half> host(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (auto& v : host) v = __float2half(dist(rng));
  CUDA_CHECK(cudaMemcpy(buf.as<void>(), host.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
}

}  // namespace

int main() {
  const Shape shapes[] = {{"qkv", 12288, 4096},
                          {"o_proj", 4096, 4096},
                          {"gate|up", 22016, 4096},
                          {"down", 4096, 11008}};
  const int rows[] = {64, 256, 512, 768, 1024, 2048, 2560};
  constexpr size_t kWorkspace = size_t{32} << 20;  // what the engine gives cuBLAS

  cublasHandle_t blas;
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasCreate(&blas));
  CUBLAS_CHECK(cublasLtCreate(&lt));
  DeviceBuffer ws(kWorkspace, "workspace");
  CUBLAS_CHECK(cublasSetWorkspace(blas, ws.as<void>(), kWorkspace));
  const size_t max_m = static_cast<size_t>(rows[std::size(rows) - 1]);
  DeviceBuffer x(size_t{2} * max_m * 11008, "x"), w(size_t{2} * 22016 * 4096, "w"),
      y(size_t{2} * max_m * 22016, "y");
  fill_random(x, max_m * 11008, 1);
  fill_random(w, size_t{22016} * 4096, 2);

  std::printf("%-8s %5s %6s %6s | %10s %7s | %10s %7s %5s | %s\n", "shape", "M", "N", "K",
              "gemmex us", "TFLOP/s", "best lt us", "TFLOP/s", "algo", "gain");
  for (const Shape& s : shapes) {
    for (const int M : rows) {
      const double flop = 2.0 * M * s.N * s.K;
      const float alpha = 1.f, beta = 0.f;
      const double ex_us = time_us([&](int) {
        CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.N, M, s.K, &alpha, w.as<void>(),
                                  CUDA_R_16F, s.K, x.as<void>(), CUDA_R_16F, s.K, &beta,
                                  y.as<void>(), CUDA_R_16F, s.N, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
      });

      // The same column-major problem for cuBLASLt: D[N,M] = op(A)[N,K] B[K,M], A = w^T.
      cublasLtMatmulDesc_t desc;
      CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                  sizeof(trans_a)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                  sizeof(trans_b)));
      cublasLtMatrixLayout_t la, lb, lc;
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, s.K, s.N, s.K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, s.K, M, s.K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16F, s.N, M, s.N));
      cublasLtMatmulPreference_t pref;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspace, sizeof(kWorkspace)));
      cublasLtMatmulHeuristicResult_t found[16];
      int n_found = 0;
      CUBLAS_CHECK(
          cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 16, found, &n_found));
      double best_us = 1e30;
      int best = -1;
      for (int i = 0; i < n_found; ++i) {
        const double us = time_us([&](int) {
          CUBLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, w.as<void>(), la, x.as<void>(), lb, &beta,
                                      y.as<void>(), lc, y.as<void>(), lc, &found[i].algo,
                                      ws.as<void>(), kWorkspace, nullptr));
        });
        if (us < best_us) best_us = us, best = i;
      }
      std::printf("%-8s %5d %6d %6d | %10.1f %7.1f | %10.1f %7.1f %2d/%-2d | %+.1f%%\n", s.name, M,
                  s.N, s.K, ex_us, flop / ex_us * 1e-6, best_us, flop / best_us * 1e-6, best,
                  n_found, (ex_us / best_us - 1) * 100);
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(lc);
      cublasLtMatmulDescDestroy(desc);
    }
  }
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  return 0;
}
