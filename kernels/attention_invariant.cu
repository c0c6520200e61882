#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "common/check.h"
#include "kernels/attention_invariant.cuh"
#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {
namespace {

constexpr int kKeyTile = 32;  // keys per tile: one per lane when scoring
constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kQueryTile = kWarps * kRowsPerWarp;  // query rows per block

// The block's shared tiles. K rows are padded by 2 elements (4 bytes) so that 32 lanes reading
// the same column of 32 different rows hit 32 banks; V is read along a row (lane = columns).
template <typename T, int D>
struct Smem {
  float q[kQueryTile][D];
  T k[kKeyTile][D + 2];
  T v[kKeyTile][D];
};

// One row's state: running max, rescaled exp-sum and this lane's D / 32 output columns.
template <int D>
struct RowState {
  float m = -INFINITY, l = 0.f;
  float acc[D / 32] = {};
};

// K and V of keys [t0, t0 + n) of KV head g into shared memory, 16 bytes per load.
template <typename T, int D>
__device__ __forceinline__ void load_kv_tile(const InvariantAttentionArgs<T>& a, int s, int g,
                                             int t0, int n, Smem<T, D>& sm) {
  constexpr int kPieces = D / 8;  // 16-byte pieces per row
  const PagedKvCache<T>& c = a.cache;
  const int32_t* table = a.block_tables + static_cast<int64_t>(s) * a.max_blocks;
  for (int i = threadIdx.x; i < n * kPieces; i += blockDim.x) {
    const int j = i / kPieces, piece = i % kPieces, p = t0 + j;
    const int64_t row =
        (static_cast<int64_t>(table[p / c.block_size]) * c.kv_heads + g) * c.block_size +
        p % c.block_size;
    const uint4 kv = *reinterpret_cast<const uint4*>(c.k + row * D + piece * 8);
    const uint4 vv = *reinterpret_cast<const uint4*>(c.v + row * D + piece * 8);
    // The padded K row is only 4-byte aligned.
    uint32_t* kd = reinterpret_cast<uint32_t*>(&sm.k[j][piece * 8]);
    kd[0] = kv.x;
    kd[1] = kv.y;
    kd[2] = kv.z;
    kd[3] = kv.w;
    *reinterpret_cast<uint4*>(&sm.v[j][piece * 8]) = vv;
  }
}

// One row's update for keys [t0, t0 + nk) of the tile in shared memory (nk <= 32, the keys at or
// before the row's position): the fixed arithmetic of attention_invariant.cuh. Every rounding step
// is spelled out (fmaf, __fmul_rn, __fsub_rn, __fdiv_rn: never contracted into an fma by the
// compiler), so the numbers cannot depend on how the code around them was compiled.
template <typename T, int D>
__device__ __forceinline__ void update_row(const Smem<T, D>& sm, int r, int nk, float scale,
                                           RowState<D>& st) {
  const int lane = threadIdx.x & 31;
  float score = -INFINITY;
  if (lane < nk) {
    float dot = 0.f;
#pragma unroll 8
    for (int c = 0; c < D; c += 2) {
      float k2[2];
      load_float<T, 2>(&sm.k[lane][c], k2);
      dot = fmaf(sm.q[r][c], k2[0], dot);
      dot = fmaf(sm.q[r][c + 1], k2[1], dot);
    }
    score = __fmul_rn(dot, scale);
  }
  const float m_new = fmaxf(st.m, warp_max(score));  // finite: key 0 of the tile is the row's
  const float alpha = expf(__fsub_rn(st.m, m_new));  // 0 on the first tile (m = -inf)
  const float p = lane < nk ? expf(__fsub_rn(score, m_new)) : 0.f;
  st.l = fmaf(st.l, alpha, warp_sum(p));
  st.m = m_new;
  constexpr int kCols = D / 32;
#pragma unroll
  for (int e = 0; e < kCols; ++e) st.acc[e] = __fmul_rn(st.acc[e], alpha);
  for (int j = 0; j < nk; ++j) {
    const float pj = __shfl_sync(kFullMask, p, j);
    float v[kCols];
    load_float<T, kCols>(&sm.v[j][lane * kCols], v);
#pragma unroll
    for (int e = 0; e < kCols; ++e) st.acc[e] = fmaf(pj, v[e], st.acc[e]);
  }
}

// The same update for all kRowsPerWarp rows of the warp (sm.q rows warp + kWarps i) at once, row i
// taking keys [t0, t0 + nk[i]) (nk[i] = 0: none). Each row's arithmetic is update_row's, step for
// step (every rounding explicit, in the same order), so the numbers are the same; the rows only
// share the shared-memory loads of each K pair and V piece (the prefill case: 4 rows, 1 load).
template <typename T, int D>
__device__ __forceinline__ void update_rows(const Smem<T, D>& sm, int warp,
                                            const int (&nk)[kRowsPerWarp], float scale,
                                            RowState<D> (&st)[kRowsPerWarp]) {
  const int lane = threadIdx.x & 31;
  float dot[kRowsPerWarp] = {};  // garbage for rows without keys and lanes past nk: not used
#pragma unroll 8
  for (int c = 0; c < D; c += 2) {
    float k2[2];
    load_float<T, 2>(&sm.k[lane][c], k2);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const float* q = sm.q[warp + kWarps * i];
      dot[i] = fmaf(q[c], k2[0], dot[i]);
      dot[i] = fmaf(q[c + 1], k2[1], dot[i]);
    }
  }
  constexpr int kCols = D / 32;
  float p[kRowsPerWarp];
  int n_max = 0;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    p[i] = 0.f;
    if (nk[i] == 0) continue;  // warp-uniform
    n_max = max(n_max, nk[i]);
    const float score = lane < nk[i] ? __fmul_rn(dot[i], scale) : -INFINITY;
    const float m_new = fmaxf(st[i].m, warp_max(score));
    const float alpha = expf(__fsub_rn(st[i].m, m_new));
    p[i] = lane < nk[i] ? expf(__fsub_rn(score, m_new)) : 0.f;
    st[i].l = fmaf(st[i].l, alpha, warp_sum(p[i]));
    st[i].m = m_new;
#pragma unroll
    for (int e = 0; e < kCols; ++e) st[i].acc[e] = __fmul_rn(st[i].acc[e], alpha);
  }
  for (int j = 0; j < n_max; ++j) {
    float v[kCols];
    load_float<T, kCols>(&sm.v[j][lane * kCols], v);
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      if (j >= nk[i]) continue;  // warp-uniform
      const float pj = __shfl_sync(kFullMask, p[i], j);
#pragma unroll
      for (int e = 0; e < kCols; ++e) st[i].acc[e] = fmaf(pj, v[e], st[i].acc[e]);
    }
  }
}

template <typename T, int D>
static __global__ void __launch_bounds__(kWarps * 32)
    attention_invariant_kernel(const InvariantAttentionArgs<T> a) {
  __shared__ __align__(16) Smem<T, D> sm;
  const int s = blockIdx.z, h = blockIdx.y, tile_row0 = blockIdx.x * kQueryTile;
  wait_for_previous_grid();
  const int first = a.cu_tokens[s], n_new = a.cu_tokens[s + 1] - first;
  if (tile_row0 >= n_new) return;
  const int rows = min(kQueryTile, n_new - tile_row0);
  const int pos0 = a.pos_begin[s] + tile_row0, ctx = a.context_lens[s];
  const int g = h / (a.heads / a.cache.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    sm.q[r][c] = to_float(a.q[(first + tile_row0 + r) * a.q_stride + h * D + c]);
  }
  // Keys [0, kv_end): up to the block's last row that lies inside its sequence's context.
  const int kv_end = min(ctx, pos0 + rows);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  RowState<D> st[kRowsPerWarp];
  for (int t0 = 0; t0 < kv_end; t0 += kKeyTile) {
    __syncthreads();  // q is stored; the previous tile is consumed
    load_kv_tile<T, D>(a, s, g, t0, min(kKeyTile, kv_end - t0), sm);
    __syncthreads();
    // Row i's keys in this tile (0: none; warp-uniform). One row (a decoding sequence's block):
    // update_row; more: update_rows, the same arithmetic with the K/V loads shared.
    int nk[kRowsPerWarp], active = 0, last = 0;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + kWarps * i, pos = pos0 + r;
      nk[i] = r >= rows || pos >= ctx || t0 > pos ? 0 : min(kKeyTile, pos + 1 - t0);
      if (nk[i] > 0) {
        ++active;
        last = i;
      }
    }
    if (active > 1) {
      update_rows<T, D>(sm, warp, nk, scale, st);
    } else if (active == 1) {
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {  // constant indices keep st in registers
        if (i == last) update_row<T, D>(sm, warp + kWarps * i, nk[i], scale, st[i]);
      }
    }
  }
  constexpr int kCols = D / 32;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + kWarps * i;
    if (r >= rows) continue;
    const bool live = pos0 + r < ctx;
    float o[kCols];
#pragma unroll
    for (int e = 0; e < kCols; ++e) o[e] = live ? __fdiv_rn(st[i].acc[e], st[i].l) : 0.f;
    store_float<T, kCols>(
        a.out + (static_cast<int64_t>(first + tile_row0 + r) * a.heads + h) * D + lane * kCols, o);
  }
}

}  // namespace

template <typename T>
cudaError_t launch_attention_invariant(const InvariantAttentionArgs<T>& a, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(a.num_seqs >= 0 && a.max_new_tokens >= 0,
                        "num_seqs " + std::to_string(a.num_seqs) + ", max_new_tokens " +
                            std::to_string(a.max_new_tokens));
  if (a.num_seqs == 0 || a.max_new_tokens == 0) return cudaSuccess;
  const PagedKvCache<T>& c = a.cache;
  LLAMA2_LAUNCH_REQUIRE(c.head_dim == 64 || c.head_dim == 128,
                        "head_dim " + std::to_string(c.head_dim) + " (64 or 128)");
  LLAMA2_LAUNCH_REQUIRE(
      a.heads > 0 && c.kv_heads > 0 && a.heads % c.kv_heads == 0,
      "heads " + std::to_string(a.heads) + ", kv_heads " + std::to_string(c.kv_heads));
  LLAMA2_LAUNCH_REQUIRE(c.block_size > 0 && a.max_blocks > 0,
                        "block_size " + std::to_string(c.block_size));
  LLAMA2_LAUNCH_REQUIRE(a.q != nullptr && a.out != nullptr && c.k != nullptr && c.v != nullptr &&
                            a.block_tables != nullptr && a.cu_tokens != nullptr &&
                            a.pos_begin != nullptr && a.context_lens != nullptr,
                        "");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(c.k, 16) && is_aligned(c.v, 16) && is_aligned(a.out, 16),
                        "the cache and out must be 16-byte aligned");
  const dim3 grid((a.max_new_tokens + kQueryTile - 1) / kQueryTile, a.heads, a.num_seqs);
  const cudaError_t e = c.head_dim == 64 ? launch_kernel(attention_invariant_kernel<T, 64>, grid,
                                                         dim3(kWarps * 32), 0, stream, a)
                                         : launch_kernel(attention_invariant_kernel<T, 128>, grid,
                                                         dim3(kWarps * 32), 0, stream, a);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template cudaError_t launch_attention_invariant<__half>(const InvariantAttentionArgs<__half>&,
                                                        cudaStream_t);
template cudaError_t launch_attention_invariant<__nv_bfloat16>(
    const InvariantAttentionArgs<__nv_bfloat16>&, cudaStream_t);

}  // namespace llama2::kernels
