#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/attention_decode.cuh"
#include "kernels/decode_plan.cuh"
#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;                        // query heads per KV head (Llama-2-70B: 8)
constexpr int kMaxPartition = kDecodeMaxPartition;  // positions per block; scores in shared memory
// K/V rows per lane per step; the next step's rows are loaded while this step's are used, so up
// to twice this many rows per lane are in flight. Group 1 (7B, 13B) has registers to spare for 8;
// groups up to 8 hold 8 queries and 8 accumulators per lane and keep 4 (~140 registers).
template <int kG>
constexpr int kUnroll = kG == 1 ? 8 : 4;

// T: queries and output; C: the cache's element type (T, or fp8 e4m3 for fp16/bf16 models).
template <typename T, typename C>
struct DecodeParams {
  const T* q;
  int64_t q_stride;
  const C* k_cache;  // [num_blocks, kv_heads, block_size, D]
  const C* v_cache;
  int kv_heads;
  int block_size;
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int max_blocks;
  const int32_t* context_lens;
  int heads;
  int group;
  int partition;
  int num_parts;  // == gridDim.x of the partition kernel
  float scale;
  T* out;           // [num_seqs, heads, D]
  float* part_acc;  // [num_seqs, heads, num_parts, D], unnormalized sum of p * v
  float* part_max;  // [num_seqs, heads, num_parts]
  float* part_sum;  // [num_seqs, heads, num_parts]
};

// How a K/V row of D elements is spread over a warp: a lane takes the elements of one 16-byte
// piece of T (8 for fp16/bf16), so an fp8 cache is read in 8-byte pieces with the same lane
// layout and register footprint as fp16, only half the bytes.
template <typename T, int D>
struct RowSplit {
  static constexpr int kVec = kVec16<T>;            // elements per lane
  static constexpr int kLanes = D / kVec;           // lanes per row
  static constexpr int kRowsPerWarp = 32 / kLanes;  // rows a warp reads per access
  static_assert(kLanes >= 1 && kLanes <= 32 && 32 % kLanes == 0, "unsupported head_dim");
};

}  // namespace

// kG: the largest group this instantiation handles (1, 4 or 8); register arrays are sized by it.
template <typename T, typename C, int D, int kG>
static __global__ void __launch_bounds__(kThreads)
    decode_partition_kernel(const DecodeParams<T, C> p) {
  wait_for_previous_grid();
  constexpr int kU = kUnroll<kG>;
  using Split = RowSplit<T, D>;
  constexpr int V = Split::kVec;
  constexpr int L = Split::kLanes;
  constexpr int R = Split::kRowsPerWarp;
  constexpr int kWarpStep = R * kU;               // rows per warp per iteration
  constexpr int kBlockStep = kWarps * kWarpStep;  // rows per block per iteration
  // Scores [kG][kMaxPartition] first; after the P.V loop the same memory holds the per-warp
  // partial outputs [kWarps][kG][D].
  constexpr int kBuf = kG * kMaxPartition > kWarps * kG * D ? kG * kMaxPartition : kWarps * kG * D;
  __shared__ float s_buf[kBuf];
  __shared__ float s_max[kG];
  __shared__ float s_sum[kG];
  // Cache row of each partition row for this KV head, in units of D elements:
  // (block * kv_heads + kvh) * block_size + offset (int32: the launcher checks the cache size).
  __shared__ int32_t s_rows[kMaxPartition];

  const int part = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int lane_in_row = lane % L;  // which 16-byte piece of the row
  const int row_in_warp = lane / L;  // which of the warp's R rows
  const int group = p.group;
  const int h0 = kvh * group;
  const bool split = p.num_parts > 1;
  const int ctx = p.context_lens[seq];
  T* out = p.out + (static_cast<int64_t>(seq) * p.heads + h0) * D;

  if (ctx <= 0 || ctx > p.num_parts * p.partition) {
    // Empty sequence (zeros) or a context beyond the host bound (NaN, never silently truncated).
    // With a split, the merge kernel writes these rows.
    if (!split && part == 0) {
      for (int idx = tid; idx < group * D; idx += kThreads)
        out[idx] = from_float<T>(ctx <= 0 ? 0.f : NAN);
    }
    return;
  }
  const int t0 = part * p.partition;
  if (t0 >= ctx) return;  // this sequence is shorter than the longest one
  const int n = min(ctx - t0, p.partition);

  // Each row's cache offset is computed once, by one thread, into shared memory: computing it per
  // lane (runtime div/mod, a dependent block-table load, 64-bit arithmetic, 16 lanes per row) made
  // the streaming loops instruction- and latency-bound at ~30% of HBM bandwidth.
  {
    const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;
    constexpr int kPerThread = kMaxPartition / kThreads;
    int32_t block[kPerThread];
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {  // all table loads in flight before the first use
      const int i = tid + r * kThreads;
      block[r] = i < n ? table[(t0 + i) / p.block_size] : 0;
    }
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
      const int i = tid + r * kThreads;
      if (i < n) s_rows[i] = (block[r] * p.kv_heads + kvh) * p.block_size + (t0 + i) % p.block_size;
    }
  }
  // Element offset of this lane's piece of partition row i.
  auto row_offset = [&](int i) -> int64_t {
    return static_cast<int64_t>(s_rows[i]) * D + lane_in_row * V;
  };
  // This lane's rows of the warp step starting at `base`; rows past n are zeros, not loaded.
  auto load_step = [&](const C* cache, int base, Pack<C, V>(&dst)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u * R + row_in_warp;
      dst[u] = i < n ? *reinterpret_cast<const Pack<C, V>*>(cache + row_offset(i)) : Pack<C, V>{};
    }
  };

  // The lane's piece of each query of the group, pre-scaled by 1/sqrt(d).
  float qr[kG][V];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g < group) {
      load_float<T, V>(p.q + seq * p.q_stride + (h0 + g) * D + lane_in_row * V, qr[g]);
#pragma unroll
      for (int e = 0; e < V; ++e) qr[g][e] *= p.scale;
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) qr[g][e] = 0.f;
    }
  }

  __syncthreads();  // s_rows

  // ---- scores: s_buf[g][i] = q_g . k_{t0+i}. The loop bound depends on the warp only, so whole
  // warps stay together for the shuffles; rows past n are loaded as zeros and not stored.
  // Software pipelined: the next step's rows are requested before this step's are used.
  Pack<C, V> next[kU];
  load_step(p.k_cache, warp * kWarpStep, next);
  for (int base = warp * kWarpStep; base < n; base += kBlockStep) {
    Pack<C, V> kp[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) kp[u] = next[u];
    load_step(p.k_cache, base + kBlockStep, next);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u * R + row_in_warp;
      float kf[V];
      unpack_float(kp[u], kf);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g < group) {  // uniform over the block
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < V; ++e) dot += qr[g][e] * kf[e];
#pragma unroll
          for (int o = L / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(kFullMask, dot, o);
          if (lane_in_row == 0 && i < n) s_buf[g * kMaxPartition + i] = dot;
        }
      }
    }
  }
  // The first V rows do not depend on the softmax: request them before it.
  load_step(p.v_cache, warp * kWarpStep, next);
  __syncthreads();

  // ---- softmax within the partition: one warp per query head; scores become exp(s - max).
  for (int g = warp; g < group; g += kWarps) {
    float* sg = s_buf + g * kMaxPartition;
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, sg[i]);
    m = warp_max(m);
    float sum = 0.f;
    for (int i = lane; i < n; i += 32) {
      const float e = expf(sg[i] - m);
      sg[i] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      s_max[g] = m;
      s_sum[g] = sum;
    }
  }
  __syncthreads();

  // ---- acc[g] = sum_i p[g][i] * v_{t0+i} over this lane's rows, for its piece of the row.
  float acc[kG][V];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
#pragma unroll
    for (int e = 0; e < V; ++e) acc[g][e] = 0.f;
  }
  for (int base = warp * kWarpStep; base < n; base += kBlockStep) {
    Pack<C, V> vp[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) vp[u] = next[u];
    load_step(p.v_cache, base + kBlockStep, next);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int i = base + u * R + row_in_warp;
      float vf[V];
      unpack_float(vp[u], vf);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g < group) {
          const float w = i < n ? s_buf[g * kMaxPartition + i] : 0.f;
#pragma unroll
          for (int e = 0; e < V; ++e) acc[g][e] += w * vf[e];
        }
      }
    }
  }
  // Sum over the warp's R rows: lanes with the same lane_in_row differ in the bits >= L.
#pragma unroll
  for (int o = L; o < 32; o <<= 1) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g < group) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc[g][e] += __shfl_xor_sync(kFullMask, acc[g][e], o);
      }
    }
  }
  __syncthreads();  // every warp has finished reading the scores: s_buf is reused below
  if (row_in_warp == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g < group) {
#pragma unroll
        for (int e = 0; e < V; ++e) s_buf[(warp * kG + g) * D + lane_in_row * V + e] = acc[g][e];
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < group * D; idx += kThreads) {
    const int g = idx / D, j = idx % D;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_buf[(w * kG + g) * D + j];
    if (!split) {
      out[idx] = from_float<T>(sum / s_sum[g]);
    } else {
      const int64_t slot = (static_cast<int64_t>(seq) * p.heads + h0 + g) * p.num_parts + part;
      p.part_acc[slot * D + j] = sum;
    }
  }
  if (split && tid < group) {
    const int64_t slot = (static_cast<int64_t>(seq) * p.heads + h0 + tid) * p.num_parts + part;
    p.part_max[slot] = s_max[tid];
    p.part_sum[slot] = s_sum[tid];
  }
}

// Group 1: one warp per (sequence, head, partition), items numbered with the partition fastest;
// num_items = num_parts * heads * num_seqs. Lanes split a K/V row as in the block kernel (L lanes
// per row, R rows per warp access); each of the R row groups keeps an online softmax (running
// max m, sum l, unnormalized acc) over its rows, and the groups are merged by log-sum-exp at the
// end. K and V rows of a step are requested together: no shared memory, no block barrier.
template <typename T, typename C, int D>
static __global__ void __launch_bounds__(kThreads, sizeof(C) == 1 ? 7 : 1)
    decode_warp_kernel(const DecodeParams<T, C> p, int num_items) {
  wait_for_previous_grid();
  // Rows per lane per step, K and V each: 8 x 16 bytes in flight per lane for fp16/bf16; an fp8
  // cache's 8-byte pieces take twice the rows for the same bytes in flight. Uncapped, the fp8
  // instantiation takes 98 registers (5 blocks per multiprocessor); the launch bound holds it to
  // 72 (7 blocks, 28 warps, as fp16) for a 4-byte spill.
  constexpr int kU = sizeof(C) == 1 ? 8 : 4;
  using Split = RowSplit<T, D>;
  constexpr int V = Split::kVec;
  constexpr int L = Split::kLanes;
  constexpr int R = Split::kRowsPerWarp;
  constexpr int kStep = R * kU;  // rows per warp per step; divides 32
  static_assert(32 % kStep == 0, "a 32-row chunk must hold whole steps");

  const int lane = threadIdx.x & 31;
  const int item = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (item >= num_items) return;
  const int part = item % p.num_parts;
  const int h = (item / p.num_parts) % p.heads;  // query head == KV head
  const int seq = item / p.num_parts / p.heads;
  const int lane_in_row = lane % L;
  const int row_in_warp = lane / L;
  const bool split = p.num_parts > 1;
  const int ctx = p.context_lens[seq];
  T* out = p.out + (static_cast<int64_t>(seq) * p.heads + h) * D;
  if (ctx <= 0 || ctx > p.num_parts * p.partition) {  // as in the block kernel
    if (!split && part == 0) {
      for (int j = lane; j < D; j += 32) out[j] = from_float<T>(ctx <= 0 ? 0.f : NAN);
    }
    return;
  }
  const int t0 = part * p.partition;
  if (t0 >= ctx) return;
  const int n = min(ctx - t0, p.partition);
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;

  float qr[V];
  load_float<T, V>(p.q + seq * p.q_stride + h * D + lane_in_row * V, qr);
#pragma unroll
  for (int e = 0; e < V; ++e) qr[e] *= p.scale;

  float m = -INFINITY, l = 0.f, acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.f;

  for (int c0 = 0; c0 < n; c0 += 32) {
    // Lane j computes the cache row (units of D) of chunk row j once; the step loop below fetches
    // it by shuffle instead of every lane doing the table load and div/mod for each of its rows.
    const int cn = min(32, n - c0);
    int32_t crow = 0;
    if (lane < cn) {
      const int t = t0 + c0 + lane;
      crow = (table[t / p.block_size] * p.kv_heads + h) * p.block_size + t % p.block_size;
    }
    for (int s0 = 0; s0 < cn; s0 += kStep) {  // uniform over the warp
      Pack<C, V> kp[kU], vp[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int r = s0 + u * R + row_in_warp;  // < 32
        const int64_t off =
            static_cast<int64_t>(__shfl_sync(kFullMask, crow, r)) * D + lane_in_row * V;
        const bool valid = r < cn;
        kp[u] = valid ? *reinterpret_cast<const Pack<C, V>*>(p.k_cache + off) : Pack<C, V>{};
        vp[u] = valid ? *reinterpret_cast<const Pack<C, V>*>(p.v_cache + off) : Pack<C, V>{};
      }
      float sc[kU];
      float smax = -INFINITY;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        float kf[V];
        unpack_float(kp[u], kf);
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < V; ++e) dot += qr[e] * kf[e];
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(kFullMask, dot, o);
        sc[u] = s0 + u * R + row_in_warp < cn ? dot : -INFINITY;
        smax = fmaxf(smax, sc[u]);
      }
      const float m_new = fmaxf(m, smax);
      if (m_new != -INFINITY) {              // false only for a row group whose rows all lie past n
        const float corr = expf(m - m_new);  // 0 on the first valid step (m = -inf)
        l *= corr;
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const float w = expf(sc[u] - m_new);
          l += w;
          float vf[V];
          unpack_float(vp[u], vf);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] += w * vf[e];
        }
        m = m_new;
      }
    }
  }
  // Merge the R row groups (lanes with the same lane_in_row differ in the bits >= L); a group
  // that saw no row has m = -inf and weight 0.
#pragma unroll
  for (int o = L; o < 32; o <<= 1) {
    const float m_o = __shfl_xor_sync(kFullMask, m, o);
    const float l_o = __shfl_xor_sync(kFullMask, l, o);
    const float m_new = fmaxf(m, m_o);
    const float a = m == -INFINITY ? 0.f : expf(m - m_new);
    const float b = m_o == -INFINITY ? 0.f : expf(m_o - m_new);
    l = l * a + l_o * b;
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = acc[e] * a + __shfl_xor_sync(kFullMask, acc[e], o) * b;
    m = m_new;
  }
  if (row_in_warp != 0) return;
  if (!split) {
    float o[V];
#pragma unroll
    for (int e = 0; e < V; ++e) o[e] = acc[e] / l;
    store_float<T, V>(out + lane_in_row * V, o);
  } else {
    const int64_t slot = (static_cast<int64_t>(seq) * p.heads + h) * p.num_parts + part;
#pragma unroll
    for (int e = 0; e < V; ++e) p.part_acc[slot * D + lane_in_row * V + e] = acc[e];
    if (lane == 0) {
      p.part_max[slot] = m;
      p.part_sum[slot] = l;
    }
  }
}

// Merge of the partitions of one (sequence, query head): thread j owns output element j.
template <typename T, typename C, int D>
static __global__ void __launch_bounds__(D) decode_merge_kernel(const DecodeParams<T, C> p) {
  wait_for_previous_grid();
  const int h = blockIdx.x, seq = blockIdx.y, j = threadIdx.x;
  const int ctx = p.context_lens[seq];
  T* out = p.out + (static_cast<int64_t>(seq) * p.heads + h) * D;
  if (ctx <= 0 || ctx > p.num_parts * p.partition) {
    out[j] = from_float<T>(ctx <= 0 ? 0.f : NAN);
    return;
  }
  const int parts = static_cast<int>(ceil_div(ctx, p.partition));
  const int64_t base = (static_cast<int64_t>(seq) * p.heads + h) * p.num_parts;
  float m = -INFINITY;
  for (int i = 0; i < parts; ++i) m = fmaxf(m, p.part_max[base + i]);
  float sum = 0.f, acc = 0.f;
  for (int i = 0; i < parts; ++i) {
    const float w = expf(p.part_max[base + i] - m);
    sum += p.part_sum[base + i] * w;
    acc += p.part_acc[(base + i) * D + j] * w;
  }
  out[j] = from_float<T>(acc / sum);
}

size_t attention_decode_workspace_bytes(int num_seqs, int heads, int kv_heads, int head_dim,
                                        int max_context, DecodeKernel kernel) {
  if (num_seqs <= 0 || heads <= 0 || kv_heads <= 0 || head_dim <= 0 || max_context <= 0 ||
      heads % kv_heads != 0) {
    return 0;
  }
  // Every launch whose contexts fit max_context: graphs and mixed steps pass smaller bounds.
  const int64_t parts =
      decode_most_partitions(num_seqs, heads / kv_heads, kv_heads, max_context, kernel);
  if (parts <= 1) return 0;
  return sizeof(float) * static_cast<size_t>(num_seqs) * heads * parts * (head_dim + 2);
}

template <typename T, typename C, int D>
static cudaError_t run_decode(const DecodeParams<T, C>& p, bool warp, int num_seqs, int kv_heads,
                              cudaStream_t stream) {
  const dim3 grid(p.num_parts, kv_heads, num_seqs);
  if (warp) {
    const int64_t items = static_cast<int64_t>(p.num_parts) * kv_heads * num_seqs;
    LLAMA2_LAUNCH_REQUIRE(items <= INT_MAX, std::to_string(items) + " warp items");
    launch_kernel(decode_warp_kernel<T, C, D>, dim3(static_cast<unsigned>(ceil_div(items, kWarps))),
                  kThreads, 0, stream, p, static_cast<int>(items));
  } else if (p.group == 1) {
    launch_kernel(decode_partition_kernel<T, C, D, 1>, grid, kThreads, 0, stream, p);
  } else if (p.group <= 4) {
    launch_kernel(decode_partition_kernel<T, C, D, 4>, grid, kThreads, 0, stream, p);
  } else {
    launch_kernel(decode_partition_kernel<T, C, D, kMaxGroup>, grid, kThreads, 0, stream, p);
  }
  if (p.num_parts > 1) {
    launch_kernel(decode_merge_kernel<T, C, D>, dim3(p.heads, num_seqs), D, 0, stream, p);
  }
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t launch_attention_decode(const DecodeAttentionArgs<T, C>& a, cudaStream_t stream) {
  const auto& c = a.cache;
  const int d = c.head_dim;
  LLAMA2_LAUNCH_REQUIRE(a.num_seqs >= 0 && a.num_seqs <= 65535,
                        "num_seqs " + std::to_string(a.num_seqs) + ", allowed 0..65535");
  LLAMA2_LAUNCH_REQUIRE(
      a.heads > 0 && c.kv_heads > 0 && a.heads % c.kv_heads == 0,
      "heads " + std::to_string(a.heads) + ", kv_heads " + std::to_string(c.kv_heads));
  LLAMA2_LAUNCH_REQUIRE(
      a.heads / c.kv_heads <= kMaxGroup,
      "group " + std::to_string(a.heads / c.kv_heads) + ", at most " + std::to_string(kMaxGroup));
  LLAMA2_LAUNCH_REQUIRE(c.block_size > 0 && c.num_blocks > 0,
                        "block_size " + std::to_string(c.block_size) + ", num_blocks " +
                            std::to_string(c.num_blocks));
  LLAMA2_LAUNCH_REQUIRE(a.max_context > 0, "max_context " + std::to_string(a.max_context));
  LLAMA2_LAUNCH_REQUIRE(ceil_div(a.max_context, c.block_size) <= a.max_blocks,
                        "max_context " + std::to_string(a.max_context) + " needs more than " +
                            std::to_string(a.max_blocks) + " blocks of " +
                            std::to_string(c.block_size));
  // Cache rows are indexed in int32 (units of head_dim elements).
  LLAMA2_LAUNCH_REQUIRE(static_cast<int64_t>(c.num_blocks) * c.kv_heads * c.block_size <= INT32_MAX,
                        std::to_string(c.num_blocks) + " blocks");
  LLAMA2_LAUNCH_REQUIRE(
      a.q_stride >= static_cast<int64_t>(a.heads) * d && a.q_stride % kVec16<T> == 0,
      "q_stride " + std::to_string(a.q_stride));
  LLAMA2_LAUNCH_REQUIRE(
      a.min_partition == 0 || (a.min_partition >= 32 && a.min_partition <= kDecodeMaxPartition &&
                               (a.min_partition & (a.min_partition - 1)) == 0),
      "min_partition " + std::to_string(a.min_partition) +
          ", allowed 0 or a power of two from 32 to " + std::to_string(kDecodeMaxPartition));
  if (a.num_seqs == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(d == 64 || d == 128,
                        "head_dim " + std::to_string(d) + " is not instantiated (64, 128)");
  LLAMA2_LAUNCH_REQUIRE(a.q != nullptr && c.k != nullptr && c.v != nullptr && a.out != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(a.block_tables != nullptr && a.context_lens != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(
      is_aligned(a.q, 16) && is_aligned(c.k, 16) && is_aligned(c.v, 16) && is_aligned(a.out, 16),
      "16-byte alignment");
  DecodeParams<T, C> p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.k_cache = c.k;
  p.v_cache = c.v;
  p.kv_heads = c.kv_heads;
  p.block_size = c.block_size;
  p.block_tables = a.block_tables;
  p.max_blocks = a.max_blocks;
  p.context_lens = a.context_lens;
  p.heads = a.heads;
  p.group = a.heads / c.kv_heads;
  const DecodePlan plan = plan_decode(a.num_seqs, p.group, c.kv_heads, a.max_context, a.kernel,
                                      std::is_same_v<C, __nv_fp8_e4m3>, a.min_partition);
  p.partition = plan.partition;
  p.num_parts = plan.num_parts;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));  // as llama2::cpu::paged_attention
  p.out = a.out;
  if (p.num_parts > 1) {
    const size_t entries = static_cast<size_t>(a.num_seqs) * a.heads * p.num_parts;
    LLAMA2_LAUNCH_REQUIRE(a.workspace != nullptr && is_aligned(a.workspace, 16),
                          std::to_string(p.num_parts) + " partitions need a workspace");
    LLAMA2_LAUNCH_REQUIRE(a.workspace_bytes >= sizeof(float) * entries * (d + 2),
                          "workspace of " + std::to_string(a.workspace_bytes) + " bytes, " +
                              std::to_string(sizeof(float) * entries * (d + 2)) + " needed");
    p.part_acc = static_cast<float*>(a.workspace);
    p.part_max = p.part_acc + entries * d;
    p.part_sum = p.part_max + entries;
  }
  switch (d) {
    case 64:
      return run_decode<T, C, 64>(p, plan.warp, a.num_seqs, c.kv_heads, stream);
    case 128:
      return run_decode<T, C, 128>(p, plan.warp, a.num_seqs, c.kv_heads, stream);
    default:
      return cudaErrorInvalidValue;  // refused above
  }
}

#define LLAMA2_INSTANTIATE(T, C)                                                       \
  template cudaError_t launch_attention_decode<T, C>(const DecodeAttentionArgs<T, C>&, \
                                                     cudaStream_t);
LLAMA2_FOR_EACH_KV_TYPES(LLAMA2_INSTANTIATE)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
