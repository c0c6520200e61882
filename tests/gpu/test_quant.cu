// Weight quantization (--weight-dtype fp8 | int8): the row quantizer (kernels/quant.cu) exactly
// against the host's rule, the quantized GEMV (kernels/gemv.cu, launch_gemv_q) and the cuBLASLt
// FP8 GEMM (src/rank/cuda/fp8_gemm.cu) against a double-precision reference of the same
// quantized operands.
//   gemv_q: the products of e4m3 x e4m3 and int8 / e4m3 x (bf16-exact) are exact in fp32, so
//           only the fp32 summation order and the final rounding to T differ: rtol one rounding
//           of T, atol 2e-6 * K * the scales. GemvMath::kHalf2 (f16x2 sums of 8 products) adds
//           at most 8 fp16 roundings of each 8-term partial sum: 2^-8 * sum_k |x w|, plus 2^-25
//           per product that lands among fp16's subnormals (times the 1024 pre-scale).
//   FP8 GEMM: tensor-core accumulation (cuBLASLt may add partial sums in reduced precision):
//           |err| <= 2^-12 * sum_k |x w| * scales + one rounding of T.
#include <cmath>
#include <cstdint>
#include <random>

#include "gpu_test_util.h"
#include "kernels/gemv.cuh"
#include "kernels/quant.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cuda/fp8_gemm.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

// Host version of the rule in kernels/quant.cuh.
template <typename Q>
void host_quantize(const std::vector<float>& x, int rows, int K, std::vector<Q>* q,
                   std::vector<float>* scale) {
  const float qmax = std::is_same_v<Q, int8_t> ? 127.f : 448.f;
  q->resize(x.size());
  scale->resize(rows);
  for (int r = 0; r < rows; ++r) {
    float amax = 0;
    for (int c = 0; c < K; ++c) amax = std::max(amax, std::fabs(x[size_t(r) * K + c]));
    const float s = amax > 0 ? amax / qmax : 1.f;
    (*scale)[r] = s;
    for (int c = 0; c < K; ++c) {
      const float v = x[size_t(r) * K + c] / s;
      if constexpr (std::is_same_v<Q, int8_t>) {
        (*q)[size_t(r) * K + c] = static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.f, 127.f));
      } else {
        (*q)[size_t(r) * K + c] = __nv_fp8_e4m3(v);
      }
    }
  }
}

template <typename Q>
std::vector<float> dequant(const std::vector<Q>& q, const std::vector<float>& scale, int K) {
  std::vector<float> out(q.size());
  for (size_t i = 0; i < q.size(); ++i) out[i] = scale[i / K] * k::to_float(q[i]);
  return out;
}

// want[m, n] = sum_k a[m, k] * b[n, k] in double, rounded to float; bound[m, n] = sum_k |a b|.
void reference(const std::vector<float>& a, const std::vector<float>& b, int M, int N, int K,
               std::vector<float>* want, std::vector<double>* bound) {
  std::vector<double> exact;
  reference_xwt(a, b, M, N, K, &exact, bound);
  want->assign(exact.begin(), exact.end());
}

}  // namespace

TEST_CASE("quantize_rows: the host's rule exactly, int8 and fp8 e4m3, and dequantize_rows") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int rows = 37, K = 1000;
  auto x = exact_random(size_t(rows) * K, 5, -3.f, 3.f);
  for (int c = 0; c < K; ++c) x[size_t(3) * K + c] = 0.f;  // an all-zero row: scale 1, q 0
  auto run = [&](auto qtag) {
    using Q = decltype(qtag);
    std::vector<Q> want_q;
    std::vector<float> want_s;
    host_quantize(x, rows, K, &want_q, &want_s);
    DeviceBuffer<float> dx(x), ds(rows);
    DeviceBuffer<Q> dq(x.size());
    DeviceBuffer<__half> dh(x.size());
    ds.poison();
    LLAMA2_CUDA_REQUIRE(
        (k::launch_quantize_rows<Q, float>(dx.get(), dq.get(), ds.get(), rows, K, 0)));
    LLAMA2_CUDA_REQUIRE(
        (k::launch_dequantize_rows<Q, __half>(dq.get(), ds.get(), dh.get(), rows, K, 0)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::string what = std::is_same_v<Q, int8_t> ? "int8" : "fp8";
    expect_close(what + " scales", ds.download(), want_s, Tol{0, 0});
    expect_close(what + " values", to_f32(dq.download()), to_f32(want_q), Tol{0, 0});
    expect_close(what + " dequantized", to_f32(dh.download()),
                 round_vec<__half>(dequant(want_q, want_s, K)), Tol{0, 0});
  };
  run(int8_t{});
  run(__nv_fp8_e4m3{});
}

TEST_CASE("gemv_q kConvert: int8 weights (W8A16) and fp8 weights with fp8 activations (W8A8)") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (int M : {1, 3, 8}) {
    for (int N : {1, 17, 8209}) {
      for (int K : {16, 272, 4096}) {
        const auto xf = exact_random(size_t(M) * K, 3 + M + K);
        const auto wf = exact_random(size_t(N) * K, 4 + N + K, -2.f, 2.f);
        std::vector<int8_t> wi;
        std::vector<__nv_fp8_e4m3> w8, x8;
        std::vector<float> si, s8, sx;
        host_quantize(wf, N, K, &wi, &si);
        host_quantize(wf, N, K, &w8, &s8);
        host_quantize(xf, M, K, &x8, &sx);
        const std::string shape =
            " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
        auto check = [&](auto ttag) {
          using T = decltype(ttag);
          {  // int8: y = s_w[n] * sum x . q
            std::vector<float> want;
            std::vector<double> bound;
            reference(xf, dequant(wi, si, K), M, N, K, &want, &bound);
            DeviceBuffer<T> dx(to_dtype<T>(xf)), dy(want.size());
            DeviceBuffer<int8_t> dw(wi);
            DeviceBuffer<float> dsw(si);
            dy.poison();
            LLAMA2_CUDA_REQUIRE(
                (k::launch_gemv_q<T, T, int8_t>(dx.get(), nullptr, dw.get(), dsw.get(), dy.get(), M,
                                                N, K, 0, k::GemvMath::kConvert)));
            LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
            expect_close(std::string("gemv_q int8 ") + k::dtype_name<T>() + shape,
                         to_f32(dy.download()), want, Tol{rel_tol<T>(1), 2e-6 * K * 0.02});
          }
          {  // fp8: y = s_x[m] * s_w[n] * sum q_x . q_w
            std::vector<float> want;
            std::vector<double> bound;
            reference(dequant(x8, sx, K), dequant(w8, s8, K), M, N, K, &want, &bound);
            DeviceBuffer<__nv_fp8_e4m3> dx(x8), dw(w8);
            DeviceBuffer<float> dsx(sx), dsw(s8);
            DeviceBuffer<T> dy(want.size());
            dy.poison();
            LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<T, __nv_fp8_e4m3, __nv_fp8_e4m3>(
                dx.get(), dsx.get(), dw.get(), dsw.get(), dy.get(), M, N, K, 0)));
            LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
            expect_close(std::string("gemv_q fp8 ") + k::dtype_name<T>() + shape,
                         to_f32(dy.download()), want, Tol{rel_tol<T>(1), 2e-6 * K * 0.02});
          }
        };
        check(__half{});
        check(__nv_bfloat16{});
      }
    }
  }
}

TEST_CASE("gemv_q_gate_up_swiglu: equals gemv_q into [M, 2F] then launch_swiglu, bit for bit") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int M = 2, F = 1376, K = 272;
  const auto xf = exact_random(size_t(M) * K, 31);
  const auto wf = exact_random(size_t(2) * F * K, 32, -0.5f, 0.5f);
  std::vector<__nv_fp8_e4m3> w8, x8;
  std::vector<float> s8, sx;
  host_quantize(wf, 2 * F, K, &w8, &s8);
  host_quantize(xf, M, K, &x8, &sx);
  DeviceBuffer<__nv_fp8_e4m3> dx(x8), dw(w8);
  DeviceBuffer<float> dsx(sx), dsw(s8);
  DeviceBuffer<__half> gu(size_t(M) * 2 * F), two_step(size_t(M) * F), fused(size_t(M) * F);
  fused.poison();
  using Q = __nv_fp8_e4m3;
  LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<__half, Q, Q>(dx.get(), dsx.get(), dw.get(), dsw.get(),
                                                      gu.get(), M, 2 * F, K, 0)));
  LLAMA2_CUDA_REQUIRE(k::launch_swiglu<__half>(gu.get(), M, F, two_step.get(), 0));
  LLAMA2_CUDA_REQUIRE((k::launch_gemv_q_gate_up_swiglu<__half, Q, Q>(
      dx.get(), dsx.get(), dw.get(), dsw.get(), fused.get(), M, F, K, 0)));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_close("gemv_q_gate_up_swiglu fp8", to_f32(fused.download()), to_f32(two_step.download()),
               Tol{0, 0});
}

TEST_CASE(
    "Fp8Gemm: cuBLASLt FP8 with per-row scales matches the quantized reference, with the "
    "heuristic's algorithm and with tuned ones") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // kHeuristic: the first call asks cuBLASLt; kTunedHere: tune() at this M; kTunedAbove: tune()
  // at 320 rows only, so this M takes that algorithm (when cuBLASLt accepts it for the shape).
  enum Mode { kHeuristic, kTunedHere, kTunedAbove };
  for (int M : {9, 64, 300}) {
    for (int N : {272, 4096}) {
      const int K = 4096;
      const auto xf = exact_random(size_t(M) * K, 41 + M);
      const auto wf = exact_random(size_t(N) * K, 42 + N, -2.f, 2.f);
      std::vector<__nv_fp8_e4m3> w8, x8;
      std::vector<float> s8, sx;
      host_quantize(wf, N, K, &w8, &s8);
      host_quantize(xf, M, K, &x8, &sx);
      std::vector<float> want;
      std::vector<double> bound;
      reference(dequant(x8, sx, K), dequant(w8, s8, K), M, N, K, &want, &bound);
      DeviceBuffer<__nv_fp8_e4m3> dx(x8), dw(w8), dx_tune(size_t(320) * K);
      DeviceBuffer<float> dsx(sx), dsw(s8);
      for (const Mode mode : {kHeuristic, kTunedHere, kTunedAbove}) {
        DeviceBuffer<__half> dy(want.size());
        dy.poison();
        llama2::Fp8Gemm gemm(CUDA_R_16F, 320, N, nullptr);
        if (mode != kHeuristic) {
          const std::vector<const void*> weights{dw.get(), dw.get()};
          const auto r = mode == kTunedHere ? gemm.tune(dx.get(), weights, M, N, K)
                                            : gemm.tune(dx_tune.get(), weights, 320, N, K);
          CHECK(r.candidates >= 1);
          CHECK(r.candidates <= llama2::Fp8Gemm::kTuneCandidates);
          CHECK((r.chosen >= 0 && r.chosen < llama2::Fp8Gemm::kTuneCandidates));
          CHECK(r.chosen_us > 0);
          CHECK(r.chosen_us <= r.first_us);
        }
        gemm.run(dx.get(), dsx.get(), dw.get(), dsw.get(), dy.get(), M, N, K);
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        const auto got = to_f32(dy.download());
        size_t bad = 0, worst = 0;
        double worst_ratio = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          // The fp16 output's rounding and the unscaled sum's (k::Fp8Sum) on top of the order's.
          const double lim =
              0x1p-12 * bound[i] + (0x1p-11 + k::kFp8SumRoundoff) * std::fabs(want[i]) + 1e-6;
          const double ratio = std::fabs(got[i] - want[i]) / lim;
          if (!(ratio <= 1)) ++bad;
          if (!(ratio <= worst_ratio)) {
            worst_ratio = ratio;
            worst = i;
          }
        }
        CHECK_MESSAGE(bad == 0, "Fp8Gemm mode " << mode << " M=" << M << " N=" << N << ": " << bad
                                                << " outside; worst [" << worst << "] got "
                                                << got[worst] << " want " << want[worst] << " ("
                                                << worst_ratio << " x bound)");
      }
    }
  }
}

namespace {

// |got - want| <= rtol |want| + frac * bound + atol everywhere (bound = sum_k |x w|).
void expect_within(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want, const std::vector<double>& bound, double rtol,
                   double frac, double atol) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double lim = rtol * std::fabs(want[i]) + frac * bound[i] + atol;
    const double ratio = std::fabs(double(got[i]) - want[i]) / lim;
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " outside; worst [" << worst << "] got "
                               << got[worst] << " want " << want[worst] << " (" << worst_ratio
                               << " x bound)");
}

}  // namespace

TEST_CASE("gemv_q W8A16: int8 / fp8 weights, fp16 / bf16 x, every GemvMath, M 1..8") {
  LLAMA2_GPU_TEST_OR_SKIP();
  struct Shape {
    int N, K;
  };
  // N odd (one row per warp up to 8192, two above: a lone last row), K = 16 * odd.
  std::vector<std::pair<int, Shape>> cases;
  for (int M = 1; M <= 8; ++M) {
    for (Shape s : {Shape{1, 16}, Shape{17, 272}, Shape{8209, 16 * 13}}) cases.push_back({M, s});
  }
  cases.push_back({1, {4099, 16 * 129}});
  cases.push_back({8, {4099, 16 * 129}});
  for (const auto& c : cases) {
    const int M = c.first, N = c.second.N, K = c.second.K;
    const auto xf = exact_random(size_t(M) * K, 50 + M + K);
    const auto wf = exact_random(size_t(N) * K, 51 + N + K, -2.f, 2.f);
    const std::string shape =
        " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
    auto run = [&](auto wtag) {
      using W = decltype(wtag);
      std::vector<W> wq;
      std::vector<float> ws;
      host_quantize(wf, N, K, &wq, &ws);
      std::vector<float> want;
      std::vector<double> bound;
      reference(xf, dequant(wq, ws, K), M, N, K, &want, &bound);
      DeviceBuffer<W> dw(wq);
      DeviceBuffer<float> dsw(ws);
      auto check = [&](auto ttag) {
        using T = decltype(ttag);
        DeviceBuffer<T> dx(to_dtype<T>(xf)), dy(want.size());
        std::vector<k::GemvMath> maths = {k::GemvMath::kAuto, k::GemvMath::kFp32};
        if (std::is_same_v<T, __half>) maths.push_back(k::GemvMath::kHalf2);
        for (const k::GemvMath math : maths) {
          const std::string what =
              std::string("gemv_q ") + (std::is_same_v<W, int8_t> ? "int8" : "fp8") + " x " +
              k::dtype_name<T>() + " math " + std::to_string(static_cast<int>(math)) + shape;
          dy.poison();
          LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<T, T, W>(dx.get(), nullptr, dw.get(), dsw.get(),
                                                         dy.get(), M, N, K, 0, math)));
          LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
          const bool h2 = math == k::GemvMath::kHalf2;
          expect_within(what, to_f32(dy.download()), want, bound, rel_tol<T>(1), h2 ? 0x1p-8 : 0.0,
                        (h2 ? 0x1p-15 : 2e-6) * K * 0.02);
        }
      };
      check(__half{});
      check(__nv_bfloat16{});
    };
    run(int8_t{});
    run(__nv_fp8_e4m3{});
  }
}

TEST_CASE("gemv_q W8A16: kFp32 equals the generic conversions (kConvert) bit for bit (int8)") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int M = 3, N = 4101, K = 16 * 67;
  const auto xf = exact_random(size_t(M) * K, 61);
  const auto wf = exact_random(size_t(N) * K, 62, -2.f, 2.f);
  std::vector<int8_t> wq;
  std::vector<float> ws;
  host_quantize(wf, N, K, &wq, &ws);
  DeviceBuffer<__half> dx(to_dtype<__half>(xf)), a(size_t(M) * N), b(size_t(M) * N);
  DeviceBuffer<int8_t> dw(wq);
  DeviceBuffer<float> dsw(ws);
  a.poison();
  b.poison();
  LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<__half, __half, int8_t>(
      dx.get(), nullptr, dw.get(), dsw.get(), a.get(), M, N, K, 0, k::GemvMath::kConvert)));
  LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<__half, __half, int8_t>(
      dx.get(), nullptr, dw.get(), dsw.get(), b.get(), M, N, K, 0, k::GemvMath::kFp32)));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_close("kFp32 vs kConvert", to_f32(b.download()), to_f32(a.download()), Tol{0, 0});
}

TEST_CASE("gemv_q W8A16 gate|up + SwiGLU: equals gemv_q into [M, 2F] then launch_swiglu") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int M = 3, F = 4105, K = 16 * 17;  // 2F > 8192: the plain product takes two rows a warp
  const auto xf = exact_random(size_t(M) * K, 71);
  const auto wf = exact_random(size_t(2) * F * K, 72, -0.5f, 0.5f);
  auto run = [&](auto wtag) {
    using W = decltype(wtag);
    std::vector<W> wq;
    std::vector<float> ws;
    host_quantize(wf, 2 * F, K, &wq, &ws);
    DeviceBuffer<W> dw(wq);
    DeviceBuffer<float> dsw(ws);
    DeviceBuffer<__half> dx(to_dtype<__half>(xf)), gu(size_t(M) * 2 * F), two(size_t(M) * F),
        fused(size_t(M) * F);
    for (const k::GemvMath math : {k::GemvMath::kFp32, k::GemvMath::kHalf2}) {
      fused.poison();
      LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<__half, __half, W>(
          dx.get(), nullptr, dw.get(), dsw.get(), gu.get(), M, 2 * F, K, 0, math)));
      LLAMA2_CUDA_REQUIRE(k::launch_swiglu<__half>(gu.get(), M, F, two.get(), 0));
      LLAMA2_CUDA_REQUIRE((k::launch_gemv_q_gate_up_swiglu<__half, __half, W>(
          dx.get(), nullptr, dw.get(), dsw.get(), fused.get(), M, F, K, 0, math)));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      expect_close(std::string("W8A16 gate|up math ") + std::to_string(static_cast<int>(math)),
                   to_f32(fused.download()), to_f32(two.download()), Tol{0, 0});
    }
  };
  run(int8_t{});
  run(__nv_fp8_e4m3{});
}

TEST_CASE("gemv_q: a GemvMath the operands do not take is refused before launching") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<__nv_bfloat16> x(16), y(1);
  DeviceBuffer<__nv_fp8_e4m3> w(16), x8(16);
  DeviceBuffer<float> s(1);
  using E = __nv_fp8_e4m3;
  // f16x2 products need fp16 x; the generic kernel is not built for e4m3 W with x in T; fp8 x
  // takes only the generic kernel.
  CHECK(k::launch_gemv_q<__nv_bfloat16, __nv_bfloat16, E>(
            x.get(), nullptr, w.get(), s.get(), y.get(), 1, 1, 16, 0, k::GemvMath::kHalf2) ==
        cudaErrorInvalidValue);
  CHECK(k::launch_gemv_q<__nv_bfloat16, __nv_bfloat16, E>(
            x.get(), nullptr, w.get(), s.get(), y.get(), 1, 1, 16, 0, k::GemvMath::kConvert) ==
        cudaErrorInvalidValue);
  CHECK(k::launch_gemv_q<__nv_bfloat16, E, E>(x8.get(), s.get(), w.get(), s.get(), y.get(), 1, 1,
                                              16, 0, k::GemvMath::kFp32) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
