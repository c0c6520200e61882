// `llama2_bench_kernels fp8`: the --weight-dtype fp8 product (x quantized per row, cuBLASLt's FP8
// GEMM into unscaled sums, kernels::Fp8Sum, the scales applied) at Llama-2-7B TP1 projection
// shapes, with cuBLASLt's heuristic algorithm and with the one Fp8Gemm::tune picks (the engine's
// start-up tuning, LLAMA2_FP8_TUNE), and the two small kernels around the GEMM timed alone.
//
// Build: ninja -C build-gpu llama2_bench_kernels     Run: build-gpu/llama2_bench_kernels fp8
//
// Timing: bench_timing.h (median of 5 batches of 20 launches) for the whole path and the small
// kernels; tune()'s own timing (one launch per weight copy, 16 copies) for the candidates. Each
// launch takes the next of several copies of W (together >= 256 MB) so that W comes from HBM.
// GB/s counts W's bytes only, against the HBM copy roofline of ~4.3 TB/s.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "common/check.h"
#include "kernels/quant.cuh"
#include "rank/cuda/device_buffer.h"
#include "rank/cuda/fp8_gemm.h"

namespace k = llama2::kernels;
using llama2::DeviceBuffer;
using llama2::bench::time_us;

int bench_fp8() {
  using T = __half;
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"qkv", 12288, 4096},
                          {"o_proj", 4096, 4096},
                          {"gate|up", 22016, 4096},
                          {"down", 4096, 11008}};
  const int rows[] = {16, 32, 64, 128, 256, 512, 2048};
  const int max_m = 2048, max_n = 22016, max_k = 11008;
  constexpr int kCopies = 16;
  const size_t max_w = size_t(max_n) * 4096;  // the largest projection, elements (= bytes)

  // e4m3 bytes at random with bit 3 and bit 7 clear (never 0x7f, the NaN pattern): |w| <= 240.
  std::vector<uint8_t> host(max_w * kCopies);
  std::mt19937 rng(7);
  for (auto& b : host) b = static_cast<uint8_t>(rng() & 0x77);
  DeviceBuffer w(host.size(), "W e4m3 copies");
  CUDA_CHECK(cudaMemcpy(w.as<void>(), host.data(), host.size(), cudaMemcpyHostToDevice));
  std::vector<__half> xh(size_t(max_m) * max_k);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto& v : xh) v = __float2half(dist(rng));
  DeviceBuffer x(xh.size() * sizeof(T), "x"), y(size_t(max_m) * max_n * sizeof(T), "y");
  CUDA_CHECK(cudaMemcpy(x.as<void>(), xh.data(), x.bytes(), cudaMemcpyHostToDevice));
  DeviceBuffer xq(size_t(max_m) * max_k, "x e4m3"), xs(sizeof(float) * max_m, "x scales");
  std::vector<float> ones(max_n, 1.f / 64);
  DeviceBuffer scale(ones.size() * sizeof(float), "w scales");
  CUDA_CHECK(cudaMemcpy(scale.as<void>(), ones.data(), scale.bytes(), cudaMemcpyHostToDevice));

  std::printf(
      "FP8 products (quantize x + cuBLASLt FP8 + scales), 7B TP1 shapes; tile: "
      "cublasLtMatmulTile_t, /s: split of K\n"
      "%-8s %5s | %10s %9s | %10s %9s %6s | %8s %8s | %9s %9s %7s | %7s %7s\n",
      "shape", "M", "heur. us", "tile/s", "tuned us", "tile/s", "cand.", "GB/s h", "GB/s t",
      "path h us", "path t us", "gain", "quant", "scale");
  for (const Shape& s : shapes) {
    const size_t w_elems = size_t(s.N) * s.K;
    std::vector<const void*> copies;
    for (int c = 0; c < kCopies; ++c) copies.push_back(w.as<uint8_t>() + c * w_elems);
    for (const int M : rows) {
      // A fresh Fp8Gemm each time: the heuristic's plan first, then the tuned one.
      llama2::Fp8Gemm heur(CUDA_R_16F, M, s.N, nullptr), tuned(CUDA_R_16F, M, s.N, nullptr);
      auto path = [&](llama2::Fp8Gemm& g) {
        return time_us([&](int i) {
          CUDA_CHECK((k::launch_quantize_rows<__nv_fp8_e4m3, T>(x.as<T>(), xq.as<__nv_fp8_e4m3>(),
                                                                xs.as<float>(), M, s.K, nullptr)));
          g.run(xq.as<void>(), xs.as<float>(), copies[i % kCopies], scale.as<float>(), y.as<void>(),
                M, s.N, s.K);
        });
      };
      const double heur_us = path(heur);
      const llama2::Fp8Gemm::TuneResult r = tuned.tune(xq.as<void>(), copies, M, s.N, s.K);
      const double tuned_us = path(tuned);
      const double quant_us = time_us([&](int) {
        CUDA_CHECK((k::launch_quantize_rows<__nv_fp8_e4m3, T>(x.as<T>(), xq.as<__nv_fp8_e4m3>(),
                                                              xs.as<float>(), M, s.K, nullptr)));
      });
      // The scale kernel reads the sums (k::Fp8Sum); any [M, N] buffer of them times it (y's bytes
      // suffice for half of it, so use the e4m3 pool, which is larger).
      const double scale_us = time_us([&](int) {
        CUDA_CHECK(k::launch_scale_outer<T>(reinterpret_cast<const k::Fp8Sum*>(w.as<void>()),
                                            xs.as<float>(), scale.as<float>(), y.as<T>(), M, s.N,
                                            nullptr));
      });
      std::printf(
          "%-8s %5d | %10.1f %6d/%-2d | %10.1f %6d/%-2d %2d/%-3d | %8.0f %8.0f | %9.1f %9.1f "
          "%6.2fx | %7.1f %7.1f\n",
          s.name, M, r.first_us, r.first_tile, r.first_splitk, r.chosen_us, r.chosen_tile,
          r.chosen_splitk, r.chosen, r.candidates, w_elems / r.first_us * 1e-3,
          w_elems / r.chosen_us * 1e-3, heur_us, tuned_us, heur_us / tuned_us, quant_us, scale_us);
    }
  }
  return 0;
}
