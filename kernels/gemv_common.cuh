// Pieces shared by the GEMV kernels (kernels/gemv.cu: weights in T and the generic conversion
// path; kernels/gemv_w8.cu: 1-byte weights with cheap conversions). Device code, internal to the
// kernel family: the launchers are declared in kernels/gemv.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"
#include "kernels/reduce.cuh"
#include "kernels/rope_math.cuh"

namespace llama2::kernels::gemv_detail {

constexpr int kWarps = 8;
// Plain products with at most this many rows of W give each warp one row (R = 1) instead of two:
// o_proj and down_proj of 7B (4096 rows) then fill 512 blocks instead of 256, and the loop is
// unrolled twice as far, so each SM keeps as many bytes in flight as on the larger matrices.
constexpr int kOneRowMaxN = 8192;

// Before its wait for the previous kernel (dtype.cuh: PDL), a GEMV warp may ask L2 for the
// first `bytes` of each of its rows of W: the weights do not depend on the previous kernel, and
// the o projection (16-32 MB read in ~4-11 us) reached only 58-68% of HBM bandwidth in
// llama2_bench_kernels qgemv (2026-12-02), a cold stream's ramp. The host splits a budget per
// launch over the rows (prefetch_row_bytes; LLAMA2_GEMV_PREFETCH_KB, default 0: measured slower).
inline int prefetch_row_bytes(int64_t row_bytes, int64_t rows) {
  const int64_t budget = gemv_prefetch_budget();
  if (budget <= 0 || rows <= 0) return 0;
  const int64_t cap = budget / rows;
  return static_cast<int>((row_bytes < cap ? row_bytes : cap) & ~int64_t{15});
}

__device__ __forceinline__ void prefetch_rows(const void* w0, const void* w1, bool two, int bytes) {
  if (bytes <= 0) return;
  prefetch_l2(w0, static_cast<uint32_t>(bytes));
  if (two) prefetch_l2(w1, static_cast<uint32_t>(bytes));
}

// GemvFusion as a kernel's template argument F (a bit set): the input norm, the residual add,
// the RoPE + KV-cache epilogue.
constexpr int kFuseNorm = 1;
constexpr int kFuseAdd = 2;
constexpr int kFuseRope = 4;
template <typename T>
int fusion_bits(const GemvFusion<T>& f) {
  return (f.norm_weight != nullptr ? kFuseNorm : 0) | (f.add_to_y ? kFuseAdd : 0) |
         (f.rope.on() ? kFuseRope : 0);
}

// f(std::integral_constant<int, F>{}) for the runtime bit set F (kGateUp: the norm only; the
// RoPE epilogue with or without the norm, never with the add). The launcher has rejected the
// other sets.
template <bool kGateUp, typename Fn>
void with_fusion(int bits, Fn&& f) {
  switch (bits) {
    case kFuseNorm:
      return f(std::integral_constant<int, kFuseNorm>{});
    case kFuseAdd:
      if constexpr (!kGateUp) return f(std::integral_constant<int, kFuseAdd>{});
      break;
    case kFuseNorm | kFuseAdd:
      if constexpr (!kGateUp) return f(std::integral_constant<int, kFuseNorm | kFuseAdd>{});
      break;
    case kFuseRope:
      if constexpr (!kGateUp) return f(std::integral_constant<int, kFuseRope>{});
      break;
    case kFuseNorm | kFuseRope:
      if constexpr (!kGateUp) return f(std::integral_constant<int, kFuseNorm | kFuseRope>{});
      break;
    default:
      break;
  }
  return f(std::integral_constant<int, 0>{});
}

// kFuseNorm's prologue: rmsnorm(x) * weight of the row x [K] into out [K] (shared memory), every
// value as launch_rmsnorm / launch_add_rmsnorm (kernels/rmsnorm.cu) write it, bit for bit. That
// kernel runs a row on row_threads(K / V) <= 512 threads, each summing the squares of its 16-byte
// pieces i, i + threads, ... in order, then block_sum; this block of 256 plays those threads (t
// and t + 256), so every partial sum is the same number added in the same order. Every thread of
// the block must call it (two barriers).
template <typename T>
__device__ __forceinline__ void rmsnorm_row_to_shared(const T* __restrict__ x,
                                                      const T* __restrict__ weight, int K,
                                                      float eps, T* out) {
  static_assert(kWarps == 8, "256 threads play up to 512");
  constexpr int V = kVec16<T>;
  const int n_vec = K / V;
  const int vthreads = n_vec >= 512 ? 512 : (n_vec + 31) / 32 * 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float ss[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int vt = static_cast<int>(threadIdx.x) + h * 256;  // the thread played
    for (int i = vt; vt < vthreads && i < n_vec; i += vthreads) {
      float v[V];
      load_float<T, V>(x + i * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) ss[h] += v[e] * v[e];
    }
  }
  __shared__ float partial[2 * kWarps];  // [virtual warp]: warp w's first half, then its second
  const float a = warp_sum(ss[0]), b = warp_sum(ss[1]);
  if (lane == 0) {
    partial[warp] = a;
    partial[kWarps + warp] = b;
  }
  __syncthreads();
  const float total = warp_sum(lane < vthreads / 32 ? partial[lane] : 0.f);
  const float inv = 1.f / sqrtf(total / static_cast<float>(K) + eps);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int vt = static_cast<int>(threadIdx.x) + h * 256;
    for (int i = vt; vt < vthreads && i < n_vec; i += vthreads) {
      float v[V], w[V];
      load_float<T, V>(x + i * V, v);
      load_float<T, V>(weight + i * V, w);
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] = w[e] * round_to<T>(v[e] * inv);
      store_float<T, V>(out + i * V, v);
    }
  }
  __syncthreads();
}

// A warp's rows of W: n0 (its output; kGateUp: the gate row), n1 (kGateUp: the up row N + n0;
// kPairs, the RoPE epilogue: n0 + half of the same head; R = 2 otherwise: n0 + 1, or n0 again for
// a lone last row, read twice and written once) and w0 / w1. kPairs: warp j of the grid takes
// head j / half, rows i and i + half with i = j % half (half = head_dim / 2); N / 2 warps.
template <typename W, bool kGateUp, int R, bool kPairs = false>
struct WarpRows {
  int n0, n1;
  bool two;  // n1 is a row of its own
  const W* w0;
  const W* w1;
  __device__ __forceinline__ WarpRows(const W* w, int N, int K, int half = 0) {
    static_assert(!kPairs || (R == 2 && !kGateUp), "pairs: two rows of a plain product");
    const int warp = static_cast<int>(threadIdx.x >> 5);
    if constexpr (kPairs) {
      const int j = blockIdx.x * kWarps + warp;
      n0 = j / half * 2 * half + j % half;
      n1 = n0 + half;
      two = true;
    } else {
      n0 = kGateUp ? blockIdx.x * kWarps + warp : (blockIdx.x * kWarps + warp) * R;
      two = kGateUp || (R == 2 && n0 + 1 < N);
      n1 = kGateUp ? N + n0 : (two ? n0 + 1 : n0);
    }
    w0 = w + static_cast<int64_t>(n0) * K;
    w1 = w + static_cast<int64_t>(n1) * K;
  }
};

// The start of every GEMV kernel after its rows are known: the L2 prefetch of the warp's rows
// (when active, before the wait), the wait for the previous kernel, then x as the loop reads it:
// the caller's rows, or (kFuseNorm) the normalized row in shared memory. Every thread calls it.
template <typename X, typename T, typename W, int F>
__device__ __forceinline__ const X* gemv_begin(const X* x, const W* w0, const W* w1, bool active,
                                               bool two, int K, int prefetch,
                                               const GemvFusion<T>& fuse) {
  if (active && (threadIdx.x & 31) == 0) prefetch_rows(w0, w1, two, prefetch);
  wait_for_previous_grid();
  if constexpr ((F & kFuseNorm) != 0) {
    static_assert(std::is_same_v<X, T>, "the fused norm reads x in T");
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    T* xs = reinterpret_cast<T*>(gemv_smem);  // [K]
    rmsnorm_row_to_shared<T>(x, fuse.norm_weight, K, fuse.norm_eps, xs);
    return xs;
  }
  return x;
}

// The end of every GEMV kernel: warp sums of acc times factor(m, row of W), stored to y (plain;
// kAdd: added to y, rounded as the residual add of launch_add_rmsnorm) or through SwiGLU
// (kGateUp: acc[0] is gate row n0, acc[1] up row n1 = N + n0).
template <typename T, int M, bool kGateUp, int R, bool kAdd = false, typename Factor>
__device__ __forceinline__ void store_rows(float (&acc)[R][M], const Factor& factor, T* y, int N,
                                           int n0, int n1, bool two, int lane) {
  if constexpr (kGateUp) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float g = round_to<T>(warp_sum(acc[0][m]) * factor(m, n0));
      const float u = round_to<T>(warp_sum(acc[R - 1][m]) * factor(m, n1));
      if (lane == m) y[static_cast<int64_t>(m) * N + n0] = from_float<T>(silu_mul<T>(g, u));
    }
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float s = warp_sum(acc[r][m]);
        // Lane (r * M + m) writes one output: the stores of a warp go out together.
        if (lane == r * M + m && (r == 0 || two)) {
          T& out = y[static_cast<int64_t>(m) * N + n0 + r];
          if constexpr (kAdd) {
            out = from_float<T>(to_float(out) + round_to<T>(s * factor(m, n0 + r)));
          } else {
            out = from_float<T>(s * factor(m, n0 + r));
          }
        }
      }
    }
  }
}

// kFuseRope's end (GemvRopeKv): the warp's rows are the pair (n0, n1 = n0 + D/2) of one head of
// the token's [q | k | v] row. Each sum is rounded to T as store_rows stores it, then q and k
// are rotated as launch_rope_kv rotates the T values it loads (rope_math.cuh), q is stored in y
// and k / v in the cache (an e4m3 cache: K rounded to T first, V from its T value), so the
// numbers are the unfused path's, bit for bit.
template <typename T, typename Factor>
__device__ __forceinline__ void store_rope(float (&acc)[2][1], const Factor& factor, T* y, int n0,
                                           int n1, int lane, const GemvRopeKv& r) {
  const float a = round_to<T>(warp_sum(acc[0][0]) * factor(0, n0));
  const float b = round_to<T>(warp_sum(acc[1][0]) * factor(0, n1));
  if (lane != 0) return;
  const int D = r.head_dim, half = D / 2, head = n0 / D, i = n0 - head * D;
  const bool is_q = head < r.heads, is_k = !is_q && head < r.heads + r.kv_heads;
  float x = a, z = b;
  if (is_q || is_k) {
    const int pos = *r.pos;
    float c = NAN, s = NAN;  // past the table: NaN rows, never a silently wrong angle
    if (pos >= 0 && pos < r.table_positions) {
      const float2 cs = r.table[static_cast<int64_t>(pos) * half + i];
      c = cs.x;
      s = cs.y;
    }
    rope_rotate(a, b, c, s, x, z);
  }
  if (is_q) {
    y[n0] = from_float<T>(x);
    y[n1] = from_float<T>(z);
    return;
  }
  const int slot = *r.slot;
  if (slot < 0) return;  // a padding token: q only
  const int g = head - r.heads - (is_k ? 0 : r.kv_heads);
  const int64_t row = ((static_cast<int64_t>(slot / r.block_size) * r.kv_heads + g) * r.block_size +
                       slot % r.block_size) *
                      D;
  void* cache = is_k ? r.k_cache : r.v_cache;
  if (r.cache_e4m3) {
    __nv_fp8_e4m3* c8 = static_cast<__nv_fp8_e4m3*>(cache) + row;
    c8[i] = from_float<__nv_fp8_e4m3>(round_to<T>(x));
    c8[i + half] = from_float<__nv_fp8_e4m3>(round_to<T>(z));
  } else {
    T* ct = static_cast<T*>(cache) + row;
    ct[i] = from_float<T>(x);
    ct[i + half] = from_float<T>(z);
  }
}

// The end of a GEMV kernel with fusions F: store_rope for kFuseRope, else store_rows.
template <typename T, int M, bool kGateUp, int R, int F, typename Factor>
__device__ __forceinline__ void gemv_end(float (&acc)[R][M], const Factor& factor, T* y, int N,
                                         int n0, int n1, bool two, int lane,
                                         const GemvFusion<T>& fuse) {
  if constexpr ((F & kFuseRope) != 0) {
    static_assert(M == 1 && R == 2 && !kGateUp, "the RoPE epilogue: one row, row pairs");
    store_rope<T>(acc, factor, y, n0, n1, lane, fuse.rope);
  } else {
    store_rows<T, M, kGateUp, R, (F & kFuseAdd) != 0>(acc, factor, y, N, n0, n1, two, lane);
  }
}

// The W8A16 GEMV with cheap conversions (kernels/gemv_w8.cu): W int8 or e4m3 with one scale per
// row, x in T (fp16 / bf16); half2 (T = __half only): f16x2 products summed over each 16-byte
// load of W, otherwise fp32 FMAs. Arguments as launch_gemv_q's, already checked by the caller.
template <typename T, typename W, bool kGateUp>
void launch_gemv_w8(const T* x, const W* w, const float* w_scale, T* y, int M, int N, int K,
                    bool half2, cudaStream_t stream, const GemvFusion<T>& fuse);

// f(std::integral_constant<int, M>{}) for the runtime M in 1..8 (the kernels are instantiated per
// M so that the accumulators stay in registers). The caller has checked 1 <= M <= kGemvMaxRows.
template <typename F>
void with_rows(int M, F&& f) {
  switch (M) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 5:
      return f(std::integral_constant<int, 5>{});
    case 6:
      return f(std::integral_constant<int, 6>{});
    case 7:
      return f(std::integral_constant<int, 7>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace llama2::kernels::gemv_detail
