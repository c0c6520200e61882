// Embedding, RMSNorm (plain and fused with the residual add), SwiGLU and RoPE + KV-cache write
// against the fp32 CPU reference (src/rank/cpu_ops.h), on odd and 7B shapes, in fp32, fp16, bf16.
//
// Inputs are exactly representable in all three dtypes (gpu_test_util.h), so the reference is the
// same numbers and the only differences are the kernels' own roundings:
//   embedding: a copy, exact.
//   add_rmsnorm residual: round_T(res + x) computed identically on host and device, exact.
//   rmsnorm / add_rmsnorm output: HF rounds the normalised value to T, then the product with the
//     weight: 2 roundings -> rtol 2.5u (fp16 1.2e-3, bf16 9.8e-3); fp32 1e-5.
//   swiglu: silu rounded to T, then the product: 2 roundings -> rtol 2.5u; fp32 1e-5.
//   rope: fp32 math, one rounding -> rtol 1.5u; atol rtol * max|x| because a*cos - b*sin cancels;
//     fp32 1e-5 (cos/sin are bit-identical to the reference: same fp32 angle, evaluated in double).
//   Values the kernels must leave alone (unwritten cache slots, k/v inputs) are compared exactly.
#include <algorithm>
#include <numeric>
#include <random>

#include "common/step_plan.h"
#include "gpu_test_util.h"
#include "kernels/embedding.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cpu_ops.h"

namespace cpu = llama2::cpu;
namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

std::string shape(std::initializer_list<std::pair<const char*, long long>> dims) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (const auto& [name, value] : dims) {
    s << (first ? "" : " ") << name << "=" << value;
    first = false;
  }
  s << "]";
  return s.str();
}

}  // namespace

TEST_CASE("embedding: vocab-shard rows, zero rows outside the shard") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int vocab_begin = 300, vocab_local = 500, vocab_total = 1200;
  for (int hidden : {111, 4160}) {
    for (int n_tokens : {1, 19, 1000}) {
      const auto table = exact_random(static_cast<size_t>(vocab_local) * hidden, 11 + hidden);
      std::mt19937 rng(n_tokens);
      std::uniform_int_distribution<int> tok(0, vocab_total - 1);
      std::vector<int32_t> tokens(n_tokens);
      for (auto& t : tokens) t = tok(rng);
      // The shard's edges and the ids just outside it.
      const int32_t edges[] = {vocab_begin, vocab_begin + vocab_local - 1, vocab_begin - 1,
                               vocab_begin + vocab_local};
      for (int i = 0; i < n_tokens && i < 4; ++i) tokens[i] = edges[(i + n_tokens) % 4];
      std::vector<float> want(static_cast<size_t>(n_tokens) * hidden);
      cpu::embedding(tokens.data(), n_tokens, table.data(), vocab_begin, vocab_local, hidden,
                     want.data());
      DeviceBuffer<int32_t> d_tokens(tokens);
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        const std::string what =
            label<T>("embedding", shape({{"hidden", hidden}, {"tokens", n_tokens}}));
        INFO(what);
        DeviceBuffer<T> d_table(to_dtype<T>(table));
        DeviceBuffer<T> d_out(want.size());
        d_out.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_embedding<T>(d_tokens.get(), n_tokens, d_table.get(),
                                                   vocab_begin, vocab_local, hidden, d_out.get(),
                                                   0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what, to_f32(d_out.download()), want, Tol{0, 0});
      });
    }
  }
}

TEST_CASE("rmsnorm: HF numerics, vector and scalar paths, in place") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const double eps = 1e-5;
  for (int hidden : {111, 4096, 4160}) {
    for (int n : {1, 19, 1000}) {
      const auto x = exact_random(static_cast<size_t>(n) * hidden, 21 + n, -2.f, 2.f);
      const auto w = exact_random(hidden, 22 + hidden, 0.25f, 1.75f);
      std::vector<float> want(x.size());
      cpu::rmsnorm(x.data(), w.data(), n, hidden, eps, want.data());
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        const std::string what = label<T>("rmsnorm", shape({{"hidden", hidden}, {"rows", n}}));
        INFO(what);
        const Tol tol{rel_tol<T>(2), rel_tol<T>(2) * 1e-3};
        DeviceBuffer<T> d_x(to_dtype<T>(x)), d_w(to_dtype<T>(w)), d_out(x.size());
        d_out.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_rmsnorm<T>(d_x.get(), d_w.get(), n, hidden,
                                                 static_cast<float>(eps), d_out.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what, to_f32(d_out.download()), want, tol);
        // In place: out aliases x.
        LLAMA2_CUDA_REQUIRE(k::launch_rmsnorm<T>(d_x.get(), d_w.get(), n, hidden,
                                                 static_cast<float>(eps), d_x.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what + " in-place", to_f32(d_x.download()), want, tol);
      });
    }
  }
}

TEST_CASE("add_rmsnorm: residual += x in the activation dtype, then rmsnorm") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const double eps = 1e-6;
  for (int hidden : {111, 4160}) {
    for (int n : {1, 19, 1000}) {
      const auto res = exact_random(static_cast<size_t>(n) * hidden, 31 + n, -2.f, 2.f);
      const auto x = exact_random(static_cast<size_t>(n) * hidden, 32 + n, -2.f, 2.f);
      const auto w = exact_random(hidden, 33 + hidden, 0.25f, 1.75f);
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        const std::string what = label<T>("add_rmsnorm", shape({{"hidden", hidden}, {"rows", n}}));
        INFO(what);
        // The documented contract: the residual is stored in T, the norm reads the stored value.
        std::vector<float> want_res(res.size());
        for (size_t i = 0; i < res.size(); ++i) want_res[i] = res[i] + x[i];
        want_res = round_vec<T>(want_res);
        std::vector<float> want(res.size());
        cpu::rmsnorm(want_res.data(), w.data(), n, hidden, eps, want.data());
        const Tol tol{rel_tol<T>(2), rel_tol<T>(2) * 1e-3};

        DeviceBuffer<T> d_res(to_dtype<T>(res)), d_x(to_dtype<T>(x)), d_w(to_dtype<T>(w));
        DeviceBuffer<T> d_out(res.size());
        d_out.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(d_res.get(), d_x.get(), d_w.get(), n, hidden,
                                                     static_cast<float>(eps), d_out.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what + " residual", to_f32(d_res.download()), want_res, Tol{0, 0});
        expect_close(what + " out", to_f32(d_out.download()), want, tol);

        // out aliasing x (the block output buffer reused for the normed activations).
        d_res.upload(to_dtype<T>(res));
        LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(d_res.get(), d_x.get(), d_w.get(), n, hidden,
                                                     static_cast<float>(eps), d_x.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what + " out=x residual", to_f32(d_res.download()), want_res, Tol{0, 0});
        expect_close(what + " out=x out", to_f32(d_x.download()), want, tol);

        CHECK(k::launch_add_rmsnorm<T>(d_res.get(), d_x.get(), d_w.get(), n, hidden, 1e-6f,
                                       d_res.get(), 0) == cudaErrorInvalidValue);
      });
    }
  }
}

TEST_CASE("swiglu: silu(gate) * up from the fused gate|up output") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (int ffn : {111, 4160, 11008}) {
    for (int n : {1, 19, 1000}) {
      const auto gu = exact_random(static_cast<size_t>(n) * 2 * ffn, 41 + ffn + n, -6.f, 6.f);
      std::vector<float> gate(static_cast<size_t>(n) * ffn), up(gate.size()), want(gate.size());
      for (int t = 0; t < n; ++t) {
        std::copy_n(gu.begin() + static_cast<size_t>(t) * 2 * ffn, ffn,
                    gate.begin() + static_cast<size_t>(t) * ffn);
        std::copy_n(gu.begin() + static_cast<size_t>(t) * 2 * ffn + ffn, ffn,
                    up.begin() + static_cast<size_t>(t) * ffn);
      }
      cpu::swiglu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), want.data());
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        const std::string what = label<T>("swiglu", shape({{"ffn", ffn}, {"tokens", n}}));
        INFO(what);
        DeviceBuffer<T> d_gu(to_dtype<T>(gu)), d_out(want.size());
        d_out.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_swiglu<T>(d_gu.get(), n, ffn, d_out.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what, to_f32(d_out.download()), want,
                     Tol{rel_tol<T>(2), rel_tol<T>(2) * 1e-4});
      });
    }
  }
}

namespace {

struct RopeCase {
  int heads, kv_heads, head_dim, block_size;
  double theta;
  std::vector<std::pair<int, int>> seqs;  // (pos_begin, n_tokens)
};

std::vector<float> columns(const std::vector<float>& x, int rows, int stride, int begin,
                           int width) {
  std::vector<float> y(static_cast<size_t>(rows) * width);
  for (int r = 0; r < rows; ++r) {
    std::copy_n(x.begin() + static_cast<size_t>(r) * stride + begin, width,
                y.begin() + static_cast<size_t>(r) * width);
  }
  return y;
}

}  // namespace

TEST_CASE("rope_kv: rotate-half RoPE on q in place and k, K/V written to the paged cache") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const std::vector<RopeCase> cases = {
      {32, 8, 128, 16, 10000.0, {{2999, 1}}},                // T = 1, long position
      {8, 8, 64, 1, 10000.0, {{0, 7}, {100, 12}}},           // T = 19, block size 1
      {16, 2, 64, 32, 1e6, {{0, 600}, {2400, 400}}},         // T = 1000, positions to 2799
      {4, 1, 128, 16, 10000.0, {{5, 11}, {0, 1}, {40, 7}}},  // T = 19, MQA-like group 4
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const RopeCase& c = cases[ci];
    const int d = c.head_dim, H = c.heads, G = c.kv_heads;
    int num_blocks = 0;
    const llama2::StepPlan plan = make_plan(c.seqs, c.block_size, 51 + ci, &num_blocks);
    const int n = plan.total_tokens();
    const std::vector<int32_t> pos = cpu::plan_positions(plan);
    std::vector<int32_t> slot(n);
    {
      int t = 0;
      for (const auto& s : plan.seqs) {
        for (int i = 0; i < s.n_tokens; ++i, ++t) {
          const int p = s.pos_begin + i;
          slot[t] =
              plan.block_ids[s.table_begin + p / c.block_size] * c.block_size + p % c.block_size;
        }
      }
    }
    // Fused QKV rows: [q (H*d) | k (G*d) | v (G*d)].
    const int stride = (H + 2 * G) * d;
    const auto qkv = exact_random(static_cast<size_t>(n) * stride, 61 + ci, -2.f, 2.f);
    std::vector<float> q_ref = columns(qkv, n, stride, 0, H * d);
    std::vector<float> k_ref = columns(qkv, n, stride, H * d, G * d);
    const std::vector<float> v_in = columns(qkv, n, stride, (H + G) * d, G * d);
    cpu::rope(q_ref.data(), pos.data(), n, H, d, c.theta);
    cpu::rope(k_ref.data(), pos.data(), n, G, d, c.theta);
    const size_t cache_elems = static_cast<size_t>(num_blocks) * G * c.block_size * d;
    std::vector<float> kc_ref(cache_elems, NAN), vc_ref(cache_elems, NAN);
    cpu::KvLayerView view{kc_ref.data(), vc_ref.data(), G, c.block_size, d, num_blocks};
    cpu::kv_write(view, plan, k_ref.data(), v_in.data());
    const double max_q = max_abs(qkv);

    const k::RopeFreqs freqs = k::make_rope_freqs(d, c.theta);
    DeviceBuffer<int32_t> d_pos(pos), d_slot(slot);
    for_each_dtype([&](auto tag) {
      using T = decltype(tag);
      const std::string what =
          label<T>("rope_kv", shape({{"heads", H},
                                     {"kv_heads", G},
                                     {"head_dim", d},
                                     {"block_size", c.block_size},
                                     {"tokens", n},
                                     {"max_pos", *std::max_element(pos.begin(), pos.end())}}));
      INFO(what);
      const double rtol = rel_tol<T>(1);
      DeviceBuffer<T> d_qkv(to_dtype<T>(qkv)), d_kc(cache_elems), d_vc(cache_elems);
      d_kc.poison();
      d_vc.poison();
      k::PagedKvCache<T> cache{d_kc.get(), d_vc.get(), num_blocks, G, c.block_size, d};
      k::RopeKvTokens toks{d_pos.get(), d_slot.get(), n};
      T* q = d_qkv.get();
      LLAMA2_CUDA_REQUIRE(k::launch_rope_kv<T>(q, stride, q + H * d, stride, q + (H + G) * d,
                                               stride, H, toks, freqs, cache, 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      const auto qkv_out = to_f32(d_qkv.download());
      expect_close(what + " q", columns(qkv_out, n, stride, 0, H * d), q_ref,
                   Tol{rtol, rtol * max_q});
      expect_close(what + " k,v inputs untouched", columns(qkv_out, n, stride, H * d, 2 * G * d),
                   columns(qkv, n, stride, H * d, 2 * G * d), Tol{0, 0});
      expect_close(what + " k cache", to_f32(d_kc.download()), kc_ref, Tol{rtol, rtol * max_q});
      expect_close(what + " v cache", to_f32(d_vc.download()), vc_ref, Tol{0, 0});

      // Padding tokens (slot < 0) rotate q and write nothing.
      std::vector<int32_t> no_slot(n, -1);
      DeviceBuffer<int32_t> d_no_slot(no_slot);
      d_kc.poison();
      d_qkv.upload(to_dtype<T>(qkv));
      k::RopeKvTokens pad{d_pos.get(), d_no_slot.get(), n};
      LLAMA2_CUDA_REQUIRE(k::launch_rope_kv<T>(q, stride, q + H * d, stride, q + (H + G) * d,
                                               stride, H, pad, freqs, cache, 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      expect_close(what + " padding: q", columns(to_f32(d_qkv.download()), n, stride, 0, H * d),
                   q_ref, Tol{rtol, rtol * max_q});
      expect_close(what + " padding: k cache untouched", to_f32(d_kc.download()),
                   std::vector<float>(cache_elems, NAN), Tol{0, 0});

      // The host (cos, sin) table, covering only the lower half of the positions so that both
      // the table and the device sincos path run in one launch: the same results.
      const int max_pos = *std::max_element(pos.begin(), pos.end());
      const int table_positions = max_pos / 2 + 1;
      std::vector<float2> table(static_cast<size_t>(table_positions) * d / 2);
      k::make_rope_table(freqs, table_positions, table.data());
      DeviceBuffer<float2> d_table(table);
      k::RopeFreqs with_table = freqs;
      with_table.table = d_table.get();
      with_table.table_positions = table_positions;
      d_kc.poison();
      d_qkv.upload(to_dtype<T>(qkv));
      LLAMA2_CUDA_REQUIRE(k::launch_rope_kv<T>(q, stride, q + H * d, stride, q + (H + G) * d,
                                               stride, H, toks, with_table, cache, 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      expect_close(what + " table: q", columns(to_f32(d_qkv.download()), n, stride, 0, H * d),
                   q_ref, Tol{rtol, rtol * max_q});
      expect_close(what + " table: k cache", to_f32(d_kc.download()), kc_ref,
                   Tol{rtol, rtol * max_q});
    });

    // An fp8 e4m3 cache (fp16/bf16 activations): K is the rotation rounded to T, then to e4m3, so
    // it is the reference's K so rounded up to one e4m3 step where the two fp32 rotations straddle
    // a rounding boundary (2^-3 relative; 2^-9 absolute among subnormals); V is the exact input
    // rounded to e4m3, bit for bit; q is as with a T cache.
    auto fp8_cache = [&](auto tag) {
      using T = decltype(tag);
      using C = __nv_fp8_e4m3;
      const std::string what = label<T>("rope_kv", "fp8 cache, case " + std::to_string(ci));
      INFO(what);
      const double rtol = rel_tol<T>(1);
      DeviceBuffer<T> d_qkv(to_dtype<T>(qkv));
      DeviceBuffer<C> d_kc(cache_elems), d_vc(cache_elems);
      d_kc.poison();
      d_vc.poison();
      const k::PagedKvCache<C> cache{d_kc.get(), d_vc.get(), num_blocks, G, c.block_size, d};
      T* q = d_qkv.get();
      LLAMA2_CUDA_REQUIRE(k::launch_rope_kv(q, stride, q + H * d, stride, q + (H + G) * d, stride,
                                            H, k::RopeKvTokens{d_pos.get(), d_slot.get(), n}, freqs,
                                            cache, 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      expect_close(what + " q", columns(to_f32(d_qkv.download()), n, stride, 0, H * d), q_ref,
                   Tol{rtol, rtol * max_q});
      expect_close(what + " k cache", to_f32(d_kc.download()), round_vec<C>(round_vec<T>(kc_ref)),
                   Tol{0x1p-3, 0x1p-9});
      expect_close(what + " v cache", to_f32(d_vc.download()), round_vec<C>(vc_ref), Tol{0, 0});
    };
    fp8_cache(__half{});
    fp8_cache(__nv_bfloat16{});
  }
}

TEST_CASE("rope_kv: unsupported head_dim is refused") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<float> buf(96 * 4);
  DeviceBuffer<int32_t> ints(std::vector<int32_t>{0});
  k::PagedKvCache<float> cache{buf.get(), buf.get(), 1, 1, 1, 96};
  CHECK(k::launch_rope_kv<float>(buf.get(), 96, buf.get(), 96, buf.get(), 96, 1,
                                 k::RopeKvTokens{ints.get(), ints.get(), 1},
                                 k::make_rope_freqs(96, 10000.0), cache,
                                 0) == cudaErrorInvalidValue);
}
