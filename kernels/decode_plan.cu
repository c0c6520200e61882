#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/decode_plan.cuh"
#include "kernels/dtype.cuh"

namespace llama2::kernels {

namespace {

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    return 132;  // H200
  }
  return sms;
}

// A partition rule: start at kDecodeMaxPartition positions and halve (down to min_part) while the
// work items (sequences x KV heads x partitions) number fewer than `target`.
struct PartitionRule {
  int64_t target;
  int min_part;
};

int choose_partition(PartitionRule rule, int64_t items, int max_context) {
  int part = kDecodeMaxPartition;
  while (part > rule.min_part && items * ceil_div(max_context, part) < rule.target) part /= 2;
  return part;
}

// The most partitions choose_partition gives any context up to max_context (shorter contexts
// can split into more: 1025 positions may take 17 x 64 where 2048 take 16 x 128). A partition
// p < kDecodeMaxPartition is chosen only after 2p fell short, items * ceil(ctx / 2p) < target, so
// ctx <= 2p * k with k the largest count for which items * k < target.
int64_t most_partitions(PartitionRule rule, int64_t items, int max_context) {
  int64_t most = ceil_div(max_context, kDecodeMaxPartition);
  const int64_t k = (rule.target - 1) / items;
  for (int p = kDecodeMaxPartition / 2; p >= rule.min_part; p /= 2) {
    most = std::max(most, ceil_div(std::min<int64_t>(max_context, 2 * p * k), p));
  }
  return most;
}

// Block kernel: at least kBlocksPerSm blocks per multiprocessor (about the occupancy its
// registers allow: group 8 ~140 per thread, 3 resident blocks; group 1 96, 5 blocks): a block
// streams its rows with at most 8 rows per lane in flight, so HBM bandwidth needs many resident
// blocks. (Capping registers at 128 for a 4th resident group-8 block made ptxas spill.) Batch-1
// decode of a 2048-token context over 32 KV heads gets 1024 blocks of 64 positions instead of
// 128 blocks of 512.
constexpr int kBlocksPerSm = 4;
constexpr int kMinPartition = 64;
// Warp kernel (group 1): one (sequence, KV head, partition) per warp and its state in registers
// (fp16 71 per thread: 7 blocks = 28 warps resident per multiprocessor; bf16 92: 5 blocks;
// capping bf16 lower made ptxas spill), every warp streaming on its own; at least
// kWarpItemsPerSm warps per multiprocessor.
constexpr int kWarpItemsPerSm = 32;
constexpr int kMinWarpPartition = 32;
// Auto: the warp kernel once sequences x KV heads give kWarpAutoItemsPerSm* items per
// multiprocessor: 3 with a 16-bit cache (7B, 32 KV heads: batch >= 13 on 132 SMs), 48 with an fp8
// cache (batch >= 198). End to end on one H200 (2026-12-02, llama2_bench_e2e, forced warp vs the
// block kernel, 16-bit cache): 7B fp8 weights batch 16 / 32 / 64 / 128 +3.9 / +1.1 / +3.9 /
// +3.4%, fp16 weights +2.4 / +1.0 / +2.7 / +3.8%, 1024-token prompts +3.1 to +4.3%, 13B fp8
// batch 32 / 64 / 128 +0.9 / +1.8 / +5.7%; with an fp8 cache batch 64 lost 7.7% (16,080 -> 14,849
// tok/s: the warp kernel's twice-as-many rows per step cost more than its occupancy gains), hence
// the old threshold there, from llama2_bench_kernels (2026-12-01, contexts 16 / 192, bound 256,
// us block -> warp): batch 512 139 -> 51 / 413 -> 388, batch 256 75 -> 32 / 216 -> 218. (That
// benchmark had the warp kernel slower alone at batch 128, context 192, 117 -> 137 us, and batch
// 64 at 2048, 525 -> 567: end to end, in the engine's graphs, it was faster in both regimes.)
constexpr int kWarpAutoItemsPerSm16 = 3;
constexpr int kWarpAutoItemsPerSmFp8 = 48;

// Which kernel, and the partition rule it is planned with.
struct Choice {
  bool warp;
  PartitionRule rule;
  int64_t items;  // sequences x KV heads
};

Choice choose(int num_seqs, int group, int kv_heads, DecodeKernel kernel, bool fp8_cache) {
  Choice c{};
  c.items = static_cast<int64_t>(num_seqs) * kv_heads;
  const int64_t sms = sm_count();
  const int64_t auto_items = (fp8_cache ? kWarpAutoItemsPerSmFp8 : kWarpAutoItemsPerSm16) * sms;
  c.warp = group == 1 && (kernel == DecodeKernel::kWarp ||
                          (kernel == DecodeKernel::kAuto && c.items >= auto_items));
  c.rule = c.warp ? PartitionRule{kWarpItemsPerSm * sms, kMinWarpPartition}
                  : PartitionRule{kBlocksPerSm * sms, kMinPartition};
  return c;
}

}  // namespace

DecodePlan plan_decode(int num_seqs, int group, int kv_heads, int max_context, DecodeKernel kernel,
                       bool fp8_cache, int min_partition) {
  Choice c = choose(num_seqs, group, kv_heads, kernel, fp8_cache);
  c.rule.min_part = std::max(c.rule.min_part, min_partition);
  DecodePlan plan{};
  plan.warp = c.warp;
  plan.partition = choose_partition(c.rule, c.items, max_context);
  plan.num_parts = static_cast<int>(ceil_div(max_context, plan.partition));
  return plan;
}

int64_t decode_most_partitions(int num_seqs, int group, int kv_heads, int max_context,
                               DecodeKernel kernel) {
  // Both caches' choices: the workspace does not depend on the cache type.
  int64_t most = 0;
  for (const bool fp8_cache : {false, true}) {
    const Choice c = choose(num_seqs, group, kv_heads, kernel, fp8_cache);
    most = std::max(most, most_partitions(c.rule, c.items, max_context));
  }
  return most;
}

}  // namespace llama2::kernels
