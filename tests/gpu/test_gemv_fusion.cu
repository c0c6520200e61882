// The one-row GEMV's fusions (kernels/gemv.cuh, GemvFusion; the batch-1 decode path of
// src/rank/cuda/cuda_model.cu) against the kernels they replace, bit for bit:
//   norm_weight  launch_rmsnorm (first layer) or launch_add_rmsnorm's output (every later norm)
//                into h, then the GEMV on h;
//   add_to_y     the GEMV into p, then launch_add_rmsnorm's residual update r = round_T(r + p).
// The fused kernel repeats the norm kernel's partial sums in the norm kernel's order, so equality
// is exact for every weight type (T, int8, e4m3) and GEMV arithmetic (GemvMath), and hidden sizes
// that give the norm kernel 320, 512 and 2 x 512 threads' worth of pieces.
#include <cstdint>
#include <string>

#include "gpu_test_util.h"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

constexpr float kEps = 1e-5f;

// The GEMV for weights W (T, or 1-byte with per-row scales) with one row of x.
template <typename T, typename W>
struct Gemv {
  const W* w;
  const float* scale;  // 1-byte W only
  k::GemvMath math;
  cudaError_t plain(const T* x, T* y, int N, int K, const k::GemvFusion<T>& f = {}) const {
    if constexpr (std::is_same_v<W, T>) {
      return k::launch_gemv<T>(x, w, y, 1, N, K, 0, f);
    } else {
      return k::launch_gemv_q<T, T, W>(x, nullptr, w, scale, y, 1, N, K, 0, math, f);
    }
  }
  cudaError_t gate_up(const T* x, T* act, int F, int K, const k::GemvFusion<T>& f = {}) const {
    if constexpr (std::is_same_v<W, T>) {
      return k::launch_gemv_gate_up_swiglu<T>(x, w, act, 1, F, K, 0, f);
    } else {
      return k::launch_gemv_q_gate_up_swiglu<T, T, W>(x, nullptr, w, scale, act, 1, F, K, 0, math,
                                                      f);
    }
  }
};

template <typename T>
void expect_equal(const std::string& what, DeviceBuffer<T>& got, DeviceBuffer<T>& want) {
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_close(what, to_f32(got.download()), to_f32(want.download()), Tol{0, 0});
}

// One weight type and math: every fusion against the separate kernels, for K x N weights (N rows
// of the plain product; gate|up takes the first 2F rows).
template <typename T, typename W>
void check_fusions(const Gemv<T, W>& g, const std::string& name, int N, int K, int F) {
  const std::string shape = name + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  INFO(shape);
  const auto xf = exact_random(K, 3 + K, -2.f, 2.f);
  const auto nwf = exact_random(K, 5 + K, 0.25f, 1.75f);
  const auto pf = exact_random(K, 9 + K, -0.5f, 0.5f);     // the product added before the norm
  const auto af = exact_random(K, 11 + K, -1.f, 1.f);      // the input of the add_to_y product
  const auto rf = exact_random(N, 13 + N + K, -4.f, 4.f);  // the residual stream, N wide
  DeviceBuffer<T> x(to_dtype<T>(xf)), nw(to_dtype<T>(nwf)), h(K), y_ref(N), y_fused(N);

  // Input norm, first layer: rmsnorm(x) -> h -> GEMV.
  LLAMA2_CUDA_REQUIRE(k::launch_rmsnorm<T>(x.get(), nw.get(), 1, K, kEps, h.get(), 0));
  LLAMA2_CUDA_REQUIRE(g.plain(h.get(), y_ref.get(), N, K));
  y_fused.poison();
  LLAMA2_CUDA_REQUIRE(g.plain(x.get(), y_fused.get(), N, K, {nw.get(), kEps, false}));
  expect_equal("norm (rmsnorm) " + shape, y_fused, y_ref);

  // Input norm after a residual add: add_rmsnorm(x += p) -> h -> GEMV vs the GEMV on the sum.
  DeviceBuffer<T> res(to_dtype<T>(xf)), p(to_dtype<T>(pf));
  LLAMA2_CUDA_REQUIRE(
      k::launch_add_rmsnorm<T>(res.get(), p.get(), nw.get(), 1, K, kEps, h.get(), 0));
  LLAMA2_CUDA_REQUIRE(g.plain(h.get(), y_ref.get(), N, K));
  y_fused.poison();
  LLAMA2_CUDA_REQUIRE(g.plain(res.get(), y_fused.get(), N, K, {nw.get(), kEps, false}));
  expect_equal("norm (add_rmsnorm) " + shape, y_fused, y_ref);

  // gate|up + SwiGLU with the input norm.
  DeviceBuffer<T> act_ref(F), act_fused(F);
  LLAMA2_CUDA_REQUIRE(g.gate_up(h.get(), act_ref.get(), F, K));
  act_fused.poison();
  LLAMA2_CUDA_REQUIRE(g.gate_up(res.get(), act_fused.get(), F, K, {nw.get(), kEps, false}));
  expect_equal("gate|up norm " + shape, act_fused, act_ref);

  // Residual add: GEMV -> y, then add_rmsnorm's residual r = round(r + y).
  DeviceBuffer<T> a(to_dtype<T>(af)), r_ref(to_dtype<T>(rf)), r_fused(to_dtype<T>(rf)),
      rn(to_dtype<T>(exact_random(N, 17 + N, 0.5f, 1.5f))), hn(N);
  LLAMA2_CUDA_REQUIRE(g.plain(a.get(), y_ref.get(), N, K));
  LLAMA2_CUDA_REQUIRE(
      k::launch_add_rmsnorm<T>(r_ref.get(), y_ref.get(), rn.get(), 1, N, kEps, hn.get(), 0));
  LLAMA2_CUDA_REQUIRE(g.plain(a.get(), r_fused.get(), N, K, {nullptr, 0.f, true}));
  expect_equal("add " + shape, r_fused, r_ref);

  // Both at once (not used by the engine, instantiated all the same).
  DeviceBuffer<T> r2(to_dtype<T>(rf));
  LLAMA2_CUDA_REQUIRE(k::launch_rmsnorm<T>(x.get(), nw.get(), 1, K, kEps, h.get(), 0));
  LLAMA2_CUDA_REQUIRE(g.plain(h.get(), y_ref.get(), N, K));
  LLAMA2_CUDA_REQUIRE(
      k::launch_add_rmsnorm<T>(r2.get(), y_ref.get(), rn.get(), 1, N, kEps, hn.get(), 0));
  DeviceBuffer<T> r3(to_dtype<T>(rf));
  LLAMA2_CUDA_REQUIRE(g.plain(x.get(), r3.get(), N, K, {nw.get(), kEps, true}));
  expect_equal("norm + add " + shape, r3, r2);
}

template <typename T>
void check_dtype() {
  struct Shape {
    int N, K;
  };
  // K: the norm kernel's 320 / 512 / 512 (640 pieces) / 512 (2 each) threads; N: one row per
  // warp (<= 8192) and two (a lone last row), odd.
  for (const Shape s : {Shape{17, 2560}, Shape{8209, 4096}, Shape{33, 5120}, Shape{17, 8192}}) {
    if (int64_t{s.K} * sizeof(T) > k::kGemvNormMaxBytes) continue;
    const int F = s.N / 2;  // gate|up reads the first 2F <= N rows of W
    const auto wf = exact_random(size_t(s.N) * s.K, 19 + s.N + s.K, -1.f, 1.f);
    for_each_gemv_weight<T>(
        wf, s.N, [&](auto w, const float* scale, k::GemvMath m, const std::string& name) {
          using W = std::remove_const_t<std::remove_pointer_t<decltype(w)>>;
          check_fusions(Gemv<T, W>{w, scale, m}, name, s.N, s.K, F);
        });
  }
}

}  // namespace

TEST_CASE("gemv fusions: input RMSNorm and residual add equal the separate kernels, bit for bit") {
  LLAMA2_GPU_TEST_OR_SKIP();
  check_dtype<float>();
  check_dtype<__half>();
  check_dtype<__nv_bfloat16>();
}

TEST_CASE("gemv fusions: what they cannot take is refused before launching") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int K = 64, N = 8;
  DeviceBuffer<__half> x(2 * K), w(N * K), y(2 * N), nw(K), big(16384);
  const k::GemvFusion<__half> norm{nw.get(), kEps, false}, add{nullptr, 0.f, true};
  // Two rows.
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 2, N, K, 0, norm) ==
        cudaErrorInvalidValue);
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 2, N, K, 0, add) ==
        cudaErrorInvalidValue);
  // gate|up has no residual add.
  CHECK(k::launch_gemv_gate_up_swiglu<__half>(x.get(), w.get(), y.get(), 1, N / 2, K, 0, add) ==
        cudaErrorInvalidValue);
  // A misaligned norm weight; a row wider than the shared memory the norm takes.
  const k::GemvFusion<__half> skewed{nw.get() + 1, kEps, false};
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, N, K, 0, skewed) ==
        cudaErrorInvalidValue);
  const int wide = k::kGemvNormMaxBytes / 2 + 8;
  CHECK(k::launch_gemv<__half>(big.get(), big.get(), y.get(), 1, 1, wide, 0, norm) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
