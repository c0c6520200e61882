// Weight quantization (--weight-dtype fp8 | int8): the row quantizer (kernels/quant.cu) exactly
// against the host's rule, the quantized GEMV (kernels/gemv.cu, launch_gemv_q) and the cuBLASLt
// FP8 GEMM (src/rank/cuda/fp8_gemm.cu) against a double-precision reference of the same
// quantized operands.
//   gemv_q: the products of e4m3 x e4m3 and int8 x (bf16-exact) are exact in fp32, so only the
//           fp32 summation order and the final rounding to T differ: rtol one rounding of T,
//           atol 2e-6 * K * the scales.
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

// want[m, n] = sum_k a[m, k] * b[n, k] in double; bound[m, n] = sum_k |a b|.
void reference(const std::vector<float>& a, const std::vector<float>& b, int M, int N, int K,
               std::vector<float>* want, std::vector<double>* bound) {
  want->assign(size_t(M) * N, 0.f);
  bound->assign(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = 0, t = 0;
      for (int i = 0; i < K; ++i) {
        const double p = double(a[size_t(m) * K + i]) * b[size_t(n) * K + i];
        s += p;
        t += std::fabs(p);
      }
      (*want)[size_t(m) * N + n] = static_cast<float>(s);
      (*bound)[size_t(m) * N + n] = t;
    }
  }
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

TEST_CASE("gemv_q: int8 weights (W8A16) and fp8 weights with fp8 activations (W8A8)") {
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
            LLAMA2_CUDA_REQUIRE((k::launch_gemv_q<T, T, int8_t>(dx.get(), nullptr, dw.get(),
                                                                dsw.get(), dy.get(), M, N, K, 0)));
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

TEST_CASE("Fp8Gemm: cuBLASLt FP8 with per-row scales matches the quantized reference") {
  LLAMA2_GPU_TEST_OR_SKIP();
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
      DeviceBuffer<__nv_fp8_e4m3> dx(x8), dw(w8);
      DeviceBuffer<float> dsx(sx), dsw(s8);
      DeviceBuffer<__half> dy(want.size());
      dy.poison();
      llama2::Fp8Gemm gemm(CUDA_R_16F, M, N, nullptr);
      gemm.run(dx.get(), dsx.get(), dw.get(), dsw.get(), dy.get(), M, N, K);
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      const auto got = to_f32(dy.download());
      size_t bad = 0, worst = 0;
      double worst_ratio = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double lim = 0x1p-12 * bound[i] + 0x1p-11 * std::fabs(want[i]) + 1e-6;
        const double ratio = std::fabs(got[i] - want[i]) / lim;
        if (!(ratio <= 1)) ++bad;
        if (!(ratio <= worst_ratio)) {
          worst_ratio = ratio;
          worst = i;
        }
      }
      CHECK_MESSAGE(bad == 0, "Fp8Gemm M=" << M << " N=" << N << ": " << bad << " outside; worst ["
                                           << worst << "] got " << got[worst] << " want "
                                           << want[worst] << " (" << worst_ratio << " x bound)");
    }
  }
}
