// `llama2_bench_kernels overlap`: does a large decode step gain from running two half-batches on
// two streams, so that one half's attention (HBM-bound: the KV reads) runs while the other half's
// projections (tensor-core bound at hundreds of rows) do? Issue 19 asks for this overlap "where it
// pays"; this measures the kernels alone before the engine is restructured for it. Measured on
// one H200 (2026-12-02, benchmarks/RESULTS.md): it does not pay, the whole batch on one stream is
// the fastest in every row.
//
// A "layer" is what dominates a saturation step: the qkv, o, gate|up and down products and decode
// attention over a paged cache (the small kernels between them are left out). Four distinct
// layers (weights and caches), 8 rounds = a 32-layer step, for:
//   full       all rows on one stream (what the engine runs today);
//   halves     the two halves one after the other on one stream;
//   2 streams  half A on one stream, half B on another, launched layer by layer;
//   2 + prio   the same with half B's stream at the device's greatest priority.
// Shapes: Llama-2-7B fp16 weights + fp16 KV, and 13B fp8 weights (cuBLASLt FP8, Fp8Gemm::run:
// GEMM + scale launch) + fp8 KV; batch 512 and 256, contexts 129-256 (the saturation run's
// 128 + 128 tokens), context bound 256 (the engine's graph bucket). Median of 5 timed steps.
//
// Build: ninja -C build-gpu llama2_bench_kernels     Run: build-gpu/llama2_bench_kernels overlap
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "common/check.h"
#include "kernels/attention_decode.cuh"
#include "rank/cuda/device_buffer.h"
#include "rank/cuda/fp8_gemm.h"

namespace k = llama2::kernels;
using llama2::DeviceBuffer;

namespace {

constexpr int kLayers = 4, kRounds = 8, kBlockSize = 16, kBound = 256;
constexpr size_t kWorkspace = size_t{32} << 20;

struct Model {
  const char* name;
  int hidden, heads, ffn;
  bool fp8;  // fp8 weights and KV, else fp16 both
};

// Every byte `value`: the timings do not depend on the numbers (fp16 0x3b3b ~ 0.88, e4m3 0x37 ~
// 0.94 / 0x77 = 240), and random fills of ~10 GB on the host would take longer than the benchmark.
void fill_bytes(DeviceBuffer& b, uint8_t value) {
  CUDA_CHECK(cudaMemset(b.as<void>(), value, b.bytes()));
}

// One stream's tools: a cuBLAS handle and an Fp8Gemm with their own workspaces.
struct Lane {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::unique_ptr<DeviceBuffer> ws;
  std::unique_ptr<llama2::Fp8Gemm> fp8;
  Lane(int priority, int max_rows, int max_n) {
    CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
    CUBLAS_CHECK(cublasCreate(&blas));
    ws = std::make_unique<DeviceBuffer>(kWorkspace, "cuBLAS workspace");
    CUBLAS_CHECK(cublasSetWorkspace(blas, ws->as<void>(), kWorkspace));
    CUBLAS_CHECK(cublasSetStream(blas, stream));
    fp8 = std::make_unique<llama2::Fp8Gemm>(CUDA_R_16F, max_rows, max_n, stream);
  }
  ~Lane() {
    fp8.reset();
    (void)cublasDestroy(blas);
    (void)cudaStreamDestroy(stream);
  }
};

void bench_model(const Model& m) {
  const int H = m.hidden, d = 128, heads = m.heads, F = m.ffn, S_max = 512;
  const int qkv_n = 3 * H;
  const int max_blocks = kBound / kBlockSize;
  const size_t wbytes = m.fp8 ? 1 : 2;
  struct Proj {
    int N, K;
  };
  const Proj projs[4] = {{qkv_n, H}, {H, H}, {2 * F, H}, {H, F}};
  // Weights [N, K] per layer and projection.
  std::vector<std::unique_ptr<DeviceBuffer>> w;
  for (int l = 0; l < kLayers; ++l) {
    for (const Proj& p : projs) {
      w.push_back(std::make_unique<DeviceBuffer>(size_t(p.N) * p.K * wbytes, "W"));
      fill_bytes(*w.back(), m.fp8 ? 0x37 : 0x3b);
    }
  }
  std::vector<float> ones(2 * F, 1.f / 64);
  DeviceBuffer wscale(ones.size() * sizeof(float), "w scales"), xscale(S_max * sizeof(float), "xs");
  CUDA_CHECK(cudaMemcpy(wscale.as<void>(), ones.data(), wscale.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(xscale.as<void>(), ones.data(), xscale.bytes(), cudaMemcpyHostToDevice));
  // Activations: inputs in e4m3 (fp8) or fp16 (0x3b-masked bytes: small normal values), outputs.
  DeviceBuffer x(size_t(S_max) * F * 2, "x"), y(size_t(S_max) * 2 * F * 2, "y");
  fill_bytes(x, m.fp8 ? 0x37 : 0x3b);
  DeviceBuffer q(size_t(S_max) * qkv_n * 2, "q"), out(size_t(S_max) * H * 2, "attention out");
  fill_bytes(q, 0x3b);
  // Caches [blocks, heads, block, d] per layer; sequence s owns blocks s * max_blocks ...
  const size_t cbytes = m.fp8 ? 1 : 2;
  const int num_blocks = S_max * max_blocks;
  std::vector<std::unique_ptr<DeviceBuffer>> kv;
  for (int l = 0; l < kLayers; ++l) {
    kv.push_back(std::make_unique<DeviceBuffer>(
        size_t(2) * num_blocks * heads * kBlockSize * d * cbytes, "KV"));
    fill_bytes(*kv.back(), m.fp8 ? 0x37 : 0x3b);
  }
  std::vector<int32_t> table(size_t(S_max) * max_blocks), ctx(S_max);
  std::mt19937 rng(9);
  for (int s = 0; s < S_max; ++s) {
    for (int b = 0; b < max_blocks; ++b) table[size_t(s) * max_blocks + b] = s * max_blocks + b;
    ctx[s] = 129 + static_cast<int>(rng() % 128);
  }
  DeviceBuffer d_table(table.size() * 4, "block tables"), d_ctx(ctx.size() * 4, "contexts");
  CUDA_CHECK(cudaMemcpy(d_table.as<void>(), table.data(), d_table.bytes(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_ctx.as<void>(), ctx.data(), d_ctx.bytes(), cudaMemcpyHostToDevice));
  const size_t attn_ws =
      k::attention_decode_workspace_bytes(S_max, heads, heads, d, kBound, k::DecodeKernel::kAuto);
  DeviceBuffer ws_a(std::max<size_t>(attn_ws, 16), "attention ws A"),
      ws_b(std::max<size_t>(attn_ws, 16), "attention ws B");

  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));  // hi: the greatest priority
  Lane a(lo, S_max, 2 * F), b(lo, S_max, 2 * F), b_prio(hi, S_max, 2 * F);

  // Rows [r0, r0 + M) of one layer's products, on lane L.
  auto gemm = [&](Lane& L, int layer, int pi, int r0, int M) {
    const Proj& p = projs[pi];
    const DeviceBuffer& W = *w[size_t(layer) * 4 + pi];
    const size_t in_off = size_t(r0) * p.K * (m.fp8 ? 1 : 2);
    const size_t out_off = size_t(r0) * p.N * 2;
    if (m.fp8) {
      L.fp8->run(x.as<uint8_t>() + in_off, xscale.as<float>() + r0, W.as<void>(),
                 wscale.as<float>(), y.as<uint8_t>() + out_off, M, p.N, p.K);
    } else {
      const float alpha = 1.f, beta = 0.f;
      CUBLAS_CHECK(cublasGemmEx(L.blas, CUBLAS_OP_T, CUBLAS_OP_N, p.N, M, p.K, &alpha, W.as<void>(),
                                CUDA_R_16F, p.K, x.as<uint8_t>() + in_off, CUDA_R_16F, p.K, &beta,
                                y.as<uint8_t>() + out_off, CUDA_R_16F, p.N, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    }
  };
  auto attention = [&](Lane& L, const DeviceBuffer& ws, int layer, int s0, int S) {
    const DeviceBuffer& c = *kv[layer];
    const size_t half = c.bytes() / 2;
    auto launch = [&](auto cache_tag) {
      using C = decltype(cache_tag);
      k::DecodeAttentionArgs<__half, C> args;
      args.q = q.as<__half>() + size_t(s0) * qkv_n;
      args.q_stride = qkv_n;
      args.cache = k::PagedKvCache<C>{reinterpret_cast<C*>(c.as<uint8_t>()),
                                      reinterpret_cast<C*>(c.as<uint8_t>() + half),
                                      num_blocks,
                                      heads,
                                      kBlockSize,
                                      d};
      args.block_tables = d_table.as<int32_t>() + size_t(s0) * max_blocks;
      args.max_blocks = max_blocks;
      args.context_lens = d_ctx.as<int32_t>() + s0;
      args.num_seqs = S;
      args.heads = heads;
      args.max_context = kBound;
      args.out = out.as<__half>() + size_t(s0) * H;
      args.workspace = ws.as<void>();
      args.workspace_bytes = ws.bytes();
      CUDA_CHECK(k::launch_attention_decode(args, L.stream));
    };
    if (m.fp8) {
      launch(__nv_fp8_e4m3{});
    } else {
      launch(__half{});
    }
  };
  auto layer_ops = [&](Lane& L, const DeviceBuffer& ws, int layer, int r0, int M) {
    gemm(L, layer, 0, r0, M);
    attention(L, ws, layer, r0, M);
    for (int pi = 1; pi < 4; ++pi) gemm(L, layer, pi, r0, M);
  };

  // Milliseconds per 32-layer step: `step` enqueues one on lanes that all start after an event on
  // a's stream and are joined back to it; median of 5 after 2 warm-ups.
  cudaEvent_t t0, t1, fork, join_b, join_p;
  for (cudaEvent_t* e : {&t0, &t1, &fork, &join_b, &join_p}) CUDA_CHECK(cudaEventCreate(e));
  auto time_ms = [&](const std::function<void()>& step) {
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      CUDA_CHECK(cudaEventRecord(t0, a.stream));
      CUDA_CHECK(cudaEventRecord(fork, a.stream));
      CUDA_CHECK(cudaStreamWaitEvent(b.stream, fork));
      CUDA_CHECK(cudaStreamWaitEvent(b_prio.stream, fork));
      step();
      CUDA_CHECK(cudaEventRecord(join_b, b.stream));
      CUDA_CHECK(cudaEventRecord(join_p, b_prio.stream));
      CUDA_CHECK(cudaStreamWaitEvent(a.stream, join_b));
      CUDA_CHECK(cudaStreamWaitEvent(a.stream, join_p));
      CUDA_CHECK(cudaEventRecord(t1, a.stream));
      CUDA_CHECK(cudaEventSynchronize(t1));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, t0, t1));
      if (rep >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };

  std::printf("\n%s, %s weights and KV, contexts 129-256 (bound %d), %d-layer step, ms:\n", m.name,
              m.fp8 ? "fp8" : "fp16", kBound, kLayers * kRounds);
  std::printf("%6s | %9s %9s %9s | %9s %9s %9s %9s | %s\n", "batch", "GEMMs", "attention", "sum",
              "full", "halves", "2 streams", "2 + prio", "best / full");
  for (const int S : {512, 256}) {
    const int h = S / 2;
    const double gemms = time_ms([&] {
      for (int r = 0; r < kRounds; ++r)
        for (int l = 0; l < kLayers; ++l)
          for (int pi = 0; pi < 4; ++pi) gemm(a, l, pi, 0, S);
    });
    const double attn = time_ms([&] {
      for (int r = 0; r < kRounds; ++r)
        for (int l = 0; l < kLayers; ++l) attention(a, ws_a, l, 0, S);
    });
    const double full = time_ms([&] {
      for (int r = 0; r < kRounds; ++r)
        for (int l = 0; l < kLayers; ++l) layer_ops(a, ws_a, l, 0, S);
    });
    const double halves = time_ms([&] {
      for (int r = 0; r < kRounds; ++r)
        for (int l = 0; l < kLayers; ++l) {
          layer_ops(a, ws_a, l, 0, h);
          layer_ops(a, ws_b, l, h, h);
        }
    });
    auto two = [&](Lane& other) {
      return time_ms([&] {
        for (int r = 0; r < kRounds; ++r)
          for (int l = 0; l < kLayers; ++l) {
            layer_ops(a, ws_a, l, 0, h);
            layer_ops(other, ws_b, l, h, h);
          }
      });
    };
    const double streams = two(b), prio = two(b_prio);
    std::printf("%6d | %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f %9.2f | %.3f\n", S, gemms, attn,
                gemms + attn, full, halves, streams, prio, std::min(streams, prio) / full);
  }
  for (cudaEvent_t e : {t0, t1, fork, join_b, join_p}) CUDA_CHECK(cudaEventDestroy(e));
}

}  // namespace

int bench_overlap() {
  bench_model({"Llama-2-7B", 4096, 32, 11008, false});
  bench_model({"Llama-2-13B", 5120, 40, 13824, true});
  return 0;
}
