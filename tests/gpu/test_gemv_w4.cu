// The 4-bit kernels (kernels/gemv_w4.cuh, and the W8A16 GEMM with W = W4Word) against the CPU:
//   - launch_quantize_w4 gives exactly the q, z and s of AWQ's rule computed here on the host
//     (the rule of src/tools/quantize_int4.cpp), including a partial last group;
//   - launch_dequantize_w4 gives exactly round_T((q - z) s);
//   - the GEMV (1, 3, 8 rows) and the GEMM (17, 64, 255 rows) match a double reference of the
//     dequantized weights within the formats' rounding (fp16: products of 4 terms summed in f16x2;
//     GEMM: the weights rounded to T once), and the fused gate|up + SwiGLU equals SwiGLU of the
//     plain products.
// Tolerance: |got - want| <= rel_tol<T>(2) |want| + c * sum_k |x w| with c = 2^-9 (fp16) or 2^-6
// (bf16): a misplaced nibble or group moves the sums by whole products, far above it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/gemv_w4.cuh"
#include "kernels/w4_convert.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

// AWQ's grid of one group on the host: s = fp16(max(hi - lo, 1e-5) / 15), z = clamp(rint(-lo / s)).
struct HostW4 {
  std::vector<int> q;      // [N, K]
  std::vector<float> s;    // [groups, N], as T holds it
  std::vector<int> z;      // [groups, N]
  std::vector<float> deq;  // [N, K] (q - z) s in fp32
};

template <typename T>
HostW4 host_quantize(const std::vector<float>& w, int N, int K, int G) {
  const int groups = (K + G - 1) / G;
  HostW4 h{std::vector<int>(size_t(N) * K), std::vector<float>(size_t(groups) * N),
           std::vector<int>(size_t(groups) * N), std::vector<float>(size_t(N) * K)};
  for (int n = 0; n < N; ++n) {
    for (int g = 0; g < groups; ++g) {
      const int k0 = g * G, k1 = std::min(K, k0 + G);
      float lo = INFINITY, hi = -INFINITY;
      for (int k = k0; k < k1; ++k) {
        lo = std::min(lo, w[size_t(n) * K + k]);
        hi = std::max(hi, w[size_t(n) * K + k]);
      }
      const float s = __half2float(__float2half_rn(std::max(hi - lo, 1e-5f) / 15.f));
      const int z = static_cast<int>(std::clamp(std::nearbyint(-lo / s), 0.f, 15.f));
      const float sT = k::to_float(k::from_float<T>(s));
      h.s[size_t(g) * N + n] = sT;
      h.z[size_t(g) * N + n] = z;
      for (int k = k0; k < k1; ++k) {
        const float v = std::clamp(std::nearbyint(w[size_t(n) * K + k] / s) + z, 0.f, 15.f);
        h.q[size_t(n) * K + k] = static_cast<int>(v);
        h.deq[size_t(n) * K + k] = static_cast<float>(static_cast<int>(v) - z) * sT;
      }
    }
  }
  return h;
}

template <typename T>
double bound_factor() {
  return std::is_same_v<T, __half> ? 0x1p-9 : 0x1p-6;
}

template <typename T>
void expect_product(const std::string& what, const std::vector<float>& got,
                    const std::vector<float>& x, const std::vector<float>& deq, int M, int N,
                    int K) {
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double want = 0, bound = 0;
      for (int kk = 0; kk < K; ++kk) {
        const double p = double(x[size_t(m) * K + kk]) * deq[size_t(n) * K + kk];
        want += p;
        bound += std::fabs(p);
      }
      const size_t i = size_t(m) * N + n;
      const double lim = rel_tol<T>(2) * std::fabs(want) + bound_factor<T>() * bound + 1e-30;
      const double ratio = std::fabs(got[i] - want) / lim;
      if (!(ratio <= 1)) ++bad;
      if (!(ratio <= worst_ratio)) {
        worst_ratio = ratio;
        worst = i;
      }
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " outside; worst ["
                               << worst << "] (" << worst_ratio << " x bound)");
}

template <typename T>
void check_shape(int N, int K, int G, uint32_t seed) {
  const std::string shape =
      " N=" + std::to_string(N) + " K=" + std::to_string(K) + " G=" + std::to_string(G);
  const auto wf = round_vec<T>(exact_random(size_t(N) * K, seed, -0.05f, 0.05f));
  const HostW4 h = host_quantize<T>(wf, N, K, G);
  const int groups = (K + G - 1) / G;
  DeviceBuffer<T> dw(to_dtype<T>(wf));
  DeviceBuffer<uint32_t> dq(size_t(N) * K / 8), dsz(size_t(groups) * N);
  LLAMA2_CUDA_REQUIRE(k::launch_quantize_w4<T>(dw.get(), dq.get(), dsz.get(), N, K, G, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  const auto q = dq.download();
  const auto sz = dsz.download();
  size_t differ = 0;
  for (int n = 0; n < N; ++n) {
    for (int kk = 0; kk < K; ++kk) {
      const uint32_t word = q[size_t(n) * (K / 8) + kk / 8];
      differ += int((word >> (4 * k::w4_nibble(kk % 8))) & 0xfu) != h.q[size_t(n) * K + kk];
    }
  }
  for (size_t i = 0; i < sz.size(); ++i) {
    T pair[2];
    std::memcpy(static_cast<void*>(pair), &sz[i], 4);
    differ += k::to_float(pair[0]) != h.s[i];
    differ += k::to_float(pair[1]) != k::w4_bias<T>(h.z[i]);
  }
  CHECK_MESSAGE(differ == 0, label<T>("quantize_w4", shape) << ": " << differ << " differ");

  const k::W4Matrix w4{dq.get(), dsz.get(), G};
  DeviceBuffer<T> dd(size_t(N) * K);
  LLAMA2_CUDA_REQUIRE(k::launch_dequantize_w4<T>(w4, dd.get(), N, K, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_close(label<T>("dequantize_w4", shape), to_f32(dd.download()), round_vec<T>(h.deq),
               Tol{0, 0});

  k::GemmW8A16Workspace ws;  // never split K here (no workspace)
  ws.sm_count = 132;
  for (int M : {1, 3, 8, 17, 64, 255}) {
    const auto xf = exact_random(size_t(M) * K, seed + M);
    DeviceBuffer<T> dx(to_dtype<T>(xf)), dy(size_t(M) * N), dact(size_t(M) * N / 2);
    const bool gemv = M <= k::kGemvMaxRows;
    k::GemmW8A16Args<T, k::W4Word> a{
        dx.get(), reinterpret_cast<const k::W4Word*>(dq.get()), nullptr, dy.get(), M, N, K};
    a.sz = dsz.get();
    a.group = G;
    const std::string what = (gemv ? "gemv_w4" : "gemm_w4") + shape + " M=" + std::to_string(M);
    dy.poison();
    if (gemv) {
      LLAMA2_CUDA_REQUIRE(k::launch_gemv_w4<T>(dx.get(), w4, dy.get(), M, N, K, 0));
    } else {
      LLAMA2_CUDA_REQUIRE(
          (k::launch_gemm_w8a16<T, k::W4Word>(a, k::plan_gemm_w8a16(M, N, K, ws), ws, 0)));
    }
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const auto y = to_f32(dy.download());
    expect_product<T>(label<T>(what, ""), y, xf, h.deq, M, N, K);

    // [gate; up] = the two halves of W: act = silu_mul(round(gate), round(up)) of the plain sums.
    const int F = N / 2;
    if (gemv) {
      LLAMA2_CUDA_REQUIRE(
          k::launch_gemv_w4_gate_up_swiglu<T>(dx.get(), w4, dact.get(), M, F, K, 0));
    } else {
      a.y = dact.get();
      a.gate_up_swiglu = true;
      LLAMA2_CUDA_REQUIRE(
          (k::launch_gemm_w8a16<T, k::W4Word>(a, k::plan_gemm_w8a16(M, N, K, ws), ws, 0)));
    }
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const auto act = to_f32(dact.download());
    std::vector<float> want(act.size());
    for (int m = 0; m < M; ++m) {
      for (int j = 0; j < F; ++j) {
        const float g = y[size_t(m) * N + j], u = y[size_t(m) * N + F + j];
        want[size_t(m) * F + j] = k::round_to<T>(k::round_to<T>(g / (1.f + std::exp(-g))) * u);
      }
    }
    // The same T inputs; only expf's last bit may differ from the host's exp.
    expect_close(label<T>(what + " gate|up+SwiGLU", ""), act, want, Tol{rel_tol<T>(2), 1e-6});
  }
}

}  // namespace

TEST_CASE("4-bit weights: quantizer, dequantizer, GEMV and GEMM against the CPU") {
  if (!gpu_available()) return;
  for (const auto& [N, K, G] : {std::tuple{48, 352, 64}, std::tuple{264, 1024, 128}}) {
    check_shape<__half>(N, K, G, 11);
    check_shape<__nv_bfloat16>(N, K, G, 13);
  }
  // Operands the kernels do not take: one clear error, nothing launched.
  DeviceBuffer<__half> x(64);
  DeviceBuffer<uint32_t> q(64), sz(64);
  const k::W4Matrix bad{q.get(), sz.get(), 48};  // group not a multiple of 64
  CHECK(k::launch_gemv_w4<__half>(x.get(), bad, x.get(), 1, 8, 64, 0) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}
