// The skinny decode GEMM (kernels/gemv.cu) and the weight conversion / synthetic fill kernels
// (kernels/convert.cu) against CPU references on odd shapes.
//   gemv: fp32 accumulation of K products of inputs exact in every dtype, one rounding to T:
//         rtol = one rounding of T, atol = 2e-6 * K for the fp32 summation order.
//   convert: exact for widening and same-type copies; narrowing = one rounding (checked exactly
//         against the host's round-to-nearest-even).
#include <cmath>

#include "gpu_test_util.h"
#include "kernels/convert.cuh"
#include "kernels/gemv.cuh"
#include "kernels/swiglu.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

TEST_CASE("gemv: y = x . W^T for 1..8 rows") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (int M : {1, 3, 8}) {
    for (int N : {1, 17, 4099, 8209}) {  // <= 8192: one row per warp; above: two
      for (int K : {8, 264, 4096}) {
        const auto x = exact_random(static_cast<size_t>(M) * K, 7 + M + K);
        const auto w = exact_random(static_cast<size_t>(N) * K, 9 + N + K);
        std::vector<float> want(static_cast<size_t>(M) * N);
        for (int m = 0; m < M; ++m) {
          for (int n = 0; n < N; ++n) {
            double s = 0;
            for (int i = 0; i < K; ++i) s += double(x[size_t(m) * K + i]) * w[size_t(n) * K + i];
            want[size_t(m) * N + n] = static_cast<float>(s);
          }
        }
        for_each_dtype([&](auto tag) {
          using T = decltype(tag);
          const std::string what = std::string("gemv ") + dtype_name<T>() +
                                   " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                   " K=" + std::to_string(K);
          INFO(what);
          DeviceBuffer<T> dx(to_dtype<T>(x)), dw(to_dtype<T>(w)), dy(want.size());
          dy.poison();
          LLAMA2_CUDA_REQUIRE(k::launch_gemv<T>(dx.get(), dw.get(), dy.get(), M, N, K, 0));
          LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
          expect_close(what, to_f32(dy.download()), want, Tol{rel_tol<T>(1), 2e-6 * K});
        });
      }
    }
  }
}

TEST_CASE("gemv_gate_up_swiglu: equals gemv into [M, 2F] followed by launch_swiglu, bit for bit") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (int M : {1, 4}) {
    for (int F : {5, 1376}) {
      const int K = 264;
      const auto x = exact_random(static_cast<size_t>(M) * K, 21 + M);
      const auto w = exact_random(static_cast<size_t>(2) * F * K, 23 + F, -0.5f, 0.5f);
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        const std::string what = std::string("gemv_gate_up_swiglu ") + dtype_name<T>() +
                                 " M=" + std::to_string(M) + " F=" + std::to_string(F);
        INFO(what);
        DeviceBuffer<T> dx(to_dtype<T>(x)), dw(to_dtype<T>(w)), gu(size_t(M) * 2 * F),
            two_step(size_t(M) * F), fused(size_t(M) * F);
        fused.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_gemv<T>(dx.get(), dw.get(), gu.get(), M, 2 * F, K, 0));
        LLAMA2_CUDA_REQUIRE(k::launch_swiglu<T>(gu.get(), M, F, two_step.get(), 0));
        LLAMA2_CUDA_REQUIRE(
            k::launch_gemv_gate_up_swiglu<T>(dx.get(), dw.get(), fused.get(), M, F, K, 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        // Same dot products in the same order (one warp, same lanes), same roundings: identical.
        expect_close(what, to_f32(fused.download()), to_f32(two_step.download()), Tol{0, 0});
      });
    }
  }
}

TEST_CASE("gemv: unsupported shapes are refused, not miscomputed") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<__half> x(64), w(64), y(64);
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 9, 1, 8, 0) == cudaErrorInvalidValue);
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, 1, 12, 0) == cudaErrorInvalidValue);
  CHECK(k::launch_gemv<__half>(x.get() + 1, w.get(), y.get(), 1, 1, 8, 0) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("convert: checkpoint dtypes into the model dtype") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const auto v = exact_random(1001, 3, -70000.f, 70000.f);  // beyond fp16's range too
  auto f32 = v;
  for (size_t i = 0; i < f32.size(); i += 3) f32[i] *= 1.0009765625f;  // not exact in bf16/fp16
  DeviceBuffer<float> src(f32);
  for_each_dtype([&](auto tag) {
    using T = decltype(tag);
    DeviceBuffer<T> dst(f32.size());
    dst.poison();
    LLAMA2_CUDA_REQUIRE(k::launch_convert<T>(src.get(), k::SourceType::kF32,
                                             static_cast<int64_t>(f32.size()), dst.get(), 0));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const auto got = to_f32(dst.download());
    const auto want = round_vec<T>(f32);  // host round-to-nearest-even (inf past fp16's max)
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(dtype_name<T>() << " [" << i << "] " << f32[i]);
      REQUIRE(got[i] == want[i]);
    }
  });
  // bf16 -> fp32 widening is exact.
  const auto b = to_dtype<__nv_bfloat16>(v);
  DeviceBuffer<__nv_bfloat16> src_b(b);
  DeviceBuffer<float> out(b.size());
  LLAMA2_CUDA_REQUIRE(k::launch_convert<float>(src_b.get(), k::SourceType::kBF16,
                                               static_cast<int64_t>(b.size()), out.get(), 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  CHECK(out.download() == to_f32(b));
}

TEST_CASE("fill_uniform: deterministic, in range, mean and spread as asked") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int64_t n = 1 << 20;
  DeviceBuffer<float> a(n), b(n);
  LLAMA2_CUDA_REQUIRE(k::launch_fill_uniform<float>(a.get(), n, 42, 1.f, 0.5f, 0));
  LLAMA2_CUDA_REQUIRE(k::launch_fill_uniform<float>(b.get(), n, 42, 1.f, 0.5f, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  const auto va = a.download();
  CHECK(va == b.download());
  double sum = 0, sq = 0;
  for (float x : va) {
    REQUIRE(x >= 0.5f);
    REQUIRE(x < 1.5f);
    sum += x;
    sq += (x - 1.0) * (x - 1.0);
  }
  // Uniform on [0.5, 1.5): mean 1, variance 1/12; 5 standard errors of slack.
  CHECK(std::fabs(sum / n - 1.0) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::fabs(sq / n - 1.0 / 12) < 0.002);
  LLAMA2_CUDA_REQUIRE(k::launch_fill_uniform<float>(b.get(), n, 43, 1.f, 0.5f, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  CHECK(va != b.download());
}
