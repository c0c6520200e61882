// Attention kernels of llama2_bench_kernels (`decode`, `prefill` and the default run): paged
// decode attention (block and warp kernels, 16-bit and fp8 caches, split contexts) and causal
// prefill attention (WMMA and mma kernels, a cached prefix, the mma kernel's key split), each
// checked against the CPU reference on reduced shapes before the timed ones.
#include <string>
#include <vector>

#include "bench_kernels_util.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/convert.cuh"

namespace kbench {

namespace {

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

}  // namespace

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

void bench_decode_all() {
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
}

}  // namespace kbench
