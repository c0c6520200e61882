// Prefill attention on tensor cores with mma.sync (FlashAttention-2 style), for fp16/bf16
// activations over a paged cache of T or fp8 e4m3.
//
// A block takes 128 query rows of one (sequence, head): 4 warps of 32 rows, two m16 row tiles each,
// so every K/V fragment read from shared memory feeds two mma (with 16 rows per warp the ldmatrix
// traffic, 256 bytes per mma, outran the tensor cores); grids of fewer than 2 blocks per
// multiprocessor take 64-row blocks of 4 warps x 16 rows instead. Per 64-key tile:
//   - K and V rows are gathered from the paged cache into shared memory with cp.async, two stages
//     deep: tile kt + 1 is requested before tile kt is computed, and the block-table entries of
//     tile kt + 2 are loaded then too (into shared memory after the compute), so neither the table
//     nor the gather sits on the critical path (an fp8 cache lands raw in a staging area and is
//     converted to T in shared memory);
//   - S = Q K^T with mma.sync.m16n8k16 (fp32 accumulate), Q and K fragments through ldmatrix;
//   - the online softmax runs on the accumulator fragments in registers (exp2 with the scale
//     pre-multiplied by log2 e; row max/sum over the 4 lanes that share a row), the causal mask
//     only on tiles that cross a warp's diagonal, and a warp skips tiles wholly above its diagonal;
//   - P is rounded to T and reused in registers as the A operand of O += P V (V fragments through
//     ldmatrix.trans): nothing of S or P touches shared memory.
// Shared-memory rows are padded by 16 bytes, so the 8 row addresses of every ldmatrix phase hit 8
// different 16-byte bank groups. The output is staged through the warp's own Q rows and written
// with 16-byte stores. Query tiles are scheduled heaviest (last) first.
// Key split (kernels/attention_prefill.cuh, for grids that fill at most half the GPU): grid.x
// holds heads x splits, each block walks its split's share of the key tiles and writes its rows'
// fp32 O / l and max + log2 l instead of the output; prefill_merge_kernel combines the splits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/attention_prefill_mma.cuh"
#include "kernels/dtype.cuh"
#include "kernels/mma.cuh"

namespace llama2::kernels {

namespace {

// Byte offsets into dynamic shared memory for kBQ query rows. T tiles are [rows][kLd] of T; the fp8
// staging tiles are dense [kBK][D] bytes (cp.async copies 16 bytes, conversion reads them back
// once); then two [kBK] int32 arrays of key cache rows.
template <typename T, typename C, int D, int kBQ, int kBK>
struct MmaSmem {
  static constexpr bool kFp8 = sizeof(C) == 1;
  static constexpr int kLd = D + 8;
  static constexpr size_t kTile = sizeof(T) * kBK * kLd;  // one K or V tile
  static constexpr size_t kKV = sizeof(T) * kBQ * kLd;    // K/V tiles follow the Q tile
  static constexpr int kStages = kFp8 ? 1 : 2;            // fp8: the staging is double-buffered
  static constexpr size_t kStaging = kKV + 2 * kTile * kStages;
  static constexpr size_t kTile8 = static_cast<size_t>(kBK) * D;
  static constexpr size_t kKeyRows = kStaging + (kFp8 ? 2 * 2 * kTile8 : 0);
  static constexpr size_t kBytes = kKeyRows + 2 * sizeof(int32_t) * kBK;
  static_assert(kTile % 16 == 0 && kKV % 16 == 0, "16-byte aligned tiles");
};

template <typename T, typename C>
struct MmaParams {
  const T* q;
  int64_t q_stride;
  const C* k_cache;  // [num_blocks, kv_heads, block_size, D]
  const C* v_cache;
  int kv_heads;
  int block_size;
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int max_blocks;
  const int32_t* cu_tokens;
  const int32_t* pos_begin;
  int heads;
  int group;
  float scale_log2;  // log2(e) / sqrt(D)
  T* out;            // [n_tokens, heads, D]
  // Key split (kv_splits > 1): grid.x = heads x kv_splits; block (h, tile, seq) of split s writes
  // rows [(s * blocks + b) * kBQ, + kBQ) of the partials, b = (seq * tiles + tile) * heads + h.
  int kv_splits;
  float* part_o;    // [kv_splits * blocks * kBQ, D]: O / l of the split's keys
  float* part_lse;  // [kv_splits * blocks * kBQ]: max + log2(l) in log2 units; -inf: no key seen
};

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: 2^x, exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace

// Threads per block when each warp owns kM m16 row tiles of a kBQ-row query tile.
template <int kM, int kBQ>
constexpr int kThreadsOf = kBQ / (16 * kM) * 32;

template <typename T, typename C, int D, int kM, int kBQ, int kBK>
static __global__ void __launch_bounds__(kThreadsOf<kM, kBQ>, 2)
    prefill_mma_kernel(const MmaParams<T, C> p) {
  wait_for_previous_grid();
  using L = MmaSmem<T, C, D, kBQ, kBK>;
  constexpr bool kFp8 = L::kFp8;
  constexpr int kLd = L::kLd;
  constexpr int kThreads = kThreadsOf<kM, kBQ>;
  static_assert(kThreads >= kBK, "a thread per key resolves the tile's cache rows");
  constexpr int kWarpRows = 16 * kM;
  constexpr int kQChunks = D / 8;                                // 16-byte pieces per Q/O row
  constexpr int kPieces = D * static_cast<int>(sizeof(C)) / 16;  // 16-byte pieces per cache row
  constexpr int kCPiece = 16 / static_cast<int>(sizeof(C));      // cache elements per piece
  constexpr int kRowStep = kThreads / kPieces;  // a thread's gather rows are this far apart
  constexpr int kGather = kBK / kRowStep;       // gather rows (of K and of V) per thread
  static_assert(kThreads % kPieces == 0 && kBK % kRowStep == 0, "tile gather must divide evenly");

  const int h = blockIdx.x % p.heads, split = blockIdx.x / p.heads;
  const int tile = gridDim.y - 1 - blockIdx.y;  // last tiles see the most keys: start them first
  const int seq = blockIdx.z;
  const int tok_begin = p.cu_tokens[seq];
  const int n_new = p.cu_tokens[seq + 1] - tok_begin;
  const int q0 = tile * kBQ;
  if (q0 >= n_new) return;
  const int rows = min(kBQ, n_new - q0);
  const int pos0 = p.pos_begin[seq] + q0;  // position of the tile's row 0
  const int kv_len = pos0 + rows;          // keys [0, kv_len) are visible to some row
  const int kvh = h / p.group;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;

  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Q tile (rows past the chunk are zeros), in the first cp.async group with K/V tile 0.
  for (int c = tid; c < kBQ * kQChunks; c += kThreads) {
    const int r = c / kQChunks, piece = c % kQChunks;
    T* dst = qs + r * kLd + piece * 8;
    if (r < rows) {
      cp_async16(dst, p.q + (tok_begin + q0 + r) * p.q_stride + h * D + piece * 8);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }

  // Cache rows (units of D elements, -1 past kv_len) of the keys of tiles kt + 1 (being requested)
  // and kt + 2 (written at the end of tile kt): thread j < kBK owns key j. Its block-table entry is
  // loaded a tile ahead and written only after the tile's compute, so neither the load nor the
  // gather waits on it, and the entry costs one register across the compute instead of kGather.
  int32_t* key_rows = reinterpret_cast<int32_t*>(smem + L::kKeyRows);  // [2][kBK]
  auto table_block = [&](int pos) -> int32_t {
    return tid < kBK && pos < kv_len ? table[pos / p.block_size] : 0;
  };
  auto key_row = [&](int pos, int32_t block) -> int32_t {
    return pos < kv_len ? (block * p.kv_heads + kvh) * p.block_size + pos % p.block_size : -1;
  };

  // Gather: thread tid copies piece tid % kPieces of rows tid / kPieces + i * kRowStep.
  const int g_row = tid / kPieces, g_piece = tid % kPieces;
  auto request = [&](int k0, int stage) {
    const int32_t* rows_of = key_rows + ((k0 / kBK) & 1) * kBK;
#pragma unroll
    for (int i = 0; i < kGather; ++i) {
      const int j = g_row + i * kRowStep;
      const int32_t row = rows_of[j];
      unsigned char* kd;
      unsigned char* vd;
      if constexpr (kFp8) {
        kd = smem + L::kStaging + (2 * stage) * L::kTile8 + j * D + g_piece * 16;
        vd = kd + L::kTile8;
      } else {
        kd = smem + L::kKV + (2 * stage) * L::kTile + (j * kLd) * sizeof(T) + g_piece * 16;
        vd = kd + L::kTile;
      }
      if (row >= 0) {
        const int64_t off = static_cast<int64_t>(row) * D + g_piece * kCPiece;
        cp_async16(kd, p.k_cache + off);
        cp_async16(vd, p.v_cache + off);
      } else {  // past the visible keys: zeros (V must not carry NaN garbage into 0 * v)
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // This block's key tiles [kt_begin, kt_end): all of them, or its split's share (possibly none).
  const int n_tiles = (kv_len + kBK - 1) / kBK;
  const int per_split = (n_tiles + p.kv_splits - 1) / p.kv_splits;
  const int kt_begin = min(n_tiles, split * per_split);
  const int kt_end = min(n_tiles, kt_begin + per_split);
  if (tid < kBK) {  // slots by the parity of the tile index, as in the loop
    const int k0 = kt_begin * kBK;
    key_rows[(kt_begin & 1) * kBK + tid] = key_row(k0 + tid, table_block(k0 + tid));
    key_rows[((kt_begin + 1) & 1) * kBK + tid] =
        key_row(k0 + kBK + tid, table_block(k0 + kBK + tid));
  }
  __syncthreads();
  if (kt_begin < kt_end) request(kt_begin * kBK, kt_begin & 1);
  cp_async_commit();

  // This lane's fragment rows: m-tile mt holds rows warp * kWarpRows + mt * 16 + lane / 4 (+ 8).
  const int quad = lane >> 2, tq = lane & 3;
  const int warp_first = pos0 + warp * kWarpRows;  // smallest / largest position of the warp
  const int warp_last = warp_first + kWarpRows - 1;
  const int qpos_lo = warp_first + quad;
  const bool warp_active = warp * kWarpRows < rows;

  float o[kM][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
  }
  float row_max[kM][2], row_sum[kM][2];  // running max of score * scale * log2(e); lane's sum
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  // ldmatrix row addresses (lane l supplies row l % 8 of matrix l / 8).
  const uint32_t q_base = smem_addr(
      qs + (warp * kWarpRows + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + (lane >> 4) * 8);
  const int k_lane_off = ((lane & 7) + (lane >> 4) * 8) * kLd + ((lane >> 3) & 1) * 8;
  const int v_lane_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * kLd + (lane >> 4) * 8;

  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int k0 = kt * kBK;
    if (kt + 1 < kt_end) request(k0 + kBK, (kt + 1) & 1);
    // Tile kt + 2's table entry: requested now, stored after the compute.
    const int32_t next_block = table_block(k0 + 2 * kBK + tid);
    cp_async_commit();  // possibly empty: keeps "all but the newest group" = tile kt
    cp_async_wait<1>();
    __syncthreads();  // tile kt (and Q) complete for every thread
    const int stage = kFp8 ? 0 : (kt & 1);
    if constexpr (kFp8) {
      // Staging (kt & 1) -> the T tiles: 16 fp8 values per piece, exact conversion.
      constexpr int kConv = 2 * kBK * D / 16;
#pragma unroll
      for (int c = tid; c < kConv; c += kThreads) {
        const int which = c / (kBK * D / 16), rest = c % (kBK * D / 16);
        const int j = rest / (D / 16), piece = rest % (D / 16);
        const auto pk = *reinterpret_cast<const Pack<C, 16>*>(
            smem + L::kStaging + (2 * (kt & 1) + which) * L::kTile8 + j * D + piece * 16);
        float x[16];
        unpack_float(pk, x);
        store_float<T, 16>(
            reinterpret_cast<T*>(smem + L::kKV + which * L::kTile) + j * kLd + piece * 16, x);
      }
      __syncthreads();
    }
    const T* ks = reinterpret_cast<const T*>(smem + L::kKV + (2 * stage) * L::kTile);
    const T* vs = reinterpret_cast<const T*>(smem + L::kKV + (2 * stage + 1) * L::kTile);

    if (warp_active && k0 <= warp_last) {
      // S = Q K^T: kWarpRows rows x 64 keys per warp, as kM x 8 m16n8 accumulators; each K
      // fragment serves the warp's kM row tiles.
      float s[kM][kBK / 8][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int n = 0; n < kBK / 8; ++n)
          s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      }
      const uint32_t k_base = smem_addr(ks + k_lane_off);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt)
          ldsm_x4(q_base + (mt * 16 * kLd + kk * 16) * sizeof(T), a[mt]);
#pragma unroll
        for (int np = 0; np < kBK / 16; ++np) {
          uint32_t b[4];
          ldsm_x4(k_base + (np * 16 * kLd + kk * 16) * sizeof(T), b);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma16816<T>(s[mt][2 * np], a[mt], b[0], b[1]);
            mma16816<T>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
      // Causal mask where some key of the tile lies past the warp's first row.
      if (k0 + kBK - 1 > warp_first) {
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
          for (int n = 0; n < kBK / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = k0 + n * 8 + 2 * tq + (e & 1);
              if (key > qpos_lo + mt * 16 + (e >> 1) * 8) s[mt][n][e] = -INFINITY;
            }
          }
        }
      }
      // Online softmax per row (mt, half = e >> 1): max over the 4 lanes of the row.
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kBK / 8; ++n)
            mx = fmaxf(mx, fmaxf(s[mt][n][2 * half], s[mt][n][2 * half + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(row_max[mt][half], mx * p.scale_log2);
          const float m_use = m_new == -INFINITY ? 0.f : m_new;      // no key yet: avoid inf - inf
          const float alpha = fast_exp2(row_max[mt][half] - m_use);  // 0 when the old max is -inf
          row_max[mt][half] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int n = 0; n < kBK / 8; ++n) {
#pragma unroll
            for (int e = 2 * half; e < 2 * half + 2; ++e) {
              s[mt][n][e] = fast_exp2(fmaf(s[mt][n][e], p.scale_log2, -m_use));
              sum += s[mt][n][e];
            }
          }
          row_sum[mt][half] = row_sum[mt][half] * alpha + sum;
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[mt][n][2 * half] *= alpha;
            o[mt][n][2 * half + 1] *= alpha;
          }
        }
      }
      // O += P V: P (rounded to T) from the S accumulators, 16 keys per k-step; each V fragment
      // serves the warp's kM row tiles.
      const uint32_t v_base = smem_addr(vs + v_lane_off);
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t a[kM][4];
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          a[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          a[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          a[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          a[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          ldsm_x4_trans(v_base + (kk * 16 * kLd + dp * 16) * sizeof(T), b);
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            mma16816<T>(o[mt][2 * dp], a[mt], b[0], b[1]);
            mma16816<T>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    if (tid < kBK) key_rows[(kt & 1) * kBK + tid] = key_row(k0 + 2 * kBK + tid, next_block);
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  cp_async_wait<0>();  // an empty split still has its Q copies in flight
  if (!warp_active) return;

  if (p.kv_splits > 1) {  // the split's O / l and max + log2 l, fp32, straight from the fragments
    const int64_t blocks = static_cast<int64_t>(p.heads) * gridDim.y * gridDim.z;
    const int64_t row0 =
        (split * blocks + (static_cast<int64_t>(seq) * gridDim.y + tile) * p.heads + h) * kBQ;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float l = row_sum[mt][half];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int64_t row = row0 + warp * kWarpRows + mt * 16 + half * 8 + quad;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        float* dst = p.part_o + row * D + 2 * tq;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          *reinterpret_cast<float2*>(dst + n * 8) =
              make_float2(o[mt][n][2 * half] * inv, o[mt][n][2 * half + 1] * inv);
        }
        if (tq == 0) p.part_lse[row] = l > 0.f ? row_max[mt][half] + __log2f(l) : -INFINITY;
      }
    }
    return;
  }

  // O / l into the warp's own Q rows (only this warp reads them), then 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    T* orow = qs + (warp * kWarpRows + mt * 16 + quad) * kLd + 2 * tq;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float l = row_sum[mt][half];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.f / l;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(orow + half * 8 * kLd + n * 8) =
            pack2<T>(o[mt][n][2 * half] * inv, o[mt][n][2 * half + 1] * inv);
      }
    }
  }
  __syncwarp();
  T* out = p.out + (static_cast<int64_t>(tok_begin) + q0) * p.heads * D + h * D;
  for (int idx = lane; idx < kWarpRows * kQChunks; idx += 32) {
    const int row = warp * kWarpRows + idx / kQChunks, piece = idx % kQChunks;
    if (row < rows) {
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * p.heads * D + piece * 8) =
          *reinterpret_cast<const uint4*>(qs + row * kLd + piece * 8);
    }
  }
}

// Combines the key splits by log-sum-exp: row r's output is sum_s 2^(lse_s - M) O_s / sum_s
// 2^(lse_s - M), M = max_s lse_s (split 0 holds key 0, which every row sees, so M is finite).
// Grid (heads, query tiles x kBQ / kMergeRows, seqs), a thread per 4 columns of a row: one pass of
// independent loads per split, short enough that the merge does not undo the split's gain.
constexpr int kMergeRows = 8;

template <typename T, typename C, int D, int kBQ>
static __global__ void __launch_bounds__(kMergeRows* D / 4)
    prefill_merge_kernel(const MmaParams<T, C> p) {
  wait_for_previous_grid();
  constexpr int kGroups = kBQ / kMergeRows;  // row groups per query tile
  const int h = blockIdx.x, tile = blockIdx.y / kGroups, seq = blockIdx.z;
  const int r = (blockIdx.y % kGroups) * kMergeRows + threadIdx.x / (D / 4);
  const int c = (threadIdx.x % (D / 4)) * 4;
  const int tok_begin = p.cu_tokens[seq];
  const int q0 = tile * kBQ;
  if (q0 + r >= p.cu_tokens[seq + 1] - tok_begin) return;
  const int64_t tiles = gridDim.y / kGroups;
  const int64_t split_rows = static_cast<int64_t>(p.heads) * tiles * gridDim.z * kBQ;
  const int64_t row0 = ((static_cast<int64_t>(seq) * tiles + tile) * p.heads + h) * kBQ + r;
  float m = -INFINITY;
#pragma unroll 4
  for (int s = 0; s < p.kv_splits; ++s) m = fmaxf(m, p.part_lse[s * split_rows + row0]);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float wsum = 0.f;
#pragma unroll 4
  for (int s = 0; s < p.kv_splits; ++s) {
    const int64_t row = s * split_rows + row0;
    const float w = exp2f(p.part_lse[row] - m);  // 0 for a split that saw no key
    const float4 v = *reinterpret_cast<const float4*>(p.part_o + row * D + c);
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
    wsum += w;
  }
  const float inv = 1.f / wsum;
  *reinterpret_cast<uint2*>(p.out + (static_cast<int64_t>(tok_begin) + q0 + r) * p.heads * D +
                            h * D + c) =
      make_uint2(pack2<T>(acc.x * inv, acc.y * inv), pack2<T>(acc.z * inv, acc.w * inv));
}

template <typename T, typename C, int D, int kM, int kBQ, int kBK>
static cudaError_t run_prefill_mma(MmaParams<T, C> p, const PrefillAttentionArgs<T, C>& a,
                                   int splits, cudaStream_t stream) {
  constexpr size_t bytes = MmaSmem<T, C, D, kBQ, kBK>::kBytes;
  cudaError_t err =
      cudaFuncSetAttribute(prefill_mma_kernel<T, C, D, kM, kBQ, kBK>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  const unsigned tiles = static_cast<unsigned>(ceil_div(a.max_new_tokens, kBQ));
  p.kv_splits = splits;
  if (splits > 1) {  // the workspace was checked by the caller
    const int64_t split_blocks = int64_t{a.heads} * tiles * a.num_seqs * splits;
    p.part_o = static_cast<float*>(a.workspace);
    p.part_lse = p.part_o + split_blocks * kBQ * D;
  }
  const dim3 grid(a.heads * splits, tiles, a.num_seqs);
  launch_kernel(prefill_mma_kernel<T, C, D, kM, kBQ, kBK>, grid, kThreadsOf<kM, kBQ>, bytes, stream,
                p);
  if (splits > 1) {
    launch_kernel(prefill_merge_kernel<T, C, D, kBQ>,
                  dim3(a.heads, tiles * (kBQ / kMergeRows), a.num_seqs), kMergeRows * D / 4, 0,
                  stream, p);
  }
  return cudaGetLastError();
}

// Multiprocessors of the current device (an attribute query: cheap, no synchronisation).
inline int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    return 132;  // an H200's, should the query fail (the launch then reports the error)
  }
  return n;
}

// 128-query tiles (4 warps of 32 rows), unless that leaves fewer blocks than the 2 per
// multiprocessor that fit (a short chunk, few heads): then 64-query tiles (4 warps of 16 rows),
// twice the blocks. Measured on one H200 (benchmarks/kernels/NOTES.md): 32 rows per warp ran
// 2048 causal tokens at 252 TFLOP/s where 16 rows per warp (8 warps, 128 registers) ran 237 and
// 32 rows with 32-key tiles 241; 512 new tokens at context 2048 (128 blocks of 128 rows) went
// from 130 to 183 TFLOP/s with 64-row tiles.
template <typename T, typename C, int D>
static cudaError_t run_prefill_mma(const MmaParams<T, C>& p, const PrefillAttentionArgs<T, C>& a,
                                   cudaStream_t stream) {
  const int sms = sm_count();
  const int64_t blocks128 =
      static_cast<int64_t>(a.heads) * ceil_div(a.max_new_tokens, 128) * a.num_seqs;
  const bool small = a.mma_query_tile == 0 ? blocks128 < 2 * sms : a.mma_query_tile == 64;
  const int bq = small ? 64 : 128;
  const int64_t blocks = int64_t{a.heads} * ceil_div(a.max_new_tokens, bq) * a.num_seqs;
  const bool automatic = a.mma_kv_splits == 0;
  int splits =
      automatic ? (small ? plan_prefill_kv_splits(blocks, a.max_kv_len, sms) : 1) : a.mma_kv_splits;
  const size_t need = attention_prefill_split_bytes(blocks * splits, bq, D);
  const bool fits = a.workspace != nullptr && a.workspace_bytes >= need;
  if (automatic && !fits) splits = 1;  // no (or a smaller) workspace: one block per query tile
  LLAMA2_LAUNCH_REQUIRE(splits == 1 || fits, "mma_kv_splits " + std::to_string(splits) + " needs " +
                                                 std::to_string(need) + " workspace bytes, given " +
                                                 std::to_string(a.workspace_bytes));
  if (small) return run_prefill_mma<T, C, D, 1, 64, 64>(p, a, splits, stream);
  return run_prefill_mma<T, C, D, 2, 128, 64>(p, a, splits, stream);
}

int plan_prefill_kv_splits(int64_t blocks, int max_kv_len, int sm_count) {
  if (max_kv_len <= 0 || blocks <= 0 || 2 * blocks > sm_count) return 1;
  const int64_t tiles = ceil_div(max_kv_len, 64);  // the mma kernel's key tiles
  const int64_t want = std::min<int64_t>({kPrefillMaxKvSplits, 2 * sm_count / blocks, tiles / 2});
  if (want < 2) return 1;
  return static_cast<int>(ceil_div(tiles, ceil_div(tiles, want)));
}

size_t attention_prefill_split_bytes(int64_t split_blocks, int query_tile, int head_dim) {
  return static_cast<size_t>(split_blocks) * query_tile * (head_dim + 1) * sizeof(float);
}

size_t attention_prefill_workspace_bytes(int head_dim) {
  return attention_prefill_split_bytes(2 * int64_t{sm_count()}, 64, head_dim);
}

template <typename T, typename C>
cudaError_t launch_attention_prefill_mma(const PrefillAttentionArgs<T, C>& a, cudaStream_t stream) {
  static_assert(sizeof(T) == 2, "fp16/bf16 activations only");
  MmaParams<T, C> p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.k_cache = a.cache.k;
  p.v_cache = a.cache.v;
  p.kv_heads = a.cache.kv_heads;
  p.block_size = a.cache.block_size;
  p.block_tables = a.block_tables;
  p.max_blocks = a.max_blocks;
  p.cu_tokens = a.cu_tokens;
  p.pos_begin = a.pos_begin;
  p.heads = a.heads;
  p.group = a.heads / a.cache.kv_heads;
  // 1/sqrt(d) as llama2::cpu::paged_attention, times log2(e) so that exp(x) = exp2(x log2 e).
  p.scale_log2 =
      static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(a.cache.head_dim)));
  p.out = a.out;
  return a.cache.head_dim == 64 ? run_prefill_mma<T, C, 64>(p, a, stream)
                                : run_prefill_mma<T, C, 128>(p, a, stream);
}

#define LLAMA2_INSTANTIATE(T, C)                                                             \
  template cudaError_t launch_attention_prefill_mma<T, C>(const PrefillAttentionArgs<T, C>&, \
                                                          cudaStream_t);
LLAMA2_INSTANTIATE(__half, __half)
LLAMA2_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
LLAMA2_INSTANTIATE(__half, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE(__nv_bfloat16, __nv_fp8_e4m3)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
