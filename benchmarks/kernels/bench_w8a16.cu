// `llama2_bench_kernels w8a16`: the W8A16 GEMM (kernels/gemm_w8a16.cu) against cuBLAS fp16 and
// against the path before it (dequantize W to fp16, then cuBLAS), at Llama-2-7B TP1 projection
// shapes and the row counts decode batches and prefills produce; then e4m3 weights through the
// same kernel against cuBLASLt's FP8 GEMM (x quantized per row first, as the engine does).
//
// Build: ninja -C build-gpu llama2_bench_kernels     Run: build-gpu/llama2_bench_kernels w8a16
//
// Timing: CUDA events around 20 launches after 5 warm-ups, median of 5 batches. Each launch takes
// the next of several copies of W (at least 2, together >= 256 MB), so W comes from HBM as it
// does in a forward pass (one 7B int8 projection fits the 50 MB L2). TFLOP/s = 2 M N K / time;
// GB/s = (W bytes + x + y) / time, against the HBM copy roofline of 4315 GB/s. Before timing, each
// shape's W8A16 result is checked against cuBLAS on the dequantized weights.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "common/check.h"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/quant.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cuda/device_buffer.h"
#include "rank/cuda/fp8_gemm.h"

namespace k = llama2::kernels;
using llama2::DeviceBuffer;

namespace {

constexpr size_t kPoolBytes = size_t{512} << 20;

using llama2::bench::time_us;

template <typename E>
void upload_random(DeviceBuffer& buf, size_t n, uint32_t seed, float lo, float hi) {
  std::vector<E> host(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (auto& v : host) {
    if constexpr (std::is_same_v<E, int8_t>) {
      v = static_cast<int8_t>(std::lrint(dist(rng)));
    } else if constexpr (std::is_same_v<E, float>) {
      v = dist(rng);
    } else {
      v = E(dist(rng));
    }
  }
  CUDA_CHECK(cudaMemcpy(buf.as<void>(), host.data(), n * sizeof(E), cudaMemcpyHostToDevice));
}

struct Shape {
  const char* name;
  int N, K;
};

}  // namespace

// Returns the number of failed correctness checks.
int bench_w8a16() {
  using T = __half;
  const Shape shapes[] = {{"qkv", 12288, 4096},
                          {"o_proj", 4096, 4096},
                          {"gate|up", 22016, 4096},
                          {"down", 4096, 11008}};
  const int rows[] = {16, 64, 256, 2048};
  const int max_m = 2048, max_n = 22016, max_k = 11008;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));

  cublasHandle_t blas;
  CUBLAS_CHECK(cublasCreate(&blas));
  DeviceBuffer cublas_ws(size_t{32} << 20, "cuBLAS workspace");
  CUBLAS_CHECK(cublasSetWorkspace(blas, cublas_ws.as<void>(), cublas_ws.bytes()));
  DeviceBuffer x(size_t{2} * max_m * max_k, "x"), y(size_t{2} * max_m * max_n, "y"),
      y_ref(size_t{2} * max_m * max_n, "y_ref"), w16(kPoolBytes, "fp16 weights"),
      w8(kPoolBytes, "int8 weights"), scale(sizeof(float) * max_n, "scales"),
      deq(size_t{2} * max_n * max_k, "dequantized W");
  upload_random<T>(x, size_t(max_m) * max_k, 1, -1.f, 1.f);
  upload_random<T>(w16, kPoolBytes / 2, 2, -0.05f, 0.05f);
  upload_random<int8_t>(w8, kPoolBytes, 3, -127.f, 127.f);
  upload_random<float>(scale, max_n, 4, 2e-4f, 4e-4f);
  // The split-K workspace sized as CudaLinear sizes it, for every shape and row count here.
  int64_t sums = 0;
  for (const Shape& s : shapes) {
    for (const int M : rows) sums = std::max(sums, k::gemm_w8a16_partial_elems(M, s.N, s.K, sms));
  }
  DeviceBuffer split_sums(std::max<int64_t>(sums, 1) * sizeof(float), "split sums"),
      split_counts(sizeof(int) * k::gemm_w8a16_counters(sms), "split counters");
  CUDA_CHECK(cudaMemset(split_counts.as<void>(), 0, split_counts.bytes()));
  k::GemmW8A16Workspace ws{sms, split_sums.as<float>(), sums, split_counts.as<int>(),
                           k::gemm_w8a16_counters(sms)};
  int failures = 0;

  std::printf(
      "\nW8A16 GEMM (int8 W, fp16 x) vs cuBLAS fp16 and vs dequantize + cuBLAS; %d SMs\n"
      "%-8s %5s %6s %6s | %9s %7s | %9s %7s %7s %-9s | %9s %9s | %s\n",
      sms, "shape", "M", "N", "K", "fp16 us", "TFLOP/s", "w8a16 us", "TFLOP/s", "GB/s", "tile",
      "deq us", "deq+gemm", "forced bm 16/32/64/128 us");
  for (const Shape& s : shapes) {
    const size_t w_elems = size_t(s.N) * s.K;
    const int copies16 = static_cast<int>(std::clamp<size_t>(kPoolBytes / (2 * w_elems), 1, 8));
    const int copies8 = static_cast<int>(std::clamp<size_t>(kPoolBytes / w_elems, 1, 8));
    auto w16_at = [&](int i) { return w16.as<T>() + (i % copies16) * w_elems; };
    auto w8_at = [&](int i) { return w8.as<int8_t>() + (i % copies8) * w_elems; };
    auto run_w8a16 = [&](int M, int i, const k::GemmW8A16Tiling& t) {
      const k::GemmW8A16Args<T, int8_t> a{x.as<T>(), w8_at(i), scale.as<float>(), y.as<T>(), M,
                                          s.N,       s.K};
      CUDA_CHECK((k::launch_gemm_w8a16<T, int8_t>(a, t, ws, nullptr)));
    };
    for (const int M : rows) {
      const k::GemmW8A16Tiling auto_t = k::plan_gemm_w8a16(M, s.N, s.K, ws);
      // Correctness: against cuBLAS on the dequantized copy of the same weights.
      run_w8a16(M, 0, auto_t);
      CUDA_CHECK((k::launch_dequantize_rows<int8_t, T>(w8_at(0), scale.as<float>(), deq.as<T>(),
                                                       s.N, s.K, nullptr)));
      llama2::gemm_xwt(blas, CUDA_R_16F, x.as<void>(), deq.as<void>(), y_ref.as<void>(), M, s.N,
                       s.K);
      CUDA_CHECK(cudaDeviceSynchronize());
      const double err =
          llama2::bench::rel_diff_fp16(y.as<void>(), y_ref.as<void>(), size_t(M) * s.N);
      if (!(err < 1e-2)) {
        std::printf("  CHECK FAILED %s M=%d: max |w8a16 - cuBLAS(dequantized)| = %.3g of max\n",
                    s.name, M, err);
        ++failures;
      }
      const double flop = 2.0 * M * s.N * s.K;
      const double bytes = double(w_elems) + 2.0 * M * s.K + 2.0 * M * s.N;
      const double fp16_us = time_us([&](int i) {
        llama2::gemm_xwt(blas, CUDA_R_16F, x.as<void>(), w16_at(i), y.as<void>(), M, s.N, s.K);
      });
      const double w8_us = time_us([&](int i) { run_w8a16(M, i, auto_t); });
      const double deq_us = time_us([&](int i) {
        CUDA_CHECK((k::launch_dequantize_rows<int8_t, T>(w8_at(i), scale.as<float>(), deq.as<T>(),
                                                         s.N, s.K, nullptr)));
      });
      const double old_us = time_us([&](int i) {
        CUDA_CHECK((k::launch_dequantize_rows<int8_t, T>(w8_at(i), scale.as<float>(), deq.as<T>(),
                                                         s.N, s.K, nullptr)));
        llama2::gemm_xwt(blas, CUDA_R_16F, x.as<void>(), deq.as<void>(), y.as<void>(), M, s.N, s.K);
      });
      char tile[32];
      std::snprintf(tile, sizeof tile, "%dx%d", auto_t.bm, auto_t.splits);
      std::printf("%-8s %5d %6d %6d | %9.1f %7.1f | %9.1f %7.1f %7.0f %-9s | %9.1f %9.1f |", s.name,
                  M, s.N, s.K, fp16_us, flop / fp16_us * 1e-6, w8_us, flop / w8_us * 1e-6,
                  bytes / w8_us * 1e-3, tile, deq_us, old_us);
      for (int bm : {16, 32, 64, 128}) {
        const k::GemmW8A16Tiling t = k::plan_gemm_w8a16(M, s.N, s.K, ws, bm);
        std::printf(" %.1f", time_us([&](int i) { run_w8a16(M, i, t); }));
      }
      std::printf("\n");
    }
  }
  std::printf(
      "  (tile: rows per block x splits of K; deq: launch_dequantize_rows alone, HBM "
      "bytes 3 per weight)\n");

  // The gate|up projection with SwiGLU in the epilogue against the product into [M, 2F] followed
  // by launch_swiglu (what the engine runs where the W8A16 GEMM takes the rows).
  {
    const Shape s = shapes[2];
    const int F = s.N / 2;
    const size_t w_elems = size_t(s.N) * s.K;
    const int copies8 = static_cast<int>(std::clamp<size_t>(kPoolBytes / w_elems, 1, 8));
    std::printf(
        "\ngate|up + SwiGLU (N %d, K %d): fused epilogue vs product + launch_swiglu\n"
        "%5s | %9s | %9s\n",
        s.N, s.K, "M", "fused us", "two-step");
    for (const int M : {16, 64, 256}) {
      const k::GemmW8A16Tiling t = k::plan_gemm_w8a16(M, s.N, s.K, ws);
      auto args = [&](int i, bool fused) {
        k::GemmW8A16Args<T, int8_t> a{x.as<T>(),
                                      w8.as<int8_t>() + (i % copies8) * w_elems,
                                      scale.as<float>(),
                                      fused ? y_ref.as<T>() : y.as<T>(),
                                      M,
                                      s.N,
                                      s.K,
                                      fused};
        return a;
      };
      const double fused_us = time_us([&](int i) {
        CUDA_CHECK((k::launch_gemm_w8a16<T, int8_t>(args(i, true), t, ws, nullptr)));
      });
      const double two_us = time_us([&](int i) {
        CUDA_CHECK((k::launch_gemm_w8a16<T, int8_t>(args(i, false), t, ws, nullptr)));
        CUDA_CHECK(k::launch_swiglu<T>(y.as<T>(), M, F, y_ref.as<T>(), nullptr));
      });
      std::printf("%5d | %9.1f | %9.1f\n", M, fused_us, two_us);
    }
  }

  // e4m3 weights: the W8A16 kernel (x in fp16) against the engine's FP8 path (x quantized per
  // row, cuBLASLt FP8 GEMM, scales applied by launch_scale_outer).
  std::printf(
      "\nfp8 e4m3 weights: W8A16 GEMM vs quantize x + cuBLASLt FP8 (the --weight-dtype fp8 "
      "path)\n%-8s %5s | %9s %7s | %9s %7s\n",
      "shape", "M", "w8a16 us", "TFLOP/s", "fp8 us", "TFLOP/s");
  DeviceBuffer xq(size_t(max_m) * max_k, "x e4m3"), xs(sizeof(float) * max_m, "x scales");
  llama2::Fp8Gemm fp8(CUDA_R_16F, 256, max_n, nullptr);
  for (const Shape& s : shapes) {
    const size_t w_elems = size_t(s.N) * s.K;
    const int copies8 = static_cast<int>(std::clamp<size_t>(kPoolBytes / w_elems, 1, 8));
    auto w8_at = [&](int i) {
      return reinterpret_cast<const __nv_fp8_e4m3*>(w8.as<int8_t>() + (i % copies8) * w_elems);
    };
    for (const int M : {16, 64, 256}) {
      const double flop = 2.0 * M * s.N * s.K;
      const k::GemmW8A16Tiling t = k::plan_gemm_w8a16(M, s.N, s.K, ws);
      const double w8_us = time_us([&](int i) {
        const k::GemmW8A16Args<T, __nv_fp8_e4m3> a{
            x.as<T>(), w8_at(i), scale.as<float>(), y.as<T>(), M, s.N, s.K};
        CUDA_CHECK((k::launch_gemm_w8a16<T, __nv_fp8_e4m3>(a, t, ws, nullptr)));
      });
      const double fp8_us = time_us([&](int i) {
        CUDA_CHECK((k::launch_quantize_rows<__nv_fp8_e4m3, T>(x.as<T>(), xq.as<__nv_fp8_e4m3>(),
                                                              xs.as<float>(), M, s.K, nullptr)));
        fp8.run(xq.as<void>(), xs.as<float>(), w8_at(i), scale.as<float>(), y.as<void>(), M, s.N,
                s.K);
      });
      std::printf("%-8s %5d | %9.1f %7.1f | %9.1f %7.1f\n", s.name, M, w8_us, flop / w8_us * 1e-6,
                  fp8_us, flop / fp8_us * 1e-6);
    }
  }
  cublasDestroy(blas);
  return failures;
}
