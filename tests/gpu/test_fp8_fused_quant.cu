// The fp8 (W8A8) path's quantize launches folded into the kernels that produce the activations
// (LLAMA2_FP8_FUSE, src/rank/cuda/linear.h fp8_rows): the RMSNorms' e4m3 rows and the gate|up
// epilogue (scale + SwiGLU + quantize) must equal, byte for byte, what the separate launches they
// replace produce: launch_quantize_rows of the norm's output, and launch_scale_outer ->
// launch_swiglu -> launch_quantize_rows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/dtype.cuh"
#include "kernels/quant.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/swiglu.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;
using E4m3 = __nv_fp8_e4m3;

namespace {

template <typename A, typename B>
void expect_same_bytes(const std::string& what, const std::vector<A>& a, const std::vector<B>& b) {
  static_assert(sizeof(A) == sizeof(B));
  REQUIRE(a.size() == b.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(A)) != 0 && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0,
                what << ": " << bad << " of " << a.size() << " differ, first at " << first);
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Both norms, with and without e4m3 rows: the T output is unchanged and the rows are those
// launch_quantize_rows makes of it.
template <typename T>
void check_norms(int rows, int hidden) {
  const std::string tag = std::string(k::dtype_name<T>()) + " rows " + std::to_string(rows) +
                          " hidden " + std::to_string(hidden);
  // Rows of different magnitudes, so that each row's scale is its own.
  auto xf = exact_random(size_t(rows) * hidden, 3 + hidden);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < hidden; ++c) xf[size_t(r) * hidden + c] *= float(1 + r % 7);
  }
  const auto x = to_dtype<T>(xf);
  const auto res = to_dtype<T>(exact_random(size_t(rows) * hidden, 5 + rows, -4.f, 4.f));
  const auto w = to_dtype<T>(exact_random(hidden, 9, 0.5f, 1.5f));
  DeviceBuffer<T> dx(x), dw(w), out_a(x.size()), out_b(x.size());
  DeviceBuffer<E4m3> q_a(x.size()), q_b(x.size());
  DeviceBuffer<float> s_a(rows), s_b(rows);
  for (const bool add : {false, true}) {
    DeviceBuffer<T> res_a(res), res_b(res);
    for (auto* b : {&out_a, &out_b}) b->poison();
    q_a.poison();
    q_b.poison();
    const k::RowsE4m3 q8{q_a.get(), s_a.get()};
    if (add) {
      LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(res_a.get(), dx.get(), dw.get(), rows, hidden,
                                                   1e-5f, out_a.get(), nullptr, q8));
      LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(res_b.get(), dx.get(), dw.get(), rows, hidden,
                                                   1e-5f, out_b.get(), nullptr));
    } else {
      LLAMA2_CUDA_REQUIRE(
          k::launch_rmsnorm<T>(dx.get(), dw.get(), rows, hidden, 1e-5f, out_a.get(), nullptr, q8));
      LLAMA2_CUDA_REQUIRE(
          k::launch_rmsnorm<T>(dx.get(), dw.get(), rows, hidden, 1e-5f, out_b.get(), nullptr));
    }
    LLAMA2_CUDA_REQUIRE((k::launch_quantize_rows<E4m3, T>(out_b.get(), q_b.get(), s_b.get(), rows,
                                                          hidden, nullptr)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::string what = (add ? "add_rmsnorm " : "rmsnorm ") + tag;
    expect_same_bytes(what + ": T output", out_a.download(), out_b.download());
    expect_same_bytes(what + ": residual", res_a.download(), res_b.download());
    expect_same_bytes(what + ": e4m3 rows", q_a.download(), q_b.download());
    expect_same_bytes(what + ": scales", s_a.download(), s_b.download());
  }
}

template <typename T>
void check_scale_swiglu_quantize(int M, int F) {
  const std::string tag =
      std::string(k::dtype_name<T>()) + " M " + std::to_string(M) + " F " + std::to_string(F);
  // Sums as cuBLASLt leaves them (k::Fp8Sum; e4m3 products: up to a few thousand), scales that
  // bring gate and up to the +-20 range SwiGLU sees.
  const auto acc = uniform(size_t(M) * 2 * F, 11 + M, -3000.f, 3000.f);
  const auto xs = uniform(M, 12, 0.001f, 0.01f);
  const auto ws = uniform(2 * F, 13, 0.0005f, 0.002f);
  DeviceBuffer<k::Fp8Sum> dacc(to_dtype<k::Fp8Sum>(acc));
  DeviceBuffer<float> dxs(xs), dws(ws), s_a(M), s_b(M);
  DeviceBuffer<T> gate_up(size_t(M) * 2 * F), act(size_t(M) * F);
  DeviceBuffer<E4m3> q_a(size_t(M) * F), q_b(size_t(M) * F);
  q_a.poison();
  q_b.poison();
  LLAMA2_CUDA_REQUIRE(k::launch_scale_swiglu_quantize<T>(dacc.get(), dxs.get(), dws.get(), M, F,
                                                         {q_a.get(), s_a.get()}, nullptr));
  LLAMA2_CUDA_REQUIRE(
      k::launch_scale_outer<T>(dacc.get(), dxs.get(), dws.get(), gate_up.get(), M, 2 * F, nullptr));
  LLAMA2_CUDA_REQUIRE(k::launch_swiglu<T>(gate_up.get(), M, F, act.get(), nullptr));
  LLAMA2_CUDA_REQUIRE(
      (k::launch_quantize_rows<E4m3, T>(act.get(), q_b.get(), s_b.get(), M, F, nullptr)));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_same_bytes("scale_swiglu_quantize " + tag + ": e4m3 rows", q_a.download(), q_b.download());
  expect_same_bytes("scale_swiglu_quantize " + tag + ": scales", s_a.download(), s_b.download());
  // Not vacuous: the rows use e4m3's range (a row's largest value quantizes to +-448).
  const auto q = q_a.download();
  float amax = 0;
  for (const E4m3& v : q) amax = std::max(amax, std::fabs(float(v)));
  CHECK(amax == 448.f);
}

// launch_add_rmsnorm_scaled (with and without e4m3 rows, the x scales in the array the e4m3 rows'
// scales overwrite, as the engine runs it) against launch_scale_outer + launch_add_rmsnorm (+
// launch_quantize_rows).
template <typename T>
void check_add_rmsnorm_scaled(int rows, int hidden) {
  const std::string tag = std::string(k::dtype_name<T>()) + " rows " + std::to_string(rows) +
                          " hidden " + std::to_string(hidden);
  const auto acc = uniform(size_t(rows) * hidden, 21 + rows, -3000.f, 3000.f);
  const auto xs = uniform(rows, 22, 0.001f, 0.01f);
  const auto ws = uniform(hidden, 23, 0.0001f, 0.0005f);
  const auto res = to_dtype<T>(exact_random(size_t(rows) * hidden, 24, -4.f, 4.f));
  const auto w = to_dtype<T>(exact_random(hidden, 25, 0.5f, 1.5f));
  DeviceBuffer<k::Fp8Sum> dacc(to_dtype<k::Fp8Sum>(acc));
  DeviceBuffer<float> dws(ws), s_b(rows);
  DeviceBuffer<T> dw(w), y(acc.size()), out_a(acc.size()), out_b(acc.size());
  DeviceBuffer<E4m3> q_a(acc.size()), q_b(acc.size());
  for (const bool quantize : {false, true}) {
    DeviceBuffer<float> xs_a(xs), xs_b(xs);  // xs_a doubles as the e4m3 rows' scales
    DeviceBuffer<T> res_a(res), res_b(res);
    out_a.poison();
    out_b.poison();
    q_a.poison();
    const k::RowsE4m3 q8 = quantize ? k::RowsE4m3{q_a.get(), xs_a.get()} : k::RowsE4m3{};
    LLAMA2_CUDA_REQUIRE(
        k::launch_add_rmsnorm_scaled<T>(res_a.get(), {dacc.get(), xs_a.get(), dws.get()}, dw.get(),
                                        rows, hidden, 1e-5f, out_a.get(), nullptr, q8));
    LLAMA2_CUDA_REQUIRE(k::launch_scale_outer<T>(dacc.get(), xs_b.get(), dws.get(), y.get(), rows,
                                                 hidden, nullptr));
    LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(res_b.get(), y.get(), dw.get(), rows, hidden,
                                                 1e-5f, out_b.get(), nullptr));
    LLAMA2_CUDA_REQUIRE((k::launch_quantize_rows<E4m3, T>(out_b.get(), q_b.get(), s_b.get(), rows,
                                                          hidden, nullptr)));
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    const std::string what = "add_rmsnorm_scaled " + tag + (quantize ? " + e4m3" : "");
    expect_same_bytes(what + ": T output", out_a.download(), out_b.download());
    expect_same_bytes(what + ": residual", res_a.download(), res_b.download());
    if (quantize) {
      expect_same_bytes(what + ": e4m3 rows", q_a.download(), q_b.download());
      expect_same_bytes(what + ": scales", xs_a.download(), s_b.download());
    }
  }
}

// launch_rope_kv_scaled against launch_scale_outer into a T QKV buffer + launch_rope_kv: the
// rotated q and both caches, byte for byte. C: the cache element (T or e4m3).
template <typename T, typename C>
void check_rope_kv_scaled(int heads, int kv_heads, int d, int n) {
  const std::string tag = std::string(k::dtype_name<T>()) + (std::is_same_v<C, T> ? "" : " e4m3") +
                          " H " + std::to_string(heads) + " G " + std::to_string(kv_heads) + " d " +
                          std::to_string(d) + " n " + std::to_string(n);
  const int stride = (heads + 2 * kv_heads) * d, bs = 16, blocks = (n + bs - 1) / bs + 1;
  const auto acc = uniform(size_t(n) * stride, 31 + n, -3000.f, 3000.f);
  const auto xs = uniform(n, 32, 0.001f, 0.01f);
  const auto ws = uniform(stride, 33, 0.0002f, 0.001f);
  std::vector<int32_t> pos(n), slot(n);
  std::mt19937 rng(34);
  for (int t = 0; t < n; ++t) {
    pos[t] = static_cast<int32_t>(rng() % 4000);
    slot[t] = t == 1 ? -1 : t + bs;  // token 1: padding (q only); the first block stays unused
  }
  DeviceBuffer<k::Fp8Sum> dacc(to_dtype<k::Fp8Sum>(acc));
  DeviceBuffer<float> dxs(xs), dws(ws);
  DeviceBuffer<int32_t> dpos(pos), dslot(slot);
  DeviceBuffer<T> q_a(size_t(n) * stride), y(size_t(n) * stride);
  const size_t cache_elems = size_t(blocks) * kv_heads * bs * d;
  DeviceBuffer<C> ka(cache_elems), va(cache_elems), kb(cache_elems), vb(cache_elems);
  for (auto* b : {&ka, &va, &kb, &vb}) {
    LLAMA2_CUDA_REQUIRE(cudaMemset(b->get(), 0, cache_elems * sizeof(C)));
  }
  q_a.poison();
  const k::RopeFreqs freqs = k::make_rope_freqs(d, 10000.0);
  const k::RopeKvTokens tok{dpos.get(), dslot.get(), n};
  const k::PagedKvCache<C> cache_a{ka.get(), va.get(), blocks, kv_heads, bs, d};
  const k::PagedKvCache<C> cache_b{kb.get(), vb.get(), blocks, kv_heads, bs, d};
  LLAMA2_CUDA_REQUIRE(
      (k::launch_rope_kv_scaled<T, C>({dacc.get(), dxs.get(), dws.get()}, stride, q_a.get(), stride,
                                      heads, tok, freqs, cache_a, nullptr)));
  LLAMA2_CUDA_REQUIRE(
      k::launch_scale_outer<T>(dacc.get(), dxs.get(), dws.get(), y.get(), n, stride, nullptr));
  T* q = y.get();
  LLAMA2_CUDA_REQUIRE(
      (k::launch_rope_kv<T, C>(q, stride, q + heads * d, stride, q + (heads + kv_heads) * d, stride,
                               heads, tok, freqs, cache_b, nullptr)));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  // q's columns of each row (the rest of q_a is not written).
  const auto qa = q_a.download(), qb = y.download();
  std::vector<T> qa_q, qb_q;
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < heads * d; ++c) {
      qa_q.push_back(qa[size_t(t) * stride + c]);
      qb_q.push_back(qb[size_t(t) * stride + c]);
    }
  }
  expect_same_bytes("rope_kv_scaled " + tag + ": q", qa_q, qb_q);
  expect_same_bytes("rope_kv_scaled " + tag + ": K cache", ka.download(), kb.download());
  expect_same_bytes("rope_kv_scaled " + tag + ": V cache", va.download(), vb.download());
}

}  // namespace

TEST_CASE("fp8 fused quantization: RoPE + KV write from an fp8 QKV product's sums") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (const int d : {64, 128}) {
    check_rope_kv_scaled<__half, __half>(32, 32, d, 19);
    check_rope_kv_scaled<__nv_bfloat16, __nv_bfloat16>(8, 2, d, 64);
    check_rope_kv_scaled<__half, E4m3>(8, 1, d, 37);
    check_rope_kv_scaled<__nv_bfloat16, E4m3>(16, 4, d, 5);
  }
}

TEST_CASE("fp8 fused quantization: the residual add applies an fp8 product's scales") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (const int hidden : {4096, 4100}) {
    for (const int rows : {1, 3, 64}) {
      check_add_rmsnorm_scaled<__half>(rows, hidden);
      check_add_rmsnorm_scaled<__nv_bfloat16>(rows, hidden);
    }
  }
}

TEST_CASE("fp8 fused quantization: the norms' e4m3 rows are launch_quantize_rows of their output") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // 4096: 16-byte accesses; 4100: the element-wise kernels (4100 % 8 != 0).
  for (const int hidden : {4096, 4100}) {
    for (const int rows : {1, 3, 64}) {
      check_norms<__half>(rows, hidden);
      check_norms<__nv_bfloat16>(rows, hidden);
    }
  }
}

TEST_CASE("fp8 fused quantization: scale + SwiGLU + quantize equals the three launches") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // 272 and 11008: the vector kernel with 4 chunks a thread; 20000: 8 chunks; 270: one value per
  // access (F % 4 != 0).
  for (const int M : {1, 5, 64}) {
    for (const int F : {270, 272, 11008, 20000}) {
      check_scale_swiglu_quantize<__half>(M, F);
      check_scale_swiglu_quantize<__nv_bfloat16>(M, F);
    }
  }
}
