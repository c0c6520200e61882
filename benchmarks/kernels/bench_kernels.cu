// Kernel benchmarks at Llama-2-7B shapes (hidden 4096, 32 heads, head_dim 128, ffn 11008, vocab
// 32000, fp16), each family checked against the fp32 CPU reference before it is timed.
//
// Build: cd build && cmake .. && ninja llama2_bench_kernels      (CUDA builds only)
// Run:   ./llama2_bench_kernels [decode|prefill|qgemv|w4|w8a16|fp8|overlap|skinny]   on a GPU node
//        (one H200; ~1 minute; `decode`: only decode attention, block and warp kernels side by
//        side; `prefill`: only prefill attention, WMMA and mma kernels side by side; compare with
//        sdpa_prefill.py (both in bench_attention.cu); `qgemv`: only the streaming GEMV of fp16 /
//        fp8 / int8 weights, bench_qgemv.cu; `w4`: only the streaming 4-bit GEMV,
//        bench_gemv_w4.cu; `w8a16`: only the int8/e4m3-weight GEMM against
//        cuBLAS, bench_w8a16.cu; `fp8`: only the FP8 product, cuBLASLt's heuristic algorithm vs the
//        tuned one, bench_fp8.cu; `skinny`: only the fp16 GEMM for M <= 64 against cuBLAS,
//        bench_skinny.cu)
//
// Timing: CUDA events around each launch, 5 warm-up launches, median of 30. Bytes are the minimum
// traffic (each input read once, each output written once); FLOPs for attention count the
// multiply-adds of QK^T and PV (prefill: the causal half). Rooflines measured on the H200 nodes
// (docs: /work/shared/HARDWARE.md): HBM 4315 GB/s device-to-device copy (read + write), fp16 dense
// 872 TFLOP/s. Shapes whose data fits in the 50 MB L2 (batch-1 decode, small T) can exceed the HBM
// figure; they measure launch latency and L2 more than HBM.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_kernels_util.h"
#include "kernels/convert.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/sampling.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cuda/device_buffer.h"

int bench_qgemv_streaming();  // bench_qgemv.cu
int bench_w4_streaming();     // bench_gemv_w4.cu

namespace kbench {
namespace {

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
}  // namespace kbench

int bench_w8a16();    // bench_w8a16.cu: the number of failed checks
int bench_fp8();      // bench_fp8.cu
int bench_overlap();  // bench_overlap.cu
int bench_skinny();   // bench_skinny.cu

int main(int argc, char** argv) {
  using namespace kbench;  // NOLINT(build/namespaces): the program around these helpers
  // `llama2_bench_kernels decode` / `prefill`: that attention section only; `w8a16`: the GEMM.
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc > 2 ||
      (argc == 2 && mode != "decode" && mode != "prefill" && mode != "qgemv" && mode != "w4" &&
       mode != "w8a16" && mode != "fp8" && mode != "overlap" && mode != "skinny")) {
    std::fprintf(stderr,
                 "usage: llama2_bench_kernels [decode|prefill|qgemv|w4|w8a16|fp8|overlap|skinny]  "
                 "(got '%s')\n",
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
  } else if (mode == "w4") {
    g_failures += bench_w4_streaming();
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
    bench_decode_all();
    if (!decode_only) {
      bench_prefill_all();
      bench_sampling();
      bench_gemv();
      g_failures += bench_qgemv_streaming();
      g_failures += bench_w4_streaming();
    }
  }
  std::printf("%s\n", g_failures ? "CORRECTNESS FAILURES: timings above are not meaningful"
                                 : "all checks passed");
  return g_failures ? 1 : 0;
}
