// Paged decode attention and causal prefill attention against llama2::cpu::paged_attention, with
// shuffled block tables, block sizes 1/16/32, GQA groups 1/4/8, head_dim 64/128, contexts 1..3000.
//
// The cache starts as NaN everywhere and only the positions each sequence owns are written; block
// tables are padded with an unowned (NaN) block. A kernel that reads a slot outside a sequence's
// context therefore produces NaN and fails. q, K and V are exactly representable in every dtype.
// Tolerances (elementwise |got - want| <= atol + rtol |want|; outputs are convex combinations of V
// rows with |v| <= 1):
//   fp32: rtol 1e-5, atol 1e-6 (fp32 scores and accumulation against the reference's fp32 scores
//     and double accumulation).
//   decode fp16/bf16: scores, softmax and P.V stay fp32; one rounding of the output: rtol 1.5u,
//     atol 0.05 * rtol (u = 2^-11 fp16, 2^-8 bf16).
//   prefill fp16/bf16 (both kernels): P is rounded to T for the tensor-core P.V product, an error
//     of up to u of each weight, i.e. up to u * max|v| absolute, plus the output rounding: rtol
//     1.5u, atol 1.5u. (The mma kernel normalises by the unrounded fp32 sum, the WMMA kernel by
//     the sum of the rounded weights; either way the error is a weighted mean of |v| times u.)
// fp8 e4m3 caches (with fp16/bf16 queries): the reference attends over the same K/V rounded to
// e4m3 on the host, so the kernel's only extra work is the conversion, which is exact: the
// fp16/bf16 tolerances apply unchanged.
#include <algorithm>
#include <memory>
#include <random>
#include <set>

#include "gpu_test_util.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/decode_plan.cuh"
#include "rank/cpu_ops.h"

namespace cpu = llama2::cpu;
namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

struct Geometry {
  int heads, kv_heads, head_dim, block_size;
};

std::string describe(const char* kernel, const Geometry& g,
                     const std::vector<std::pair<int, int>>& seqs) {
  std::ostringstream s;
  s << kernel << " [heads=" << g.heads << " kv_heads=" << g.kv_heads << " head_dim=" << g.head_dim
    << " block_size=" << g.block_size << " seqs(pos_begin,new)=";
  for (size_t i = 0; i < seqs.size() && i < 8; ++i)
    s << "(" << seqs[i].first << "," << seqs[i].second << ")";
  if (seqs.size() > 8) s << "... (" << seqs.size() << " seqs)";
  s << "]";
  return s.str();
}

// A paged cache holding positions [0, pos_begin + n_new) of every sequence, the plan of the new
// tokens, and the padded block tables.
struct Setup {
  llama2::StepPlan plan;  // the new tokens: what the kernels compute
  int num_blocks = 0;
  std::vector<float> kc, vc;    // [num_blocks, kv_heads, block_size, head_dim], NaN where unwritten
  std::vector<int32_t> tables;  // [num_seqs, max_blocks]
  int max_blocks = 0;
};

Setup make_setup(const Geometry& g, const std::vector<std::pair<int, int>>& seqs, uint32_t seed) {
  Setup s;
  s.plan = make_plan(seqs, g.block_size, seed, &s.num_blocks);
  llama2::StepPlan fill = s.plan;  // same tables, every position from 0
  fill.tokens.clear();
  for (auto& st : fill.seqs) {
    st.n_tokens += st.pos_begin;
    st.pos_begin = 0;
    fill.tokens.resize(fill.tokens.size() + st.n_tokens, 0);
  }
  const size_t n_fill = fill.tokens.size();
  const auto k_new = exact_random(n_fill * g.kv_heads * g.head_dim, seed + 1);
  const auto v_new = exact_random(n_fill * g.kv_heads * g.head_dim, seed + 2);
  const size_t cache = static_cast<size_t>(s.num_blocks) * g.kv_heads * g.block_size * g.head_dim;
  s.kc.assign(cache, NAN);
  s.vc.assign(cache, NAN);
  cpu::KvLayerView view{s.kc.data(),  s.vc.data(), g.kv_heads,
                        g.block_size, g.head_dim,  s.num_blocks};
  cpu::kv_write(view, fill, k_new.data(), v_new.data());

  std::set<int32_t> owned(s.plan.block_ids.begin(), s.plan.block_ids.end());
  int32_t unowned = 0;
  while (owned.count(unowned)) ++unowned;
  for (const auto& st : s.plan.seqs)
    s.max_blocks = std::max(s.max_blocks, static_cast<int>(st.table_len));
  s.tables.assign(s.plan.seqs.size() * s.max_blocks, unowned);
  for (size_t i = 0; i < s.plan.seqs.size(); ++i) {
    const auto& st = s.plan.seqs[i];
    std::copy_n(s.plan.block_ids.begin() + st.table_begin, st.table_len,
                s.tables.begin() + i * s.max_blocks);
  }
  return s;
}

// q: [n, q_stride] with heads * head_dim used -> the reference's dense [n, heads, head_dim].
std::vector<float> reference(const Setup& s, const Geometry& g, const std::vector<float>& q,
                             int q_stride) {
  const int n = s.plan.total_tokens(), width = g.heads * g.head_dim;
  std::vector<float> q_dense(static_cast<size_t>(n) * width);
  for (int t = 0; t < n; ++t) {
    std::copy_n(q.begin() + static_cast<size_t>(t) * q_stride, width,
                q_dense.begin() + static_cast<size_t>(t) * width);
  }
  std::vector<int> kv_head_of(g.heads);
  for (int h = 0; h < g.heads; ++h) kv_head_of[h] = h / (g.heads / g.kv_heads);
  std::vector<float> kc = s.kc, vc = s.vc;
  cpu::KvLayerView view{kc.data(), vc.data(), g.kv_heads, g.block_size, g.head_dim, s.num_blocks};
  std::vector<float> out(q_dense.size());
  cpu::paged_attention(view, s.plan, q_dense.data(), g.heads, kv_head_of, out.data());
  return out;
}

// The same cache with every K/V value rounded to fp8 e4m3 (what an fp8 cache holds; NaN stays NaN).
Setup rounded_to_fp8(Setup s) {
  s.kc = round_vec<__nv_fp8_e4m3>(s.kc);
  s.vc = round_vec<__nv_fp8_e4m3>(s.vc);
  return s;
}

// Runs f(T{}, C{}) for every instantiated (activation, cache) pair: fp32, fp16, bf16 with their
// own cache, and fp16, bf16 with an fp8 e4m3 cache.
template <typename F>
void for_each_cache_type(F&& f) {
  for_each_dtype([&](auto t) { f(t, t); });
  f(__half{}, __nv_fp8_e4m3{});
  f(__nv_bfloat16{}, __nv_fp8_e4m3{});
}

template <typename T>
Tol attention_tol(bool prefill) {
  if (sizeof(T) == 4) return Tol{1e-5, 1e-6};
  const double r = rel_tol<T>(1);
  return prefill ? Tol{r, r} : Tol{r, 0.05 * r};
}

struct DecodeCase {
  Geometry g;
  std::vector<int> ctx;
  int q_stride_extra;       // > 0: q is a view into a wider (fused QKV) row
  int workspace_bound = 0;  // > 0: workspace sized for this max_context, launched with the case's
};

std::vector<int> random_contexts(int n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace

TEST_CASE("attention_decode: paged, grouped, split-K against the CPU reference") {
  LLAMA2_GPU_TEST_OR_SKIP();
  std::vector<DecodeCase> cases = {
      {{32, 32, 128, 16}, {1, 3000, 77, 512, 513}, 0},
      {{32, 8, 128, 32}, random_contexts(19, 1, 1100, 7), 2 * 8 * 128},
      {{16, 2, 64, 1}, {1, 3000, 1000}, 0},
      {{8, 8, 64, 16}, {1}, 0},
      {{16, 2, 128, 16}, {3000, 2, 1025}, 0},
      {{32, 8, 64, 16}, random_contexts(19, 1, 400, 8), 0},  // one partition: no merge kernel
      // Group 1, many sequences (the shape the warp kernel is for); short, odd and long contexts,
      // some past one 512-position partition.
      {{32, 32, 128, 16}, random_contexts(80, 1, 700, 9), 0},
      {{8, 8, 64, 16}, random_contexts(300, 1, 90, 10), 0},
      // A workspace sized for a longer bound (a graph's max_seq_len) must serve a shorter one,
      // which can split into more partitions (block kernel: 9 x 64 at 513 vs 8 x 256 at 2048).
      {{32, 32, 128, 16}, {513, 100, 7}, 0, 2048},
  };
  cases[1].ctx[5] = 3000;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const DecodeCase& c = cases[ci];
    const Geometry& g = c.g;
    std::vector<std::pair<int, int>> seqs;
    for (int len : c.ctx) seqs.push_back({len - 1, 1});
    const Setup s = make_setup(g, seqs, 100 + ci);
    const int S = static_cast<int>(seqs.size());
    const int q_stride = g.heads * g.head_dim + c.q_stride_extra;
    const auto q = exact_random(static_cast<size_t>(S) * q_stride, 200 + ci, -2.f, 2.f);
    const auto want = reference(s, g, q, q_stride);
    const Setup s8 = rounded_to_fp8(s);
    const auto want8 = reference(s8, g, q, q_stride);
    const int max_context = *std::max_element(c.ctx.begin(), c.ctx.end());
    const std::string what_base = describe("attention_decode", g, seqs);

    DeviceBuffer<int32_t> d_tables(s.tables),
        d_ctx(std::vector<int32_t>(c.ctx.begin(), c.ctx.end()));
    // Every case under both kernels and the automatic choice (kWarp on grouped heads is the block
    // kernel), and the automatic one with partitions of at least 256 positions (fewer of them).
    struct Choice {
      k::DecodeKernel kernel;
      const char* name;
      int min_partition;
    };
    for (const Choice& choice :
         {Choice{k::DecodeKernel::kAuto, "auto", 0}, Choice{k::DecodeKernel::kBlock, "block", 0},
          Choice{k::DecodeKernel::kWarp, "warp", 0},
          Choice{k::DecodeKernel::kAuto, "auto/min256", 256}}) {
      const k::DecodeKernel kernel = choice.kernel;
      const std::string kernel_name = choice.name;
      const size_t ws_bytes = k::attention_decode_workspace_bytes(
          S, g.heads, g.kv_heads, g.head_dim, std::max(max_context, c.workspace_bound), kernel);
      DeviceBuffer<float> d_ws((ws_bytes + sizeof(float) - 1) / sizeof(float));
      for_each_cache_type([&](auto tag, auto cache_tag) {
        using T = decltype(tag);
        using C = decltype(cache_tag);
        constexpr bool fp8 = sizeof(C) == 1;
        const std::string what = what_base + " " + dtype_name<T>() + " cache " + dtype_name<C>() +
                                 " " + kernel_name + (ws_bytes ? " split" : " single");
        INFO(what);
        DeviceBuffer<T> d_q(to_dtype<T>(q));
        DeviceBuffer<C> d_kc(to_dtype<C>(s.kc)), d_vc(to_dtype<C>(s.vc));
        DeviceBuffer<T> d_out(static_cast<size_t>(S) * g.heads * g.head_dim);
        d_out.poison();
        d_ws.poison();
        k::DecodeAttentionArgs<T, C> a;
        a.q = d_q.get();
        a.q_stride = q_stride;
        a.cache = {d_kc.get(), d_vc.get(), s.num_blocks, g.kv_heads, g.block_size, g.head_dim};
        a.block_tables = d_tables.get();
        a.max_blocks = s.max_blocks;
        a.context_lens = d_ctx.get();
        a.num_seqs = S;
        a.heads = g.heads;
        a.max_context = max_context;
        a.out = d_out.get();
        a.min_partition = choice.min_partition;
        a.workspace = d_ws.get();
        a.workspace_bytes = ws_bytes;
        a.kernel = kernel;
        LLAMA2_CUDA_REQUIRE(k::launch_attention_decode(a, 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        expect_close(what, to_f32(d_out.download()), fp8 ? want8 : want, attention_tol<T>(false));
      });
    }
  }
}

// Host-only (runs without a GPU, at the 132-multiprocessor default): the engine sizes one
// workspace for max_seq_len and launches with shorter bounds (graph context buckets, a mixed
// step's longest decode row), which can split into more partitions (1025 positions into 17 x 64
// where 2048 take 16 x 128), so the workspace for a bound must cover every shorter one.
TEST_CASE("attention_decode: the workspace for a bound covers every shorter bound") {
  struct Heads {
    int heads, kv_heads;
  };
  int64_t checked = 0, short_by = 0;
  for (const k::DecodeKernel kernel :
       {k::DecodeKernel::kAuto, k::DecodeKernel::kBlock, k::DecodeKernel::kWarp}) {
    for (const Heads h : {Heads{32, 32}, Heads{40, 40}, Heads{8, 8}, Heads{32, 8}, Heads{64, 8}}) {
      for (const int S : {1, 2, 3, 5, 9, 17, 33, 66, 100, 198, 256, 512}) {
        for (const int bound : {513, 2048, 4096}) {
          const size_t ws =
              k::attention_decode_workspace_bytes(S, h.heads, h.kv_heads, 128, bound, kernel);
          for (int ctx = 1; ctx <= bound; ++ctx, ++checked) {
            short_by +=
                k::attention_decode_workspace_bytes(S, h.heads, h.kv_heads, 128, ctx, kernel) > ws;
          }
        }
      }
    }
  }
  INFO(checked << " (kernel, heads, batch, bound, context) combinations");
  CHECK(short_by == 0);
}

// Host-side planning only (the multiprocessor count falls back to an H200's 132 without a
// device), so this case also runs on machines without a GPU.
TEST_CASE("attention_decode: the automatic kernel choice by batch and cache type") {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    sms = 132;
  }
  if (sms == 132) {  // batch 1 at 7B (32 KV heads), a 256-position graph bound: 4 x 64 by the
                     // rule (4 blocks per multiprocessor); min_partition caps the split
    const k::DecodePlan rule = k::plan_decode(1, 1, 32, 256, k::DecodeKernel::kBlock, false);
    CHECK((rule.partition == 64 && rule.num_parts == 4));
    const k::DecodePlan floor = k::plan_decode(1, 1, 32, 256, k::DecodeKernel::kBlock, false, 256);
    CHECK((floor.partition == 256 && floor.num_parts == 1));
    CHECK(k::plan_decode(1, 1, 32, 256, k::DecodeKernel::kBlock, false, 128).num_parts == 2);
    CHECK(k::plan_decode(1, 1, 32, 4096, k::DecodeKernel::kBlock, false, 512).num_parts == 8);
  }
  for (const int kv_heads : {8, 32, 40}) {
    for (int S = 1; S <= 1024; ++S) {
      const int64_t items = int64_t{S} * kv_heads;
      CAPTURE(kv_heads);
      CAPTURE(S);
      // Group 1: the warp kernel from 3 items per SM with a 16-bit cache, 48 with e4m3.
      CHECK(k::plan_decode(S, 1, kv_heads, 256, k::DecodeKernel::kAuto, false).warp ==
            (items >= 3 * int64_t{sms}));
      CHECK(k::plan_decode(S, 1, kv_heads, 256, k::DecodeKernel::kAuto, true).warp ==
            (items >= 48 * int64_t{sms}));
      // Grouped heads always take the block kernel; the forced choices hold for group 1.
      CHECK(!k::plan_decode(S, 4, kv_heads, 256, k::DecodeKernel::kAuto, false).warp);
      CHECK(k::plan_decode(S, 1, kv_heads, 256, k::DecodeKernel::kWarp, true).warp);
      CHECK(!k::plan_decode(S, 1, kv_heads, 256, k::DecodeKernel::kBlock, false).warp);
      // The workspace bound holds for either cache type.
      for (const bool fp8 : {false, true}) {
        for (const int bound : {1, 200, 256, 2048}) {
          CHECK(k::plan_decode(S, 1, kv_heads, bound, k::DecodeKernel::kAuto, fp8).num_parts <=
                k::decode_most_partitions(S, 1, kv_heads, bound, k::DecodeKernel::kAuto));
        }
      }
    }
  }
  (void)cudaGetLastError();
}

TEST_CASE("attention_decode: shape errors are refused") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<__half> buf(4096);
  DeviceBuffer<int32_t> ints(std::vector<int32_t>(8, 0));
  k::DecodeAttentionArgs<__half> a;
  a.q = buf.get();
  a.cache = {buf.get(), buf.get(), 1, 1, 16, 96};
  a.q_stride = 96;
  a.block_tables = ints.get();
  a.max_blocks = 1;
  a.context_lens = ints.get();
  a.num_seqs = 1;
  a.heads = 1;
  a.max_context = 1;
  a.out = buf.get();
  CHECK(k::launch_attention_decode(a, 0) == cudaErrorInvalidValue);  // head_dim 96
  a.cache.head_dim = 64;
  a.q_stride = 64;
  a.heads = 16;  // group 16 > 8
  a.q_stride = 16 * 64;
  CHECK(k::launch_attention_decode(a, 0) == cudaErrorInvalidValue);
  a.heads = 1;
  a.q_stride = 64;
  a.max_context = 17;  // needs 2 blocks, table has 1
  CHECK(k::launch_attention_decode(a, 0) == cudaErrorInvalidValue);
}

namespace {
struct PrefillCase {
  Geometry g;
  std::vector<std::pair<int, int>> seqs;  // (pos_begin, new tokens)
  int q_stride_extra;
};

// One prefill case's inputs, its CPU reference (own cache and e4m3-rounded cache) and the device
// copies of its plan.
struct PrefillInputs {
  PrefillInputs(const PrefillCase& c, uint32_t seed)
      : s(make_setup(c.g, c.seqs, seed)),
        n(s.plan.total_tokens()),
        S(static_cast<int>(c.seqs.size())),
        q_stride(c.g.heads * c.g.head_dim + c.q_stride_extra),
        q(exact_random(static_cast<size_t>(n) * q_stride, seed + 100, -2.f, 2.f)),
        want(reference(s, c.g, q, q_stride)),
        want8(reference(rounded_to_fp8(s), c.g, q, q_stride)),
        what(describe("attention_prefill", c.g, c.seqs)) {
    std::vector<int32_t> cu(S + 1, 0), pos_begin(S);
    for (int i = 0; i < S; ++i) {
      cu[i + 1] = cu[i] + c.seqs[i].second;
      pos_begin[i] = c.seqs[i].first;
      max_new = std::max(max_new, c.seqs[i].second);
      max_kv = std::max(max_kv, c.seqs[i].first + c.seqs[i].second);
    }
    d_tables = std::make_unique<DeviceBuffer<int32_t>>(s.tables);
    d_cu = std::make_unique<DeviceBuffer<int32_t>>(cu);
    d_pos = std::make_unique<DeviceBuffer<int32_t>>(pos_begin);
  }
  Setup s;
  int n, S, q_stride;
  std::vector<float> q, want, want8;
  std::string what;
  int max_new = 0, max_kv = 0;
  std::unique_ptr<DeviceBuffer<int32_t>> d_tables, d_cu, d_pos;
};

// Runs the prefill launcher on `in` in T over a cache of C, with `configure` setting the kernel
// choice fields of the arguments, and compares with the CPU reference.
template <typename T, typename C, typename F>
void check_prefill(const PrefillInputs& in, const Geometry& g, const std::string& what,
                   F&& configure) {
  INFO(what);
  DeviceBuffer<T> d_q(to_dtype<T>(in.q));
  DeviceBuffer<C> d_kc(to_dtype<C>(in.s.kc)), d_vc(to_dtype<C>(in.s.vc));
  DeviceBuffer<T> d_out(static_cast<size_t>(in.n) * g.heads * g.head_dim);
  d_out.poison();
  k::PrefillAttentionArgs<T, C> a;
  a.q = d_q.get();
  a.q_stride = in.q_stride;
  a.cache = {d_kc.get(), d_vc.get(), in.s.num_blocks, g.kv_heads, g.block_size, g.head_dim};
  a.block_tables = in.d_tables->get();
  a.max_blocks = in.s.max_blocks;
  a.cu_tokens = in.d_cu->get();
  a.pos_begin = in.d_pos->get();
  a.num_seqs = in.S;
  a.heads = g.heads;
  a.max_new_tokens = in.max_new;
  a.out = d_out.get();
  configure(a);
  LLAMA2_CUDA_REQUIRE(k::launch_attention_prefill(a, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  expect_close(what, to_f32(d_out.download()), sizeof(C) == 1 ? in.want8 : in.want,
               attention_tol<T>(true));
}
}  // namespace

TEST_CASE("attention_prefill: causal chunks over the paged cache against the CPU reference") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const std::vector<PrefillCase> cases = {
      {{8, 8, 128, 16}, {{0, 1000}, {2000, 19}, {0, 1}}, 0},
      {{8, 2, 128, 32}, {{37, 100}, {0, 64}, {5, 65}}, 2 * 2 * 128},
      {{16, 2, 64, 1}, {{0, 200}, {2900, 100}}, 0},
      {{4, 4, 64, 16}, {{0, 1}}, 0},
      {{32, 8, 128, 16}, {{0, 19}, {130, 1}}, 0},
      // The mma kernel's 128-query x 64-key tiles: chunks one short of / one past a query tile,
      // two tiles plus one, prefixes that end inside a 16-token block and inside a key tile (so the
      // diagonal crosses key tiles at every offset), group 4, head_dim 64 with a fused-QKV stride.
      {{8, 2, 128, 16}, {{0, 127}, {0, 129}, {45, 257}, {1000, 130}, {15, 64}}, 0},
      {{8, 2, 64, 16}, {{77, 383}, {0, 128}, {3, 1}}, 8 * 64},
      {{4, 4, 128, 32}, {{511, 300}, {64, 63}}, 0},
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const PrefillInputs in(cases[ci], 300 + ci);
    // Both fp16/bf16 kernels, the mma one with each query tile (fp32 has one path: the FMA loops
    // of the WMMA kernel); no key split (its own case below).
    struct Choice {
      k::PrefillKernel kernel;
      int tile;
      const char* name;
    };
    for (const Choice& choice : {Choice{k::PrefillKernel::kWmma, 0, "wmma"},
                                 Choice{k::PrefillKernel::kMma, 128, "mma/128"},
                                 Choice{k::PrefillKernel::kMma, 64, "mma/64"}}) {
      for_each_cache_type([&](auto tag, auto cache_tag) {
        using T = decltype(tag);
        using C = decltype(cache_tag);
        if (sizeof(T) == 4 && choice.kernel != k::PrefillKernel::kWmma) return;
        check_prefill<T, C>(
            in, cases[ci].g,
            in.what + " " + dtype_name<T>() + " cache " + dtype_name<C>() + " " + choice.name,
            [&](k::PrefillAttentionArgs<T, C>& a) {
              a.kernel = choice.kernel;
              a.mma_query_tile = choice.tile;
            });
      });
    }
  }
}

// The mma kernel's key split: a few new tokens over a long cache (a prefix-cache hit), several
// sequences of different prefixes, splits forced from 2 to more than the key tiles (empty splits),
// both query tiles, group 1 and 4, fp16/bf16 over their own and an fp8 cache; the automatic choice
// with the engine's workspace; the workspace poisoned (NaN) so an unwritten partial fails.
TEST_CASE("attention_prefill: the mma kernel's key split against the CPU reference") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const std::vector<PrefillCase> cases = {
      {{32, 32, 128, 16}, {{1024, 32}}, 0},
      {{8, 2, 128, 16}, {{1000, 19}, {0, 64}, {77, 1}, {2000, 65}}, 2 * 2 * 128},
      {{4, 4, 64, 32}, {{511, 130}, {64, 3}}, 0},
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Geometry& g = cases[ci].g;
    const PrefillInputs in(cases[ci], 500 + ci);
    for (const int tile : {64, 128}) {
      const int64_t blocks = int64_t{g.heads} * ((in.max_new + tile - 1) / tile) * in.S;
      for (const int splits : {0, 2, 3, 8, 16}) {  // 0: automatic, with the engine's workspace
        if (splits == 0 && tile == 128) continue;  // the automatic choice picks its own tile
        const size_t ws_bytes =
            splits == 0 ? k::attention_prefill_workspace_bytes(g.head_dim)
                        : k::attention_prefill_split_bytes(blocks * splits, tile, g.head_dim);
        DeviceBuffer<float> d_ws(ws_bytes / sizeof(float));
        for_each_cache_type([&](auto tag, auto cache_tag) {
          using T = decltype(tag);
          using C = decltype(cache_tag);
          if constexpr (sizeof(T) == 2) {
            d_ws.poison();
            check_prefill<T, C>(in, g,
                                in.what + " " + dtype_name<T>() + " cache " + dtype_name<C>() +
                                    " mma/" + std::to_string(tile) + " splits " +
                                    std::to_string(splits),
                                [&](k::PrefillAttentionArgs<T, C>& a) {
                                  a.kernel = k::PrefillKernel::kMma;
                                  a.mma_query_tile = splits == 0 ? 0 : tile;
                                  a.max_kv_len = in.max_kv;
                                  a.workspace = d_ws.get();
                                  a.workspace_bytes = ws_bytes;
                                  a.mma_kv_splits = splits;
                                });
          }
        });
      }
    }
  }
}

// Host-only: the automatic split count and the split's refusals.
TEST_CASE("attention_prefill: the key split's plan and refusals") {
  // 32 heads x one 64-row tile (a 1,024-token prefix hit of 32 tokens at 7B) on 132 SMs: 17 key
  // tiles, up to 8 splits by the 2-per-multiprocessor rule, evened to 6 of 3 tiles.
  CHECK(k::plan_prefill_kv_splits(32, 1056, 132) == 6);
  CHECK(k::plan_prefill_kv_splits(32, 4096, 132) == 8);  // 64 tiles: the 2-per-SM bound
  CHECK(k::plan_prefill_kv_splits(4, 8192, 132) == 16);  // the kPrefillMaxKvSplits bound
  CHECK(k::plan_prefill_kv_splits(66, 4096, 132) == 4);
  CHECK(k::plan_prefill_kv_splits(67, 4096, 132) == 1);  // more than half the GPU: no split
  CHECK(k::plan_prefill_kv_splits(32, 192, 132) == 1);   // 3 key tiles: one split of >= 2
  CHECK(k::plan_prefill_kv_splits(32, 256, 132) == 2);
  CHECK(k::plan_prefill_kv_splits(32, 0, 132) == 1);  // no host bound on the keys: no split
  CHECK(k::plan_prefill_kv_splits(0, 1056, 132) == 1);
  for (int64_t blocks = 1; blocks <= 66; ++blocks) {  // the automatic workspace covers every plan
    const int splits = k::plan_prefill_kv_splits(blocks, 100000, 132);
    CAPTURE(blocks);
    CHECK(blocks * splits <= 2 * 132);
  }
  LLAMA2_GPU_TEST_OR_SKIP();
  k::PrefillAttentionArgs<__half, __half> a;
  DeviceBuffer<__half> d_q(64 * 128), d_kc(16 * 128), d_vc(16 * 128), d_out(64 * 128);
  DeviceBuffer<int32_t> d_tables(std::vector<int32_t>{0}), d_cu(std::vector<int32_t>{0, 8}),
      d_pos(std::vector<int32_t>{0});
  a.q = d_q.get();
  a.q_stride = 128;
  a.cache = {d_kc.get(), d_vc.get(), 1, 1, 16, 128};
  a.block_tables = d_tables.get();
  a.max_blocks = 1;
  a.cu_tokens = d_cu.get();
  a.pos_begin = d_pos.get();
  a.num_seqs = 1;
  a.heads = 1;
  a.max_new_tokens = 8;
  a.out = d_out.get();
  a.kernel = k::PrefillKernel::kMma;
  a.mma_kv_splits = k::kPrefillMaxKvSplits + 1;
  CHECK(k::launch_attention_prefill(a, 0) == cudaErrorInvalidValue);
  a.mma_kv_splits = 2;  // forced, with no workspace
  CHECK(k::launch_attention_prefill(a, 0) == cudaErrorInvalidValue);
  a.mma_kv_splits = 1;
  CHECK(k::launch_attention_prefill(a, 0) == cudaSuccess);
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
}

// Host-only: the LLAMA2_PREFILL_KERNEL values.
TEST_CASE("attention_prefill: kernel names parse, anything else is refused") {
  k::PrefillKernel kernel = k::PrefillKernel::kWmma;
  CHECK(k::parse_prefill_kernel("auto", &kernel));
  CHECK(kernel == k::PrefillKernel::kAuto);
  CHECK(k::parse_prefill_kernel("mma", &kernel));
  CHECK(kernel == k::PrefillKernel::kMma);
  CHECK(k::parse_prefill_kernel("wmma", &kernel));
  CHECK(kernel == k::PrefillKernel::kWmma);
  CHECK_FALSE(k::parse_prefill_kernel("fa2", &kernel));
  CHECK_FALSE(k::parse_prefill_kernel("", &kernel));
  CHECK(kernel == k::PrefillKernel::kWmma);  // unchanged by a refused value
}
