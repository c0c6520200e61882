#include <climits>
#include <cmath>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"
#include "kernels/sampling.cuh"

namespace llama2::kernels {

namespace {
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// (a, ia) ranks before (b, ib): NaN first, then larger value, then lower index.
__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  const bool an = isnan(a), bn = isnan(b);
  if (an || bn) return an && (!bn || ia < ib);
  if (a != b) return a > b;
  return ia < ib;
}

// Monotone map of the order above onto uint32 (ties by index handled separately): NaN -> max,
// -0.0 -> +0.0's key, negative values below positive ones.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (isnan(x)) return 0xffffffffu;
  if (x == 0.f) x = 0.f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
}  // namespace

// V elements per load (16 bytes when the row allows it): a 32,000-entry row is then ~8 loads per
// thread, all in flight together (one element per load left a chain of ~63 dependent loads, 22.7
// us of a 2.5 ms fp8 batch-1 step, ncu 2026-12-02). The result does not depend on the order in
// which elements are visited (ties go to the lower index), so V changes no output.
template <typename T, int V>
static __global__ void __launch_bounds__(kThreads)
    argmax_kernel(const T* logits, int64_t ld, int n, int vocab_begin, float* out_value,
                  int32_t* out_index) {
  wait_for_previous_grid();
  __shared__ float s_val[kWarps];
  __shared__ int s_idx[kWarps];
  const int row = blockIdx.x;
  const T* x = logits + row * ld;
  float best = -INFINITY;
  int best_i = INT_MAX;  // loses to any real element, -inf included
#pragma unroll 4
  for (int i = threadIdx.x * V; i < n; i += kThreads * V) {
    float v[V];
    load_float<T, V>(x + i, v);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if (ranks_before(v[e], i + e, best, best_i)) {
        best = v[e];
        best_i = i + e;
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, best, o);
    const int oi = __shfl_xor_sync(kFullMask, best_i, o);
    if (ranks_before(ov, oi, best, best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (ranks_before(s_val[w], s_idx[w], best, best_i)) {
        best = s_val[w];
        best_i = s_idx[w];
      }
    }
    out_value[row] = best;
    out_index[row] = best_i == INT_MAX ? -1 : vocab_begin + best_i;
  }
}

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    topk_kernel(const T* logits, int64_t ld, int n, int vocab_begin, int k, float* out_values,
                int32_t* out_indices) {
  wait_for_previous_grid();
  __shared__ uint32_t s_hist[256];
  __shared__ int s_bin, s_need;
  __shared__ int s_warp_gt[kWarps], s_warp_eq[kWarps];
  __shared__ uint32_t s_key[kTopKMax];
  __shared__ float s_cval[kTopKMax];
  __shared__ int s_cidx[kTopKMax];

  const int row = blockIdx.x;
  const T* x = logits + row * ld;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kk = min(k, n);  // candidates that exist

  // ---- radix select of the kk-th largest key, 8 bits per pass from the top.
  uint32_t prefix = 0, mask = 0;
  int need = kk;  // how many of the keys matching `prefix` are still to be taken
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += kThreads) s_hist[b] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += kThreads) {
      const uint32_t key = order_key(to_float(x[i]));
      if ((key & mask) == prefix) atomicAdd(&s_hist[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int above = 0, b = 255;
      for (; b > 0; --b) {  // the keys matching prefix number >= need, so bin 0 is the last resort
        if (above + static_cast<int>(s_hist[b]) >= need) break;
        above += static_cast<int>(s_hist[b]);
      }
      s_bin = b;
      s_need = need - above;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s_bin) << shift;
    mask |= 0xffu << shift;
    need = s_need;
  }
  const uint32_t thr = prefix;  // the kk-th largest key
  const int n_gt = kk - need;   // keys strictly above thr (all taken); `need` ties at thr taken

  // ---- ordered compaction, chunk by chunk in index order, so ties keep the lowest indices.
  int base_gt = 0, base_eq = 0;  // identical in every thread
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int start = 0; start < n; start += kThreads) {
    const int i = start + tid;
    float v = 0.f;
    uint32_t key = 0;
    if (i < n) {
      v = to_float(x[i]);
      key = order_key(v);
    }
    const bool gt = i < n && key > thr;
    const bool eq = i < n && key == thr;
    const unsigned bal_gt = __ballot_sync(kFullMask, gt);
    const unsigned bal_eq = __ballot_sync(kFullMask, eq);
    if (lane == 0) {
      s_warp_gt[warp] = __popc(bal_gt);
      s_warp_eq[warp] = __popc(bal_eq);
    }
    __syncthreads();
    int off_gt = 0, off_eq = 0, tot_gt = 0, tot_eq = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) {
        off_gt += s_warp_gt[w];
        off_eq += s_warp_eq[w];
      }
      tot_gt += s_warp_gt[w];
      tot_eq += s_warp_eq[w];
    }
    if (gt) {
      const int slot = base_gt + off_gt + __popc(bal_gt & lanes_below);  // < n_gt by construction
      s_key[slot] = key;
      s_cval[slot] = v;
      s_cidx[slot] = i;
    }
    if (eq) {
      const int rank = base_eq + off_eq + __popc(bal_eq & lanes_below);
      if (rank < need) {
        s_key[n_gt + rank] = key;
        s_cval[n_gt + rank] = v;
        s_cidx[n_gt + rank] = i;
      }
    }
    base_gt += tot_gt;
    base_eq += tot_eq;
    __syncthreads();                                // s_warp_* are rewritten by the next chunk
    if (base_eq >= need && base_gt >= n_gt) break;  // uniform: every candidate is collected
  }
  __syncthreads();

  // ---- rank the kk candidates (distinct indices, so ranks are a permutation) and write them.
  float* vals = out_values + static_cast<int64_t>(row) * k;
  int32_t* idxs = out_indices + static_cast<int64_t>(row) * k;
  if (tid < kk) {
    const uint32_t my_key = s_key[tid];
    const int my_idx = s_cidx[tid];
    int rank = 0;
    for (int j = 0; j < kk; ++j) {
      rank += s_key[j] > my_key || (s_key[j] == my_key && s_cidx[j] < my_idx);
    }
    vals[rank] = s_cval[tid];
    idxs[rank] = vocab_begin + my_idx;
  } else if (tid < k) {
    vals[tid] = -INFINITY;
    idxs[tid] = -1;
  }
}

template <typename T>
cudaError_t launch_argmax(const T* logits, int64_t ld, int rows, int vocab_local, int vocab_begin,
                          float* out_value, int32_t* out_index, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(rows >= 0, "rows " + std::to_string(rows));
  LLAMA2_LAUNCH_REQUIRE(vocab_local > 0 && vocab_begin >= 0,
                        "vocab_begin " + std::to_string(vocab_begin) + ", vocab_local " +
                            std::to_string(vocab_local));
  LLAMA2_LAUNCH_REQUIRE(ld >= vocab_local, "ld " + std::to_string(ld) + ", vocab_local " +
                                               std::to_string(vocab_local));
  if (rows == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(logits != nullptr && out_value != nullptr && out_index != nullptr, "");
  constexpr int V = kVec16<T>;
  if (vocab_local % V == 0 && ld % V == 0 && is_aligned(logits, 16)) {
    launch_kernel(argmax_kernel<T, V>, rows, kThreads, 0, stream, logits, ld, vocab_local,
                  vocab_begin, out_value, out_index);
  } else {
    launch_kernel(argmax_kernel<T, 1>, rows, kThreads, 0, stream, logits, ld, vocab_local,
                  vocab_begin, out_value, out_index);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_topk(const T* logits, int64_t ld, int rows, int vocab_local, int vocab_begin,
                        int k, float* out_values, int32_t* out_indices, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(rows >= 0, "rows " + std::to_string(rows));
  LLAMA2_LAUNCH_REQUIRE(vocab_local > 0 && vocab_begin >= 0,
                        "vocab_begin " + std::to_string(vocab_begin) + ", vocab_local " +
                            std::to_string(vocab_local));
  LLAMA2_LAUNCH_REQUIRE(ld >= vocab_local, "ld " + std::to_string(ld) + ", vocab_local " +
                                               std::to_string(vocab_local));
  LLAMA2_LAUNCH_REQUIRE(k >= 1 && k <= kTopKMax,
                        "k " + std::to_string(k) + ", allowed 1.." + std::to_string(kTopKMax));
  if (rows == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(logits != nullptr && out_values != nullptr && out_indices != nullptr, "");
  launch_kernel(topk_kernel<T>, rows, kThreads, 0, stream, logits, ld, vocab_local, vocab_begin, k,
                out_values, out_indices);
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T)                                                                  \
  template cudaError_t launch_argmax<T>(const T*, int64_t, int, int, int, float*, int32_t*,    \
                                        cudaStream_t);                                         \
  template cudaError_t launch_topk<T>(const T*, int64_t, int, int, int, int, float*, int32_t*, \
                                      cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
