// Kernel benchmarks at Llama-2-7B shapes (hidden 4096, 32 heads, head_dim 128, ffn 11008, vocab
// 32000, fp16), each family checked against the fp32 CPU reference before it is timed.
//
// Build: cd build && cmake .. && ninja llama2_bench_kernels      (CUDA builds only)
// Run:   ./llama2_bench_kernels [decode|prefill|qgemv|w8a16|fp8|overlap|skinny]   on a GPU node
//        (one H200; ~1 minute; `decode`: only decode attention, block and warp kernels side by
//        side; `prefill`: only prefill attention, WMMA and mma kernels side by side; compare with
//        sdpa_prefill.py; `qgemv`: only the streaming GEMV of fp16 / fp8 / int8 weights,
//        bench_qgemv.cu; `w8a16`: only the int8/e4m3-weight GEMM against cuBLAS, bench_w8a16.cu;
//        `fp8`: only the FP8 product, cuBLASLt's heuristic algorithm vs the tuned one,
//        bench_fp8.cu; `skinny`: only the fp16 GEMM for M <= 64 against cuBLAS, bench_skinny.cu)
//
// Timing: CUDA events around each launch, 5 warm-up launches, median of 30. Bytes are the minimum
// traffic (each input read once, each output written once); FLOPs for attention count the
// multiply-adds of QK^T and PV (prefill: the causal half). Rooflines measured on the H200 nodes
// (docs: /work/shared/HARDWARE.md): HBM 4315 GB/s device-to-device copy (read + write), fp16 dense
// 872 TFLOP/s. Shapes whose data fits in the 50 MB L2 (batch-1 decode, small T) can exceed the HBM
// figure; they measure launch latency and L2 more than HBM.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/step_plan.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/convert.cuh"
#include "kernels/dtype.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/sampling.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cpu_ops.h"
#include "rank/cuda/device_buffer.h"

int bench_qgemv_streaming();  // bench_qgemv.cu

namespace k = llama2::kernels;
namespace cpu = llama2::cpu;
using T = __half;

namespace {

constexpr double kHbmGBs = 4315.0;
constexpr double kTensorTFs = 872.0;
int g_failures = 0;

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(2);
  }
}
#define CK(call) check_cuda((call), #call)

template <typename E>
struct Dev {
  E* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    CK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(E)));
  }
  explicit Dev(const std::vector<E>& h) : Dev(h.size()) { put(h); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void put(const std::vector<E>& h) {
    CK(cudaMemcpy(p, h.data(), h.size() * sizeof(E), cudaMemcpyHostToDevice));
  }
  std::vector<E> get() const {
    std::vector<E> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(E), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Values exactly representable in fp16/bf16 (see tests/gpu/gpu_test_util.h).
std::vector<float> rnd(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = __bfloat162float(__float2bfloat16_rn(d(rng)));
  return v;
}
std::vector<T> half(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __float2half_rn(x[i]);
  return y;
}
// x rounded to an fp8 e4m3 cache's values, as stored and as fp32 (for the reference).
std::vector<__nv_fp8_e4m3> fp8(const std::vector<float>& x) {
  std::vector<__nv_fp8_e4m3> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __nv_fp8_e4m3(x[i]);
  return y;
}
std::vector<float> fp8_values(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(__nv_fp8_e4m3(x[i]));
  return y;
}
std::vector<float> f32(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __half2float(x[i]);
  return y;
}

// |got - want| <= atol + rtol |want| everywhere (NaN only where both are NaN).
void verify(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
            double rtol, double atol) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w) continue;
    if (std::isnan(g) || std::isnan(w)) {
      bad += !(std::isnan(g) && std::isnan(w));
      continue;
    }
    const double e = std::fabs(g - w);
    worst = std::max(worst, e);
    bad += e > atol + rtol * std::fabs(w);
  }
  std::printf("  check %-44s %s (max abs err %.3g, %zu/%zu outside tolerance)\n", what.c_str(),
              bad ? "FAIL" : "ok", worst, bad, want.size());
  g_failures += bad != 0;
}

double median_us(const std::function<void()>& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms(30);
  for (auto& m : ms) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&m, a, b));
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

void report(const std::string& name, const std::string& shape, double us, double bytes,
            double flops = 0) {
  const double gbs = bytes / us * 1e-3;
  std::printf("  %-14s %-34s %9.2f us %8.1f GB/s (%5.1f%% HBM)", name.c_str(), shape.c_str(), us,
              gbs, 100.0 * gbs / kHbmGBs);
  if (flops > 0) {
    const double tf = flops / us * 1e-6;
    std::printf(" %7.1f TFLOP/s (%4.1f%% fp16 TC)", tf, 100.0 * tf / kTensorTFs);
  }
  std::printf("\n");
}

std::string fmt(const char* f, long a, long b = 0, long c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

constexpr int kHidden = 4096, kHeads = 32, kDim = 128, kFfn = 11008, kVocab = 32000;

void bench_embedding() {
  std::printf("embedding (vocab %d, hidden %d)\n", kVocab, kHidden);
  const auto table = rnd(static_cast<size_t>(kVocab) * kHidden, 1);
  Dev<T> d_table(half(table));
  for (int n : {1, 64, 2048}) {
    std::vector<int32_t> tok(n);
    for (int i = 0; i < n; ++i) tok[i] = (i * 7919) % kVocab;
    Dev<int32_t> d_tok(tok);
    Dev<T> d_out(static_cast<size_t>(n) * kHidden);
    CK(k::launch_embedding<T>(d_tok.p, n, d_table.p, 0, kVocab, kHidden, d_out.p, 0));
    std::vector<float> want(d_out.n);
    cpu::embedding(tok.data(), n, table.data(), 0, kVocab, kHidden, want.data());
    verify(fmt("embedding T=%ld", n), f32(d_out.get()), want, 0, 0);
    const double us = median_us(
        [&] { k::launch_embedding<T>(d_tok.p, n, d_table.p, 0, kVocab, kHidden, d_out.p, 0); });
    report("embedding", fmt("T=%ld", n), us, 2.0 * n * kHidden * sizeof(T));
  }
}

void bench_rmsnorm() {
  std::printf("rmsnorm / add_rmsnorm (hidden %d)\n", kHidden);
  const auto w = rnd(kHidden, 2, 0.5f, 1.5f);
  Dev<T> d_w(half(w));
  for (int n : {1, 64, 2048}) {
    const size_t e = static_cast<size_t>(n) * kHidden;
    const auto x = rnd(e, 3, -2, 2), res = rnd(e, 4, -2, 2);
    Dev<T> d_x(half(x)), d_res(half(res)), d_out(e);
    CK(k::launch_rmsnorm<T>(d_x.p, d_w.p, n, kHidden, 1e-5f, d_out.p, 0));
    std::vector<float> want(e);
    cpu::rmsnorm(x.data(), w.data(), n, kHidden, 1e-5, want.data());
    verify(fmt("rmsnorm T=%ld", n), f32(d_out.get()), want, 1.3e-3, 1e-6);
    double us =
        median_us([&] { k::launch_rmsnorm<T>(d_x.p, d_w.p, n, kHidden, 1e-5f, d_out.p, 0); });
    report("rmsnorm", fmt("T=%ld", n), us, 2.0 * e * sizeof(T));
    // The fused kernel updates the residual in place; timing re-adds x each launch, harmless.
    us = median_us(
        [&] { k::launch_add_rmsnorm<T>(d_res.p, d_x.p, d_w.p, n, kHidden, 1e-5f, d_out.p, 0); });
    report("add_rmsnorm", fmt("T=%ld", n), us, 4.0 * e * sizeof(T));
  }
}

void bench_swiglu() {
  std::printf("swiglu (ffn %d)\n", kFfn);
  for (int n : {1, 64, 2048}) {
    const auto gu = rnd(static_cast<size_t>(n) * 2 * kFfn, 5, -6, 6);
    Dev<T> d_gu(half(gu)), d_out(static_cast<size_t>(n) * kFfn);
    CK(k::launch_swiglu<T>(d_gu.p, n, kFfn, d_out.p, 0));
    std::vector<float> g(d_out.n), u(d_out.n), want(d_out.n);
    for (int t = 0; t < n; ++t) {
      std::copy_n(gu.begin() + static_cast<size_t>(t) * 2 * kFfn, kFfn,
                  g.begin() + static_cast<size_t>(t) * kFfn);
      std::copy_n(gu.begin() + static_cast<size_t>(t) * 2 * kFfn + kFfn, kFfn,
                  u.begin() + static_cast<size_t>(t) * kFfn);
    }
    cpu::swiglu(g.data(), u.data(), static_cast<int64_t>(want.size()), want.data());
    verify(fmt("swiglu T=%ld", n), f32(d_out.get()), want, 1.3e-3, 1e-6);
    const double us = median_us([&] { k::launch_swiglu<T>(d_gu.p, n, kFfn, d_out.p, 0); });
    report("swiglu", fmt("T=%ld", n), us, 3.0 * n * kFfn * sizeof(T));
  }
}

// Decode projections of 7B at batch 1 (the weights stream once: bytes = N x K x 2): the project's
// GEMV against cuBLAS on the same data, after checking the GEMV against a double-precision product.
void bench_gemv() {
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(2);
  }
  struct Shape {
    const char* name;
    int n, k;
  };
  const Shape shapes[] = {{"qkv", 3 * kHidden, kHidden},
                          {"o_proj", kHidden, kHidden},
                          {"gate|up", 2 * kFfn, kHidden},
                          {"down", kHidden, kFfn},
                          {"lm_head", kVocab, kHidden}};
  std::printf("gemv, one row (7B decode projections)\n");
  for (const Shape& sh : shapes) {
    const auto x = rnd(sh.k, 11);
    const auto w = rnd(static_cast<size_t>(sh.n) * sh.k, 12);
    Dev<T> d_x(half(x)), d_w(half(w)), d_y(sh.n);
    CK(k::launch_gemv<T>(d_x.p, d_w.p, d_y.p, 1, sh.n, sh.k, 0));
    std::vector<float> want(sh.n);
    for (int n = 0; n < sh.n; ++n) {
      double acc = 0;
      for (int i = 0; i < sh.k; ++i) acc += double(x[i]) * w[static_cast<size_t>(n) * sh.k + i];
      want[n] = static_cast<float>(acc);
    }
    verify(std::string("gemv ") + sh.name, f32(d_y.get()), want, 1e-3, 2e-6 * sh.k);
    const double bytes = 2.0 * sh.n * sh.k;
    const double ours =
        median_us([&] { k::launch_gemv<T>(d_x.p, d_w.p, d_y.p, 1, sh.n, sh.k, 0); });
    report("gemv", std::string(sh.name) + fmt(" N=%ld K=%ld", sh.n, sh.k), ours, bytes);
    const double blas = median_us(
        [&] { llama2::gemm_xwt(handle, CUDA_R_16F, d_x.p, d_w.p, d_y.p, 1, sh.n, sh.k); });
    report("cublas", std::string(sh.name) + fmt(" N=%ld K=%ld", sh.n, sh.k), blas, bytes);
  }
  cublasDestroy(handle);
}

// One sequence per entry of `lens`, blocks shuffled; returns the plan of `news` new tokens per seq.
struct Paged {
  llama2::StepPlan plan;
  int num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;
};
Paged make_paged(const std::vector<int>& lens, const std::vector<int>& news, int bs) {
  Paged p;
  for (int len : lens) p.num_blocks += (len + bs - 1) / bs;
  std::vector<int32_t> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(9));
  int next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    llama2::SeqStep st;
    st.pos_begin = lens[s] - news[s];
    st.n_tokens = news[s];
    st.table_begin = static_cast<int32_t>(p.plan.block_ids.size());
    st.table_len = (lens[s] + bs - 1) / bs;
    p.max_blocks = std::max(p.max_blocks, static_cast<int>(st.table_len));
    for (int b = 0; b < st.table_len; ++b) p.plan.block_ids.push_back(ids[next++]);
    p.plan.seqs.push_back(st);
    p.plan.tokens.resize(p.plan.tokens.size() + news[s], 0);
  }
  p.tables.assign(lens.size() * p.max_blocks, 0);
  for (size_t s = 0; s < lens.size(); ++s) {
    const auto& st = p.plan.seqs[s];
    std::copy_n(p.plan.block_ids.begin() + st.table_begin, st.table_len,
                p.tables.begin() + s * p.max_blocks);
  }
  return p;
}

void bench_rope_kv() {
  std::printf("rope_kv (heads %d, kv_heads %d, head_dim %d, block 16)\n", kHeads, kHeads, kDim);
  const int bs = 16;
  const k::RopeFreqs freqs = k::make_rope_freqs(kDim, 10000.0);
  for (int n : {1, 64, 2048}) {
    const Paged pg = make_paged({n + 100}, {n}, bs);
    const auto pos = cpu::plan_positions(pg.plan);
    std::vector<int32_t> slot(n);
    for (int t = 0; t < n; ++t) slot[t] = pg.plan.block_ids[pos[t] / bs] * bs + pos[t] % bs;
    const size_t act = static_cast<size_t>(n) * kHidden;
    const auto q = rnd(act, 6, -2, 2), kk = rnd(act, 7, -2, 2), v = rnd(act, 8, -2, 2);
    const size_t cache = static_cast<size_t>(pg.num_blocks) * kHeads * bs * kDim;
    Dev<T> d_q(half(q)), d_k(half(kk)), d_v(half(v)), d_kc(cache), d_vc(cache);
    Dev<int32_t> d_pos(pos), d_slot(slot);
    const k::PagedKvCache<T> c{d_kc.p, d_vc.p, pg.num_blocks, kHeads, bs, kDim};
    const k::RopeKvTokens toks{d_pos.p, d_slot.p, n};
    CK(k::launch_rope_kv<T>(d_q.p, kHidden, d_k.p, kHidden, d_v.p, kHidden, kHeads, toks, freqs, c,
                            0));
    std::vector<float> q_ref = q, k_ref = kk, kc(cache, 0.f), vc(cache, 0.f);
    cpu::rope(q_ref.data(), pos.data(), n, kHeads, kDim, 10000.0);
    cpu::rope(k_ref.data(), pos.data(), n, kHeads, kDim, 10000.0);
    CK(cudaMemset(d_kc.p, 0, cache * sizeof(T)));
    CK(cudaMemset(d_vc.p, 0, cache * sizeof(T)));
    d_q.put(half(q));
    CK(k::launch_rope_kv<T>(d_q.p, kHidden, d_k.p, kHidden, d_v.p, kHidden, kHeads, toks, freqs, c,
                            0));
    cpu::kv_write(cpu::KvLayerView{kc.data(), vc.data(), kHeads, bs, kDim, pg.num_blocks}, pg.plan,
                  k_ref.data(), v.data());
    verify(fmt("rope_kv q T=%ld", n), f32(d_q.get()), q_ref, 8e-4, 2e-3);
    verify(fmt("rope_kv k cache T=%ld", n), f32(d_kc.get()), kc, 8e-4, 2e-3);
    verify(fmt("rope_kv v cache T=%ld", n), f32(d_vc.get()), vc, 0, 0);
    const double us = median_us([&] {
      k::launch_rope_kv<T>(d_q.p, kHidden, d_k.p, kHidden, d_v.p, kHidden, kHeads, toks, freqs, c,
                           0);
    });
    report("rope_kv", fmt("T=%ld", n), us, 6.0 * act * sizeof(T));
  }
}

std::vector<float> reference_attention(const Paged& pg, const std::vector<float>& kc,
                                       const std::vector<float>& vc, int heads, int kv_heads,
                                       int bs, const std::vector<float>& q) {
  std::vector<int> kv_head_of(heads);
  for (int h = 0; h < heads; ++h) kv_head_of[h] = h / (heads / kv_heads);
  std::vector<float> kc2 = kc, vc2 = vc, out(q.size());
  cpu::paged_attention(cpu::KvLayerView{kc2.data(), vc2.data(), kv_heads, bs, kDim, pg.num_blocks},
                       pg.plan, q.data(), heads, kv_head_of, out.data());
  return out;
}

// Timing-only shapes are filled on the device (a 512 x 192-token cache is ~800 M values); with
// `check`, from host values against the CPU reference (up to 4 sequences of mixed lengths).
// `bound` is the launch's max_context (0: ctx), as a decode graph sizes it for a context bucket.
// C: the cache's element type (T, or fp8 e4m3: half the bytes per position).
template <typename C = T>
void bench_decode(int heads, int kv_heads, const std::vector<int>& batches,
                  const std::vector<int>& ctxs, bool check, int bound = 0,
                  const std::vector<k::DecodeKernel>& kernels = {k::DecodeKernel::kAuto}) {
  constexpr bool kFp8 = sizeof(C) == 1;
  std::printf("attention_decode (heads %d, kv_heads %d, head_dim %d, block 16%s%s)\n", heads,
              kv_heads, kDim, bound ? fmt(", max_context %ld", bound).c_str() : "",
              kFp8 ? ", fp8 e4m3 cache" : "");
  const int bs = 16;
  for (int S : batches) {
    for (int ctx : ctxs) {
      std::vector<int> lens(S, ctx);
      if (check) {
        for (int s = 1; s < S && s < 4; ++s) lens[s] = 1 + (ctx * s) / 4;
      }
      // Block tables (and cache) cover the launch bound, as the engine's cover max_seq_len.
      std::vector<int> table_lens = lens;
      for (int& n : table_lens) n = std::max(n, bound);
      const Paged pg = make_paged(table_lens, std::vector<int>(S, 1), bs);
      const size_t cache = static_cast<size_t>(pg.num_blocks) * kv_heads * bs * kDim;
      const size_t nq = static_cast<size_t>(S) * heads * kDim;
      Dev<C> d_kc(cache), d_vc(cache);
      Dev<T> d_q(nq), d_out(nq);
      std::vector<float> kc, vc, q;
      if (check) {
        kc = rnd(cache, 10), vc = rnd(cache, 11), q = rnd(nq, 12, -2, 2);
        d_q.put(half(q));
        if constexpr (kFp8) {
          d_kc.put(fp8(kc)), d_vc.put(fp8(vc));
          kc = fp8_values(kc), vc = fp8_values(vc);  // what the kernel sees
        } else {
          d_kc.put(half(kc)), d_vc.put(half(vc));
        }
      } else {
        if constexpr (kFp8) {  // timing only: every K/V value 1.0 (e4m3 0x38)
          CK(cudaMemset(d_kc.p, 0x38, cache));
          CK(cudaMemset(d_vc.p, 0x38, cache));
        } else {
          CK(k::launch_fill_uniform<T>(d_kc.p, cache, 10, 0.f, 1.f, 0));
          CK(k::launch_fill_uniform<T>(d_vc.p, cache, 11, 0.f, 1.f, 0));
        }
        CK(k::launch_fill_uniform<T>(d_q.p, nq, 12, 0.f, 2.f, 0));
      }
      Dev<int32_t> d_tab(pg.tables), d_len(lens);
      const int max_context = bound > 0 ? bound : ctx;
      for (const k::DecodeKernel kernel : kernels) {
        const size_t ws =
            k::attention_decode_workspace_bytes(S, heads, kv_heads, kDim, max_context, kernel);
        Dev<char> d_ws(ws);
        k::DecodeAttentionArgs<T, C> a;
        a.q = d_q.p;
        a.q_stride = heads * kDim;
        a.cache = {d_kc.p, d_vc.p, pg.num_blocks, kv_heads, bs, kDim};
        a.block_tables = d_tab.p;
        a.max_blocks = pg.max_blocks;
        a.context_lens = d_len.p;
        a.num_seqs = S;
        a.heads = heads;
        a.max_context = max_context;
        a.out = d_out.p;
        a.workspace = d_ws.p;
        a.workspace_bytes = ws;
        a.kernel = kernel;
        const std::string name = std::string(kernel == k::DecodeKernel::kBlock  ? "decode block"
                                             : kernel == k::DecodeKernel::kWarp ? "decode warp"
                                                                                : "decode") +
                                 (kFp8 ? " fp8" : "");
        CK(k::launch_attention_decode(a, 0));
        if (check && S <= 4) {
          verify(name + fmt(" S=%ld ctx=%ld", S, ctx), f32(d_out.get()),
                 reference_attention(pg, kc, vc, heads, kv_heads, bs, q), 8e-4, 4e-5);
        }
        const double us = median_us([&] { k::launch_attention_decode(a, 0); });
        const double kv_bytes = 2.0 * S * ctx * kv_heads * kDim * sizeof(C);
        report(name, fmt("S=%ld ctx=%ld", S, ctx) + (ws ? " split" : ""), us,
               kv_bytes + 2.0 * nq * sizeof(T), 4.0 * S * heads * ctx * kDim);
      }
    }
  }
}

// Causal prefill over the paged cache (16-token blocks, shuffled): one sequence of n_new new tokens
// after ctx - n_new cached ones. C: the cache's element type (fp16, or fp8 e4m3).
// FLOPs = 4 * heads * head_dim * sum over the new tokens of the keys each attends to
//       = 4 * heads * head_dim * (n_new * (ctx - n_new) + n_new * (n_new + 1) / 2)
// (QK^T and PV, 2 FLOPs per multiply-add; masked keys are not counted).
// splits: the mma kernel's key split (PrefillAttentionArgs::mma_kv_splits): 0 automatic with the
// engine's workspace, 1 none, N forced.
template <typename C = T>
void bench_prefill(int heads, int kv_heads, int n_new, int ctx, bool check, k::PrefillKernel kernel,
                   int splits = 0) {
  constexpr bool kFp8 = sizeof(C) == 1;
  const int bs = 16;
  const Paged pg = make_paged({ctx}, {n_new}, bs);
  const size_t cache = static_cast<size_t>(pg.num_blocks) * kv_heads * bs * kDim;
  auto kc = rnd(cache, 13), vc = rnd(cache, 14);
  const auto q = rnd(static_cast<size_t>(n_new) * heads * kDim, 15, -2, 2);
  Dev<C> d_kc(cache), d_vc(cache);
  if constexpr (kFp8) {
    d_kc.put(fp8(kc)), d_vc.put(fp8(vc));
    kc = fp8_values(kc), vc = fp8_values(vc);  // what the kernel sees
  } else {
    d_kc.put(half(kc)), d_vc.put(half(vc));
  }
  Dev<T> d_q(half(q)), d_out(q.size());
  const std::vector<int32_t> cu = {0, n_new}, pb = {ctx - n_new};
  Dev<int32_t> d_tab(pg.tables), d_cu(cu), d_pb(pb);
  k::PrefillAttentionArgs<T, C> a;
  a.q = d_q.p;
  a.q_stride = heads * kDim;
  a.cache = {d_kc.p, d_vc.p, pg.num_blocks, kv_heads, bs, kDim};
  a.block_tables = d_tab.p;
  a.max_blocks = pg.max_blocks;
  a.cu_tokens = d_cu.p;
  a.pos_begin = d_pb.p;
  a.num_seqs = 1;
  a.heads = heads;
  a.max_new_tokens = n_new;
  a.out = d_out.p;
  a.kernel = kernel;
  a.max_kv_len = ctx;
  a.mma_kv_splits = splits;
  const int64_t blocks = int64_t{heads} * ((n_new + 63) / 64);  // 64-row tiles: what splits
  const size_t ws_bytes =
      splits == 0 ? k::attention_prefill_workspace_bytes(kDim)
                  : k::attention_prefill_split_bytes(blocks * std::max(splits, 1), 128, kDim);
  Dev<float> d_ws(ws_bytes / sizeof(float));
  a.workspace = d_ws.p;
  a.workspace_bytes = ws_bytes;
  const std::string name = std::string(kernel == k::PrefillKernel::kWmma  ? "prefill wmma"
                                       : kernel == k::PrefillKernel::kMma ? "prefill mma"
                                                                          : "prefill") +
                           (kFp8 ? " fp8" : "") + (splits == 0 ? "" : fmt(" splits=%ld", splits));
  CK((k::launch_attention_prefill<T, C>(a, 0)));
  if (check) {
    verify(name + fmt(" heads=%ld new=%ld ctx=%ld", heads, n_new, ctx), f32(d_out.get()),
           reference_attention(pg, kc, vc, heads, kv_heads, bs, q), 8e-4, 8e-4);
    return;
  }
  const double us = median_us([&] { k::launch_attention_prefill<T, C>(a, 0); });
  const double pairs = static_cast<double>(n_new) * (ctx - n_new) + 0.5 * n_new * (n_new + 1.0);
  report(name, fmt("new=%ld ctx=%ld heads=%ld", n_new, ctx, heads), us,
         2.0 * ctx * kv_heads * kDim * sizeof(C) + 2.0 * q.size() * sizeof(T),
         4.0 * pairs * heads * kDim);
}

void bench_prefill_all() {
  std::printf(
      "attention_prefill (heads %d, head_dim %d, block 16, paged; FLOPs = 4 heads d "
      "sum_q keys(q))\n",
      kHeads, kDim);
  const k::PrefillKernel kernels[] = {k::PrefillKernel::kWmma, k::PrefillKernel::kMma};
  for (const k::PrefillKernel kernel : kernels) {
    // Correctness on reduced problems (CPU reference cost): odd lengths, a prefix, GQA, fp8.
    bench_prefill(4, 4, 300, 400, true, kernel);
    bench_prefill(4, 1, 200, 200, true, kernel);
    bench_prefill<__nv_fp8_e4m3>(4, 2, 333, 1000, true, kernel);
  }
  // (new tokens, context): no prefix at 2048 and 4096, then a cached prefix (chunked prefill).
  const int shapes[][2] = {{2048, 2048}, {4096, 4096}, {512, 2048}, {2048, 4096}};
  for (const auto& sh : shapes) {
    for (const k::PrefillKernel kernel : kernels) {
      bench_prefill(kHeads, kHeads, sh[0], sh[1], false, kernel);
    }
  }
  for (const auto& sh : shapes)
    bench_prefill<__nv_fp8_e4m3>(kHeads, kHeads, sh[0], sh[1], false, k::PrefillKernel::kMma);
  std::printf("  (70B shapes on 2 ranks: 32 query heads, 4 KV heads)\n");
  for (const k::PrefillKernel kernel : kernels) bench_prefill(32, 4, 2048, 2048, false, kernel);
  // A few new tokens over a long cache (a prefix-cache hit, a chunked prompt's last piece): the
  // key split, automatic (the engine's choice) against none and forced counts.
  std::printf("  (key split: new tokens over a cached prefix; no suffix = automatic)\n");
  const auto mma = k::PrefillKernel::kMma;
  bench_prefill(4, 4, 40, 1500, true, mma);  // correctness of the automatic split
  bench_prefill(4, 4, 40, 1500, true, mma, 5);
  bench_prefill<__nv_fp8_e4m3>(4, 2, 17, 900, true, mma);
  const int hits[][2] = {{32, 1056}, {32, 4128}, {128, 2176}, {8, 1032}};
  for (const auto& sh : hits) {
    for (const int splits : {1, 0, 2, 4, 8, 16}) {
      bench_prefill(kHeads, kHeads, sh[0], sh[1], false, mma, splits);
    }
  }
  bench_prefill<__nv_fp8_e4m3>(kHeads, kHeads, 32, 1056, false, mma, 1);
  bench_prefill<__nv_fp8_e4m3>(kHeads, kHeads, 32, 1056, false, mma, 0);
}

void bench_sampling() {
  std::printf("argmax / top-k (vocab %d, fp32 logits)\n", kVocab);
  for (int rows : {1, 64}) {
    const auto x = rnd(static_cast<size_t>(rows) * kVocab, 16, -10, 10);
    Dev<float> d_x(x), d_val(static_cast<size_t>(rows) * 64);
    Dev<int32_t> d_idx(static_cast<size_t>(rows) * 64);
    CK(k::launch_topk<float>(d_x.p, kVocab, rows, kVocab, 0, 50, d_val.p, d_idx.p, 0));
    const auto got = d_idx.get();
    size_t bad = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<int> order(kVocab);
      std::iota(order.begin(), order.end(), 0);
      const float* row = x.data() + static_cast<size_t>(r) * kVocab;
      std::partial_sort(order.begin(), order.begin() + 50, order.end(),
                        [&](int a, int b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
      for (int j = 0; j < 50; ++j) bad += got[static_cast<size_t>(r) * 50 + j] != order[j];
    }
    std::printf("  check %-44s %s (%zu wrong indices)\n", fmt("topk k=50 rows=%ld", rows).c_str(),
                bad ? "FAIL" : "ok", bad);
    g_failures += bad != 0;
    double us = median_us(
        [&] { k::launch_argmax<float>(d_x.p, kVocab, rows, kVocab, 0, d_val.p, d_idx.p, 0); });
    report("argmax", fmt("rows=%ld", rows), us, 4.0 * rows * kVocab);
    us = median_us(
        [&] { k::launch_topk<float>(d_x.p, kVocab, rows, kVocab, 0, 50, d_val.p, d_idx.p, 0); });
    report("topk k=50", fmt("rows=%ld", rows), us, 4.0 * rows * kVocab);
  }
}

}  // namespace

int bench_w8a16();    // bench_w8a16.cu: the number of failed checks
int bench_fp8();      // bench_fp8.cu
int bench_overlap();  // bench_overlap.cu
int bench_skinny();   // bench_skinny.cu

int main(int argc, char** argv) {
  // `llama2_bench_kernels decode` / `prefill`: that attention section only; `w8a16`: the GEMM.
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc > 2 || (argc == 2 && mode != "decode" && mode != "prefill" && mode != "qgemv" &&
                   mode != "w8a16" && mode != "fp8" && mode != "overlap" && mode != "skinny")) {
    std::fprintf(
        stderr,
        "usage: llama2_bench_kernels [decode|prefill|qgemv|w8a16|fp8|overlap|skinny]  (got '%s')\n",
        argv[1]);
    return 2;
  }
  const bool decode_only = mode == "decode", prefill_only = mode == "prefill";
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; fp16; rooflines: HBM %.0f GB/s, tensor cores %.0f TFLOP/s\n", prop.name,
              prop.multiProcessorCount, kHbmGBs, kTensorTFs);
  if (mode == "qgemv") {
    g_failures += bench_qgemv_streaming();
  } else if (mode == "w8a16") {
    g_failures += bench_w8a16();
  } else if (mode == "fp8") {
    g_failures += bench_fp8();
  } else if (mode == "overlap") {
    g_failures += bench_overlap();
  } else if (mode == "skinny") {
    g_failures += bench_skinny();
  } else if (prefill_only) {
    bench_prefill_all();
  } else {
    if (!decode_only) {
      bench_embedding();
      bench_rmsnorm();
      bench_swiglu();
      bench_rope_kv();
    }
    const std::vector<k::DecodeKernel> both = {k::DecodeKernel::kBlock, k::DecodeKernel::kWarp};
    bench_decode(kHeads, kHeads, {1, 4}, {128, 2048}, true, 0, both);  // correctness, mixed
    bench_decode(kHeads, kHeads, {1, 32, 64}, {128, 2048}, false, 0, both);
    // Serving: decode graphs of large batches over short contexts, bound = the 256 context bucket.
    bench_decode(kHeads, kHeads, {128, 256, 512}, {16, 192}, false, 256, both);
    std::printf("  (70B shapes on 2 ranks: 32 query heads, 4 KV heads, group 8)\n");
    bench_decode(32, 4, {1, 64}, {2048}, false);
    // The same with an fp8 e4m3 cache (--kv-cache-dtype fp8): half the bytes per position.
    bench_decode<__nv_fp8_e4m3>(kHeads, kHeads, {1, 4}, {128, 2048}, true, 0, both);
    bench_decode<__nv_fp8_e4m3>(kHeads, kHeads, {1, 64}, {2048}, false, 0, both);
    bench_decode<__nv_fp8_e4m3>(kHeads, kHeads, {128, 256, 512}, {16, 192}, false, 256, both);
    bench_decode<__nv_fp8_e4m3>(32, 4, {1, 64}, {2048}, false);
    if (!decode_only) {
      bench_prefill_all();
      bench_sampling();
      bench_gemv();
      g_failures += bench_qgemv_streaming();
    }
  }
  std::printf("%s\n", g_failures ? "CORRECTNESS FAILURES: timings above are not meaningful"
                                 : "all checks passed");
  return g_failures ? 1 : 0;
}
