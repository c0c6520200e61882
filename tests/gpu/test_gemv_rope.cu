// The one-row qkv GEMV's RoPE epilogue (kernels/gemv.cuh, GemvFusion::rope; batch-1 decode in
// src/rank/cuda/cuda_model.cu) against what it replaces, bit for bit: the GEMV into [1, q | k | v],
// then launch_rope_kv (q rotated in place, k rotated and v into the paged cache). Every weight
// type (T, int8, e4m3) and GEMV arithmetic, T and e4m3 caches, grouped heads, head_dim 64 and
// 128, with and without the fused input norm, a padding token (slot < 0: q only). The caches
// start with random contents and are compared whole: the epilogue writes the token's rows and
// nothing else.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

constexpr float kEps = 1e-5f;

struct RopeShape {
  int heads, kv_heads, head_dim, K;
};

template <typename T, typename W>
cudaError_t gemv(const T* x, const W* w, const float* scale, k::GemvMath math, T* y, int N, int K,
                 const k::GemvFusion<T>& f) {
  if constexpr (std::is_same_v<W, T>) {
    return k::launch_gemv<T>(x, w, y, 1, N, K, 0, f);
  } else {
    return k::launch_gemv_q<T, T, W>(x, nullptr, w, scale, y, 1, N, K, 0, math, f);
  }
}

template <typename C>
std::vector<uint8_t> bytes_of(const DeviceBuffer<C>& b) {
  const std::vector<C> host = b.download();
  std::vector<uint8_t> out(host.size() * sizeof(C));
  std::memcpy(out.data(), host.data(), out.size());
  return out;
}

// One weight type, math and cache type: the fused launch against GEMV + launch_rope_kv.
template <typename T, typename W, typename C>
void check_rope(const RopeShape& s, const W* w, const float* scale, k::GemvMath math,
                const std::string& name) {
  const int d = s.head_dim, N = (s.heads + 2 * s.kv_heads) * d, K = s.K;
  constexpr int kBlockSize = 16, kBlocks = 5, kPositions = 300;
  const std::string what = name + " heads " + std::to_string(s.heads) + "/" +
                           std::to_string(s.kv_heads) + " d " + std::to_string(d) + " K " +
                           std::to_string(K) + " cache " + dtype_name<C>();
  INFO(what);
  k::RopeFreqs freqs = k::make_rope_freqs(d, 10000.0);
  std::vector<float2> table(static_cast<size_t>(kPositions) * d / 2);
  k::make_rope_table(freqs, kPositions, table.data());
  DeviceBuffer<float2> d_table(table);
  freqs.table = d_table.get();
  freqs.table_positions = kPositions;

  const size_t cache_elems = size_t{kBlocks} * s.kv_heads * kBlockSize * d;
  const auto cache_init = exact_random(cache_elems, 7 + d, -1.f, 1.f);
  DeviceBuffer<T> x(to_dtype<T>(exact_random(K, 3 + K, -2.f, 2.f)));
  DeviceBuffer<T> nw(to_dtype<T>(exact_random(K, 5 + K, 0.25f, 1.75f))), h(K);
  DeviceBuffer<T> y_ref(N), y_fused(N);

  for (const bool norm : {false, true}) {
    for (const int32_t slot_value : {int32_t{3 * kBlockSize + 9}, int32_t{-1}}) {
      const int32_t pos_value = 257;
      INFO("norm " << norm << " slot " << slot_value);
      DeviceBuffer<int32_t> pos(std::vector<int32_t>{pos_value});
      DeviceBuffer<int32_t> slot(std::vector<int32_t>{slot_value});
      DeviceBuffer<C> kc_ref(to_dtype<C>(cache_init)), vc_ref(to_dtype<C>(cache_init));
      DeviceBuffer<C> kc(to_dtype<C>(cache_init)), vc(to_dtype<C>(cache_init));
      const k::PagedKvCache<C> ref_cache{kc_ref.get(), vc_ref.get(), kBlocks,
                                         s.kv_heads,   kBlockSize,   d};
      const k::PagedKvCache<C> fused_cache{kc.get(), vc.get(), kBlocks, s.kv_heads, kBlockSize, d};
      const k::RopeKvTokens tok{pos.get(), slot.get(), 1};

      // The separate launches: [norm ->] GEMV -> RoPE + KV write.
      const T* in = x.get();
      if (norm) {
        LLAMA2_CUDA_REQUIRE(k::launch_rmsnorm<T>(x.get(), nw.get(), 1, K, kEps, h.get(), 0));
        in = h.get();
      }
      LLAMA2_CUDA_REQUIRE((gemv<T, W>(in, w, scale, math, y_ref.get(), N, K, {})));
      T* q = y_ref.get();
      LLAMA2_CUDA_REQUIRE(
          (k::launch_rope_kv<T, C>(q, N, q + s.heads * d, N, q + (s.heads + s.kv_heads) * d, N,
                                   s.heads, tok, freqs, ref_cache, 0)));
      // The fused one.
      y_fused.poison();
      k::GemvFusion<T> f;
      if (norm) {
        f.norm_weight = nw.get();
        f.norm_eps = kEps;
      }
      f.rope = k::gemv_rope_kv<T>(fused_cache, tok, s.heads, freqs);
      LLAMA2_CUDA_REQUIRE((gemv<T, W>(x.get(), w, scale, math, y_fused.get(), N, K, f)));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());

      const auto got = to_f32(y_fused.download()), want = to_f32(y_ref.download());
      expect_close(what + " q", std::vector<float>(got.begin(), got.begin() + s.heads * d),
                   std::vector<float>(want.begin(), want.begin() + s.heads * d), Tol{0, 0});
      CHECK_MESSAGE(bytes_of(kc) == bytes_of(kc_ref), what << ": k cache differs");
      CHECK_MESSAGE(bytes_of(vc) == bytes_of(vc_ref), what << ": v cache differs");
      if (slot_value >= 0) {  // the token's rows did change: the comparison is not vacuous
        CHECK_MESSAGE(bytes_of(kc) != bytes_of(DeviceBuffer<C>(to_dtype<C>(cache_init))),
                      what << ": k cache unchanged");
      }
    }
  }
}

template <typename T, typename C>
void check_cache_type() {
  // 7B-like heads (small K), grouped (70B-like 8:1 at 64 / 8), head_dim 64, MQA.
  for (const RopeShape s : {RopeShape{4, 4, 128, 256}, RopeShape{8, 1, 128, 512},
                            RopeShape{6, 2, 64, 320}, RopeShape{3, 1, 64, 4096}}) {
    const int N = (s.heads + 2 * s.kv_heads) * s.head_dim;
    const auto wf = exact_random(size_t(N) * s.K, 19 + N + s.K, -1.f, 1.f);
    for_each_gemv_weight<T>(
        wf, N, [&](auto w, const float* scale, k::GemvMath m, const std::string& name) {
          check_rope<T, std::remove_const_t<std::remove_pointer_t<decltype(w)>>, C>(s, w, scale, m,
                                                                                    name);
        });
  }
}

}  // namespace

TEST_CASE("gemv fusions: the qkv GEMV's RoPE epilogue equals GEMV + rope_kv, bit for bit") {
  LLAMA2_GPU_TEST_OR_SKIP();
  check_cache_type<float, float>();
  check_cache_type<__half, __half>();
  check_cache_type<__nv_bfloat16, __nv_bfloat16>();
  check_cache_type<__half, __nv_fp8_e4m3>();
  check_cache_type<__nv_bfloat16, __nv_fp8_e4m3>();
}

TEST_CASE("gemv fusions: the RoPE epilogue refuses what it cannot take") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int d = 64, heads = 2, kv = 1, K = 64, N = (heads + 2 * kv) * d;
  DeviceBuffer<__half> x(2 * K), w(size_t{N} * K), y(2 * N), kc(16 * d), vc(16 * d);
  DeviceBuffer<int32_t> pos(1), slot(1);
  DeviceBuffer<float2> table(d / 2);
  k::GemvFusion<__half> f;
  f.rope = k::GemvRopeKv{pos.get(), slot.get(), kc.get(), vc.get(),    false, heads,
                         kv,        d,          16,       table.get(), 1};
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 2, N, K, 0, f) ==
        cudaErrorInvalidValue);  // two rows
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, N - d, K, 0, f) ==
        cudaErrorInvalidValue);  // N is not (heads + 2 kv_heads) x head_dim
  f.add_to_y = true;
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, N, K, 0, f) ==
        cudaErrorInvalidValue);  // with a residual add
  f.add_to_y = false;
  f.rope.table = nullptr;
  CHECK(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, N, K, 0, f) ==
        cudaErrorInvalidValue);  // no (cos, sin) table
  (void)cudaGetLastError();
}
