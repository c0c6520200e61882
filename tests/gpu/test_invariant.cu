// The batch-invariant kernels of --deterministic (docs/deterministic.md), fp16 and bf16:
//   - the GEMM (kernels/gemm_invariant.cuh): row i of an M-row product equals, bit for bit, the
//     one-row product of row i, for M = 1..80 and 128..300 (all three tile shapes) at Llama-2-7B's
//     projection shapes (one rank) and at odd ones (N odd, K % 16 == 8: a partial mma step);
//     and it is the product: against a double reference within fp32 accumulation + one rounding
//     (|got - want| <= rel_tol<T>(1) |want| + 2^-16 sum_k |x w|, as the skinny GEMM's test);
//   - attention (kernels/attention_invariant.cuh): a 100-token prompt prefilled whole, in chunks
//     of 7, decoded one token at a time, and as 100 one-token rows of one step beside other
//     sequences and a graph's padding sequence (context 0: zeros) gives the same bits at every
//     position; against a double reference within the decode kernel's tolerance (fp32 scores,
//     softmax and P.V, one rounding: rtol 1.5u, atol 0.05 rtol). The cache is NaN outside what a
//     sequence owns, so a key read past a row's context turns it into NaN.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention_invariant.cuh"
#include "kernels/gemm_invariant.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

template <typename F>
void for_each_16bit_dtype(F&& f) {
  f(__half{});
  f(__nv_bfloat16{});
}

// p[i] = a bf16-exact value in [-1, 1) from a hash of (seed, i): fills 7B-sized weights on the
// device in a blink, the same numbers in fp16 and bf16.
template <typename T>
__global__ void fill_exact(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = (static_cast<uint32_t>(i) * 2654435761u) ^ (seed * 40503u) ^
                 (static_cast<uint32_t>(i >> 32) * 97u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = static_cast<float>(static_cast<int>(h >> 24) - 128) / 128.f;  // 8 bits
    p[i] = k::from_float<T>(v);
  }
}

template <typename T>
void fill_device(T* p, int64_t n, uint32_t seed) {
  fill_exact<T><<<1024, 256>>>(p, n, seed);
  LLAMA2_CUDA_REQUIRE(cudaGetLastError());
}

template <typename T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

// The row counts checked: 1..80 (the 16- and 64-row tiles), and 128, 256, 257 and 300 (the
// 64-row tile at its last M, the 128-row tile).
std::vector<int> row_counts() {
  std::vector<int> m(80);
  std::iota(m.begin(), m.end(), 1);
  m.insert(m.end(), {128, 256, 257, 300});
  return m;
}

// x [max_m, K] times W [N, K]: every M-row product's rows (M in row_counts()) against the one-row
// products of x's rows, bit for bit.
template <typename T>
void check_gemm_rows(int N, int K) {
  const std::vector<int> ms = row_counts();
  const int max_m = ms.back();
  const std::string what =
      label<T>("gemm_invariant", "N=" + std::to_string(N) + " K=" + std::to_string(K));
  DeviceBuffer<T> x(size_t(max_m) * K), w(size_t(N) * K), y(size_t(max_m) * N);
  fill_device(x.get(), int64_t(max_m) * K, 11);
  fill_device(w.get(), int64_t(N) * K, 12);
  std::vector<T> alone(size_t(max_m) * N);
  for (int i = 0; i < max_m; ++i) {
    y.poison();
    LLAMA2_CUDA_REQUIRE(
        k::launch_gemm_invariant<T>({x.get() + size_t(i) * K, w.get(), y.get(), 1, N, K}, 0));
    LLAMA2_CUDA_REQUIRE(cudaMemcpy(alone.data() + size_t(i) * N, y.get(), size_t(N) * sizeof(T),
                                   cudaMemcpyDeviceToHost));
  }
  // The one-row products are products (a kernel that wrote nothing, or the same wrong values at
  // every M, would pass the comparison below): a few elements against a double dot product.
  for (const int i : {0, max_m - 1}) {
    for (const int n : {0, N / 2, N - 1}) {
      std::vector<T> xr(K), wr(K);
      LLAMA2_CUDA_REQUIRE(cudaMemcpy(xr.data(), x.get() + size_t(i) * K, size_t(K) * sizeof(T),
                                     cudaMemcpyDeviceToHost));
      LLAMA2_CUDA_REQUIRE(cudaMemcpy(wr.data(), w.get() + size_t(n) * K, size_t(K) * sizeof(T),
                                     cudaMemcpyDeviceToHost));
      double want = 0, bound = 0;
      for (int c = 0; c < K; ++c) {
        const double p = double(k::to_float(xr[c])) * k::to_float(wr[c]);
        want += p;
        bound += std::fabs(p);
      }
      const double got = k::to_float(alone[size_t(i) * N + n]);
      CHECK_MESSAGE(std::fabs(got - want) <= rel_tol<T>(1) * std::fabs(want) + 0x1p-16 * bound,
                    what << ": row " << i << " column " << n << ": " << got << " vs " << want);
    }
  }
  int differing = 0;
  std::string first;
  for (const int M : ms) {
    y.poison();
    LLAMA2_CUDA_REQUIRE(k::launch_gemm_invariant<T>({x.get(), w.get(), y.get(), M, N, K}, 0));
    const std::vector<T> got = y.download();
    for (int i = 0; i < M; ++i) {
      if (same_bits(got.data() + size_t(i) * N, alone.data() + size_t(i) * N, N)) continue;
      if (differing++ == 0) first = "M=" + std::to_string(M) + " row " + std::to_string(i);
    }
  }
  CHECK_MESSAGE(differing == 0, what << ": " << differing
                                     << " rows differ from their one-row product; first " << first);
}

TEST_CASE("gemm_invariant: every row of an M-row product equals its one-row product") {
  LLAMA2_GPU_TEST_OR_SKIP();
  LLAMA2_CUDA_REQUIRE(k::prepare_gemm_invariant());
  for_each_16bit_dtype([](auto t) {
    using T = decltype(t);
    // Llama-2-7B on one rank: q|k|v, o, gate|up, down; then odd shapes.
    for (const auto& [N, K] : {std::pair{12288, 4096},
                               {4096, 4096},
                               {22016, 4096},
                               {4096, 11008},
                               {999, 264},
                               {40, 8}}) {
      check_gemm_rows<T>(N, K);
    }
  });
}

TEST_CASE("gemm_invariant: the product against a double reference, and the refusals") {
  LLAMA2_GPU_TEST_OR_SKIP();
  LLAMA2_CUDA_REQUIRE(k::prepare_gemm_invariant());
  for_each_16bit_dtype([](auto t) {
    using T = decltype(t);
    for (const auto& [M, N, K] : {std::tuple{1, 200, 264}, {17, 130, 520}, {80, 257, 136}}) {
      const auto xf = exact_random(size_t(M) * K, 5), wf = exact_random(size_t(N) * K, 6);
      DeviceBuffer<T> x(to_dtype<T>(xf)), w(to_dtype<T>(wf)), y(size_t(M) * N);
      y.poison();
      LLAMA2_CUDA_REQUIRE(k::launch_gemm_invariant<T>({x.get(), w.get(), y.get(), M, N, K}, 0));
      std::vector<double> want, bound;
      reference_xwt(xf, wf, M, N, K, &want, &bound);
      const std::vector<float> got = to_f32(y.download());
      size_t bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double lim = rel_tol<T>(1) * std::fabs(want[i]) + 0x1p-16 * bound[i];
        bad += !(std::fabs(got[i] - want[i]) <= lim);
      }
      const std::string what =
          label<T>("gemm_invariant", "M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                         " K=" + std::to_string(K));
      CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements outside the tolerance");
    }
    DeviceBuffer<T> x(64), w(64), y(64);
    CHECK(k::launch_gemm_invariant<T>({x.get(), w.get(), y.get(), 1, 4, 12}, 0) ==
          cudaErrorInvalidValue);  // K not a multiple of 8
    CHECK(k::launch_gemm_invariant<T>({x.get() + 1, w.get(), y.get(), 1, 4, 8}, 0) ==
          cudaErrorInvalidValue);  // x not 16-byte aligned
    CHECK(k::launch_gemm_invariant<T>({x.get(), w.get(), y.get(), 0, 4, 8}, 0) == cudaSuccess);
  });
}

// One sequence of n tokens in a paged cache: shuffled blocks, NaN outside its positions.
struct AttnSetup {
  int heads = 0, kv_heads = 0, d = 0, block_size = 0, n = 0;
  int num_blocks = 0;
  std::vector<int32_t> table;    // [max_blocks]
  std::vector<float> q, kc, vc;  // q [n, heads * d]; caches [blocks, kv_heads, bs, d]
};

AttnSetup make_attn(int heads, int kv_heads, int d, int block_size, int n) {
  AttnSetup s;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.d = d;
  s.block_size = block_size;
  s.n = n;
  const int owned = (n + block_size - 1) / block_size;
  s.num_blocks = owned + 2;
  std::vector<int32_t> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(3));
  s.table.assign(ids.begin(), ids.begin() + owned);
  s.q = exact_random(size_t(n) * heads * d, 21);
  const size_t cache = size_t(s.num_blocks) * kv_heads * block_size * d;
  s.kc.assign(cache, NAN);
  s.vc.assign(cache, NAN);
  const auto kf = exact_random(size_t(n) * kv_heads * d, 22);
  const auto vf = exact_random(size_t(n) * kv_heads * d, 23);
  for (int p = 0; p < n; ++p) {
    for (int g = 0; g < kv_heads; ++g) {
      const size_t row =
          ((size_t(s.table[p / block_size]) * kv_heads + g) * block_size + p % block_size) * d;
      for (int c = 0; c < d; ++c) {
        s.kc[row + c] = kf[(size_t(p) * kv_heads + g) * d + c];
        s.vc[row + c] = vf[(size_t(p) * kv_heads + g) * d + c];
      }
    }
  }
  return s;
}

// out [n, heads, d] in double: softmax over p <= t of q . k / sqrt(d), then the weighted V.
std::vector<float> attn_reference(const AttnSetup& s) {
  std::vector<float> out(size_t(s.n) * s.heads * s.d);
  const int group = s.heads / s.kv_heads;
  auto at = [&](const std::vector<float>& c, int p, int g) {
    return c.data() + ((size_t(s.table[p / s.block_size]) * s.kv_heads + g) * s.block_size +
                       p % s.block_size) *
                          s.d;
  };
  for (int t = 0; t < s.n; ++t) {
    for (int h = 0; h < s.heads; ++h) {
      const float* q = s.q.data() + (size_t(t) * s.heads + h) * s.d;
      std::vector<double> sc(t + 1);
      double m = -INFINITY;
      for (int p = 0; p <= t; ++p) {
        double dot = 0;
        for (int c = 0; c < s.d; ++c) dot += double(q[c]) * at(s.kc, p, h / group)[c];
        sc[p] = dot / std::sqrt(double(s.d));
        m = std::max(m, sc[p]);
      }
      double l = 0;
      for (double& v : sc) l += (v = std::exp(v - m));
      for (int c = 0; c < s.d; ++c) {
        double o = 0;
        for (int p = 0; p <= t; ++p) o += sc[p] * at(s.vc, p, h / group)[c];
        out[(size_t(t) * s.heads + h) * s.d + c] = static_cast<float>(o / l);
      }
    }
  }
  return out;
}

// Device inputs of one launch: sequences given as (pos_begin, new tokens) of the same cached
// sequence (their q rows are the prompt's rows at those positions) or {0, 1, context 0} padding.
template <typename T>
struct AttnRun {
  const AttnSetup& s;
  DeviceBuffer<T> q, kc, vc;
  explicit AttnRun(const AttnSetup& s_)
      : s(s_), q(to_dtype<T>(s_.q)), kc(to_dtype<T>(s_.kc)), vc(to_dtype<T>(s_.vc)) {}

  // Every sequence (pos_begin, n, live): its rows' outputs [n, heads, d] (zeros when !live).
  std::vector<T> run(const std::vector<std::tuple<int, int, bool>>& seqs) {
    const int max_blocks = static_cast<int>(s.table.size());
    std::vector<int32_t> tables, cu{0}, pos_begin, ctx;
    std::vector<T> qrows;
    const std::vector<T> qh = q.download();
    const size_t row = size_t(s.heads) * s.d;
    int max_new = 0;
    for (const auto& [pb, n, live] : seqs) {
      tables.insert(tables.end(), s.table.begin(), s.table.end());
      cu.push_back(cu.back() + n);
      pos_begin.push_back(pb);
      ctx.push_back(live ? pb + n : 0);
      max_new = std::max(max_new, n);
      qrows.insert(qrows.end(), qh.begin() + pb * row, qh.begin() + (pb + n) * row);
    }
    DeviceBuffer<int32_t> dt(tables), dcu(cu), dpb(pos_begin), dctx(ctx);
    DeviceBuffer<T> dq(qrows), out(qrows.size());
    out.poison();
    k::InvariantAttentionArgs<T> a;
    a.q = dq.get();
    a.q_stride = static_cast<int64_t>(row);
    a.cache = k::PagedKvCache<T>{kc.get(), vc.get(), s.num_blocks, s.kv_heads, s.block_size, s.d};
    a.block_tables = dt.get();
    a.max_blocks = max_blocks;
    a.cu_tokens = dcu.get();
    a.pos_begin = dpb.get();
    a.context_lens = dctx.get();
    a.num_seqs = static_cast<int>(seqs.size());
    a.heads = s.heads;
    a.max_new_tokens = max_new;
    a.out = out.get();
    LLAMA2_CUDA_REQUIRE(k::launch_attention_invariant(a, 0));
    return out.download();
  }
};

TEST_CASE("attention_invariant: whole, chunks of 7, one token at a time, batched: same bits") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int n = 100;
  for_each_16bit_dtype([&](auto t) {
    using T = decltype(t);
    for (const auto& [heads, kv_heads, d, bs] :
         {std::tuple{4, 4, 128, 16}, {8, 2, 64, 16}, {4, 1, 128, 1}, {2, 2, 64, 32}}) {
      const AttnSetup s = make_attn(heads, kv_heads, d, bs, n);
      const std::string what =
          label<T>("attention_invariant",
                   "heads=" + std::to_string(heads) + " kv_heads=" + std::to_string(kv_heads) +
                       " d=" + std::to_string(d) + " block_size=" + std::to_string(bs));
      AttnRun<T> r(s);
      const size_t row = size_t(heads) * d;
      const std::vector<T> whole = r.run({{0, n, true}});
      std::vector<T> chunks, tokens;
      for (int pb = 0; pb < n; pb += 7) {
        const std::vector<T> c = r.run({{pb, std::min(7, n - pb), true}});
        chunks.insert(chunks.end(), c.begin(), c.end());
      }
      for (int p = 0; p < n; ++p) {
        const std::vector<T> c = r.run({{p, 1, true}});
        tokens.insert(tokens.end(), c.begin(), c.end());
      }
      // One step: a padding sequence, the 100 positions as one-token rows, a chunk of 30 at 41.
      std::vector<std::tuple<int, int, bool>> step{{0, 1, false}};
      for (int p = 0; p < n; ++p) step.emplace_back(p, 1, true);
      step.emplace_back(41, 30, true);
      const std::vector<T> batched = r.run(step);
      CHECK_MESSAGE(same_bits(whole.data(), chunks.data(), whole.size()), what << ": chunks of 7");
      CHECK_MESSAGE(same_bits(whole.data(), tokens.data(), whole.size()), what << ": one by one");
      const std::vector<T> zeros(row, k::from_float<T>(0.f));
      CHECK_MESSAGE(same_bits(batched.data(), zeros.data(), row), what << ": padding row");
      CHECK_MESSAGE(same_bits(whole.data(), batched.data() + row, whole.size()),
                    what << ": one-token rows of one step");
      CHECK_MESSAGE(same_bits(whole.data() + 41 * row, batched.data() + (1 + n) * row, 30 * row),
                    what << ": the chunk beside them");
      const double rtol = 1.5 * unit_roundoff<T>();
      expect_close(what + " vs the double reference", to_f32(whole), attn_reference(s),
                   Tol{rtol, 0.05 * rtol});
    }
  });
}

}  // namespace
