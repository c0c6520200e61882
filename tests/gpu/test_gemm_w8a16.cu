// The tensor-core W8A16 GEMM (kernels/gemm_w8a16.cu) against a double-precision CPU reference of
// the same quantized operands, on odd shapes (M across the four row tiles, N not a multiple of the
// 128-column tile, K = 16 x odd: a partial last stage), fp16 and bf16 activations, int8 and e4m3
// weights, with and without split K; and the engine's int8 path (CudaLinear) on either side of
// LLAMA2_W8A16_ROWS.
// Tolerance: x (bf16-exact) times an int8 or e4m3 weight is exact in fp32, so the result differs
// from the exact sum only by the fp32 accumulation (tensor cores, then the split sums) and the one
// rounding to T: |got - want| <= rel_tol<T>(1) |want| + 2^-16 scale[n] sum_k |x w| (a wrong
// element, or a misplaced k, is off by whole products, far above that).
#include <cublas_v2.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "common/engine_config.h"
#include "gpu_test_util.h"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/quant.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cuda/cuda_weights.h"
#include "rank/cuda/linear.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

constexpr int kSms = 132;  // the split rule's multiprocessor count (any value is valid)

// Random weight codes: int8 in [-127, 127]; e4m3 from values in [-448, 448] (all finite).
template <typename Q>
std::vector<Q> random_codes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Q> q(n);
  if constexpr (std::is_same_v<Q, int8_t>) {
    std::uniform_int_distribution<int> d(-127, 127);
    for (auto& v : q) v = static_cast<int8_t>(d(rng));
  } else {
    std::uniform_real_distribution<float> d(-448.f, 448.f);
    for (auto& v : q) v = __nv_fp8_e4m3(d(rng));
  }
  return q;
}

std::vector<float> random_scales(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(1e-4f, 2e-2f);
  std::vector<float> s(n);
  for (auto& v : s) v = d(rng);
  return s;
}

// want[m, n] = scale[n] * sum_k x[m, k] q[n, k] (double, unrounded); bound: scale[n] sum |x q|.
template <typename Q>
void reference(const std::vector<float>& x, const std::vector<Q>& q,
               const std::vector<float>& scale, int M, int N, int K, std::vector<double>* want,
               std::vector<double>* bound) {
  std::vector<float> wf(q.size());
  for (size_t i = 0; i < q.size(); ++i) wf[i] = k::to_float(q[i]);
  reference_xwt(x, wf, M, N, K, want, bound);
  for (size_t i = 0; i < want->size(); ++i) {
    (*want)[i] *= scale[i % N];
    (*bound)[i] *= scale[i % N];
  }
}

template <typename T>
void expect_matches(const std::string& what, const std::vector<float>& got,
                    const std::vector<double>& want, const std::vector<double>& bound) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double lim = rel_tol<T>(1) * std::fabs(want[i]) + 0x1p-16 * bound[i] + 1e-30;
    const double ratio = std::fabs(got[i] - want[i]) / lim;
    if (!(ratio <= 1)) ++bad;  // NaN (an element never written) counts
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " outside; worst ["
                               << worst << "] got " << got[worst] << " want " << want[worst] << " ("
                               << worst_ratio << " x bound)");
}

// A split-K workspace for shapes up to M x N (counters zeroed once, as CudaLinear does).
struct TestWorkspace {
  DeviceBuffer<float> sums;
  DeviceBuffer<int> counts;
  k::GemmW8A16Workspace ws;
  TestWorkspace(int M, int N)
      : sums(size_t(M) * N * 8), counts(size_t(k::gemm_w8a16_counters(kSms))) {
    LLAMA2_CUDA_REQUIRE(cudaMemset(counts.get(), 0, counts.size() * sizeof(int)));
    ws.sm_count = kSms;
    ws.partial = sums.get();
    ws.partial_elems = static_cast<int64_t>(sums.size());
    ws.counters = counts.get();
    ws.n_counters = static_cast<int>(counts.size());
  }
};

template <typename T, typename Q>
void check_shape(int M, int N, int K, uint32_t seed) {
  const auto xf = exact_random(size_t(M) * K, seed);
  const auto q = random_codes<Q>(size_t(N) * K, seed + 1);
  const auto scale = random_scales(N, seed + 2);
  std::vector<double> want, bound;
  reference(xf, q, scale, M, N, K, &want, &bound);
  DeviceBuffer<T> dx(to_dtype<T>(xf)), dy(want.size());
  DeviceBuffer<Q> dw(q);
  DeviceBuffer<float> ds(scale);
  TestWorkspace tw(M, N);
  const k::GemmW8A16Args<T, Q> args{dx.get(), dw.get(), ds.get(), dy.get(), M, N, K};
  const std::string shape = std::string(std::is_same_v<Q, int8_t> ? " int8" : " e4m3") +
                            " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K);
  // The automatic tiling (split K for these small grids), every row tile unsplit, and the
  // automatic one again: the tile counters went back to 0, and the sums are deterministic.
  std::vector<k::GemmW8A16Tiling> tilings = {k::plan_gemm_w8a16(M, N, K, tw.ws)};
  for (int bm : {16, 32, 64, 128}) {
    k::GemmW8A16Tiling t;
    t.bm = bm;
    t.k_tiles_per_split = static_cast<int>(k::ceil_div(K, k::kW8A16BlockK));
    tilings.push_back(t);
  }
  const k::GemmW8A16Tiling again = tilings[0];
  tilings.push_back(again);
  std::vector<float> first;
  for (size_t i = 0; i < tilings.size(); ++i) {
    const auto& t = tilings[i];
    dy.poison();
    LLAMA2_CUDA_REQUIRE((k::launch_gemm_w8a16<T, Q>(args, t, tw.ws, 0)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const auto got = to_f32(dy.download());
    expect_matches<T>(label<T>("gemm_w8a16", shape + " bm=" + std::to_string(t.bm) +
                                                 " splits=" + std::to_string(t.splits)),
                      got, want, bound);
    if (i == 0) first = got;
  }
  expect_close(label<T>("gemm_w8a16 rerun", shape), to_f32(dy.download()), first, Tol{0, 0});

  // W as [gate; up] (N = 2F): SwiGLU in the epilogue against the plain product + launch_swiglu
  // with the same tiling (the sums agree up to the order of fp32 additions inside the mma).
  const int F = N / 2;
  DeviceBuffer<T> fused(size_t(M) * F), two_step(size_t(M) * F);
  k::GemmW8A16Args<T, Q> gu = args;
  gu.y = fused.get();
  gu.gate_up_swiglu = true;
  for (const auto& t : {tilings[0], tilings[1], tilings[4]}) {
    fused.poison();
    LLAMA2_CUDA_REQUIRE((k::launch_gemm_w8a16<T, Q>(args, t, tw.ws, 0)));
    LLAMA2_CUDA_REQUIRE(k::launch_swiglu<T>(dy.get(), M, F, two_step.get(), 0));
    LLAMA2_CUDA_REQUIRE((k::launch_gemm_w8a16<T, Q>(gu, t, tw.ws, 0)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    expect_close(label<T>("gemm_w8a16 gate_up_swiglu", shape + " bm=" + std::to_string(t.bm) +
                                                           " splits=" + std::to_string(t.splits)),
                 to_f32(fused.download()), to_f32(two_step.download()), Tol{rel_tol<T>(2), 1e-3});
  }
}

}  // namespace

TEST_CASE("gemm_w8a16: int8 and e4m3 weights, fp16 and bf16, odd shapes, split K") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // The automatic tiling splits K here (few output tiles): the first plan of each shape has
  // splits > 1 wherever K has at least 8 stages.
  {
    TestWorkspace tw(9, 200);
    CHECK(k::plan_gemm_w8a16(9, 200, 1040, tw.ws).splits > 1);
  }
  uint32_t seed = 100;
  for (int M : {9, 17, 64, 100, 300}) {
    for (const auto& [N, K] : {std::pair<int, int>{200, 1040}, {72, 16}, {1000, 272}}) {
      check_shape<__half, int8_t>(M, N, K, seed++);
      check_shape<__nv_bfloat16, int8_t>(M, N, K, seed++);
      check_shape<__half, __nv_fp8_e4m3>(M, N, K, seed++);
      check_shape<__nv_bfloat16, __nv_fp8_e4m3>(M, N, K, seed++);
    }
  }
}

TEST_CASE("CudaLinear int8: the W8A16 GEMM up to LLAMA2_W8A16_ROWS, dequantize + cuBLAS above") {
  LLAMA2_GPU_TEST_OR_SKIP();
  using T = __half;
  const int H = 272, Q = 272, KV = 136, F = 400;  // N of q|k|v = 544, gate|up = 800
  const int N = Q + 2 * KV, K = H;
  const auto q = random_codes<int8_t>(size_t(N) * K, 7);
  const auto scale = random_scales(N, 8);
  llama2::LinearWeight w;
  w.w = llama2::DeviceBuffer(q.size(), "w");
  w.scale = llama2::DeviceBuffer(scale.size() * sizeof(float), "scale");
  LLAMA2_CUDA_REQUIRE(cudaMemcpy(w.w.as<void>(), q.data(), q.size(), cudaMemcpyHostToDevice));
  LLAMA2_CUDA_REQUIRE(cudaMemcpy(w.scale.as<void>(), scale.data(), scale.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
  cublasHandle_t blas = nullptr;
  REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
  const int max_rows = 300;
  for (int w8a16_rows : {256, 0}) {
    llama2::CudaLinear<T> linear(llama2::WeightDType::kInt8, llama2::LinearRouting{1, w8a16_rows},
                                 max_rows, llama2::ProjectionDims{H, Q, KV, F}, blas, nullptr);
    for (int M : {9, 64, 256, 300}) {
      const auto xf = exact_random(size_t(M) * K, 9 + M);
      std::vector<double> want, bound;
      reference(xf, q, scale, M, N, K, &want, &bound);
      DeviceBuffer<T> dx(to_dtype<T>(xf)), dy(want.size());
      dy.poison();
      linear.matmul(dx.get(), w, dy.get(), M, N, K);
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      // The dequantized copy rounds scale x q to T first: one more rounding per weight.
      const bool dequantized = w8a16_rows == 0 || M > w8a16_rows;
      const auto got = to_f32(dy.download());
      const std::string what =
          "CudaLinear int8 W8A16_ROWS=" + std::to_string(w8a16_rows) + " M=" + std::to_string(M);
      if (dequantized) {
        for (size_t i = 0; i < bound.size(); ++i) bound[i] *= 64;  // 2^-10: a rounding of W
      }
      expect_matches<T>(what, got, want, bound);

      // gate_up_swiglu on the same weight as [gate; up] (F = N / 2): the fused epilogue where
      // the W8A16 GEMM takes M rows, nothing (false) where the dequantized copy does.
      DeviceBuffer<T> act(size_t(M) * (N / 2)), ref(size_t(M) * (N / 2));
      act.poison();
      const bool fused = linear.gate_up_swiglu(dx.get(), w, act.get(), M, N / 2, K);
      CHECK_MESSAGE(fused == !dequantized, what);
      if (fused) {
        LLAMA2_CUDA_REQUIRE(k::launch_swiglu<T>(dy.get(), M, N / 2, ref.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what + " gate_up_swiglu", to_f32(act.download()), to_f32(ref.download()),
                     Tol{rel_tol<T>(2), 1e-3});
      }
    }
  }
  cublasDestroy(blas);
}

TEST_CASE("dequantize_rows, 16 per thread: the scalar kernel's numbers, and more than 65535 rows") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (const auto& [rows, K] : {std::pair<int, int>{37, 1040}, {70001, 16}}) {
    const auto q = random_codes<int8_t>(size_t(rows) * K, 11 + K);
    const auto scale = random_scales(rows, 12);
    std::vector<float> want(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      want[i] = k::round_to<__nv_bfloat16>(scale[i / K] * static_cast<float>(q[i]));
    }
    DeviceBuffer<int8_t> dq(q);
    DeviceBuffer<float> ds(scale);
    DeviceBuffer<__nv_bfloat16> out(q.size());
    out.poison();
    LLAMA2_CUDA_REQUIRE((k::launch_dequantize_rows<int8_t, __nv_bfloat16>(dq.get(), ds.get(),
                                                                          out.get(), rows, K, 0)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    expect_close("dequantize_rows bf16 rows=" + std::to_string(rows) + " K=" + std::to_string(K),
                 to_f32(out.download()), want, Tol{0, 0});
  }
}
