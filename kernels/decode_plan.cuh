// How a paged decode attention launch is split (host side, no device code): which kernel, and how
// many context positions each work item takes. The launch (attention_decode.cu) and its
// workspace query use the same plan, so they cannot disagree.
#pragma once

#include <cstdint>

namespace llama2::kernels {

// Which kernel a launch uses. kAuto: the warp kernel for group 1 when sequences x KV heads are
// at least 3 per multiprocessor with a 16-bit cache, 48 with an fp8 cache (decode_plan.cu: the
// measurements), else the block kernel. kWarp applies to
// group 1 only (grouped heads always take the block kernel, which reads each K/V row once per
// group); kBlock and kWarp exist for benchmarks and A/B runs (LLAMA2_DECODE_KERNEL).
enum class DecodeKernel { kAuto, kBlock, kWarp };

// Positions per partition at most (the block kernel keeps a partition's scores in shared memory).
constexpr int kDecodeMaxPartition = 512;

struct DecodePlan {
  bool warp;      // decode_warp_kernel, else decode_partition_kernel
  int partition;  // positions per work item, a power of two <= kDecodeMaxPartition
  int num_parts;  // ceil(max_context / partition)
};

// The plan for num_seqs sequences of query group `group` (heads per KV head) over kv_heads KV
// heads with contexts up to max_context, on the current device (its multiprocessor count);
// fp8_cache: the cache holds e4m3 (the automatic choice differs). min_partition (A/B runs): 0 the
// rule's own floor, else a power of two 32..kDecodeMaxPartition below which no partition is halved
// (fewer partitions than the rule's: the workspace for the rule's covers it).
DecodePlan plan_decode(int num_seqs, int group, int kv_heads, int max_context, DecodeKernel kernel,
                       bool fp8_cache, int min_partition = 0);

// The most partitions plan_decode gives any max_context' <= max_context with the other
// arguments equal, for either cache type: a shorter bound can split into more (1025 positions
// into 17 x 64 where 2048 take 16 x 128), so a workspace sized for a bound must be sized by this.
int64_t decode_most_partitions(int num_seqs, int group, int kv_heads, int max_context,
                               DecodeKernel kernel);

}  // namespace llama2::kernels
