#include <cmath>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/rope_math.cuh"

namespace llama2::kernels {

RopeFreqs make_rope_freqs(int head_dim, double theta) {
  RopeFreqs f;
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim / 2 > RopeFreqs::kMaxHalf || !(theta > 0)) {
    return f;
  }
  f.head_dim = head_dim;
  // Keep this expression identical to llama2::cpu::rope (src/rank/cpu_ops.cpp).
  for (int i = 0; i < head_dim / 2; ++i) {
    f.inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta),
                                    static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  return f;
}

RopeFreqs make_rope_freqs(int head_dim, const float* inv_freq) {
  RopeFreqs f = make_rope_freqs(head_dim, 10000.0);  // the checks; the values are replaced
  for (int i = 0; i < f.head_dim / 2; ++i) f.inv_freq[i] = inv_freq[i];
  return f;
}

void make_rope_table(const RopeFreqs& freqs, int positions, float2* out) {
  const int half = freqs.head_dim / 2;
  for (int pos = 0; pos < positions; ++pos) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * freqs.inv_freq[i];
      out[static_cast<int64_t>(pos) * half + i] =
          make_float2(static_cast<float>(std::cos(static_cast<double>(angle))),
                      static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  }
}

namespace {
template <typename T>
struct RopeKvParams {
  int64_t q_stride;
  int64_t k_stride;
  int64_t v_stride;
  int heads;
  int kv_heads;
  int block_size;
  const int32_t* pos;
  const int32_t* slot;
  // launch_rope_kv_scaled: q, k and v come from these sums (Fp8Sum) (rows of k_stride = the fused
  // QKV width; q at column 0, k at heads * D, v after it); q, k and v (the T pointers) are then
  // only q's destination.
  ScaledSums sums;
};

// V values of a q/k/v row at column `col` (of the fused row for scaled sums), as fp32: a T row's
// stored values, or the sums scaled and rounded to T as launch_scale_outer stores them.
template <typename T, int V, bool kScaled>
__device__ __forceinline__ void load_row(const T* row, const ScaledSums& sums,
                                         const Fp8Sum* acc_row, float sx, int col,
                                         float (&out)[V]) {
  if constexpr (kScaled) {
    float w[V];
    load_float<Fp8Sum, V>(acc_row + col, out);
    load_float<float, V>(sums.w_scale + col, w);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = round_to<T>(out[e] * (sx * w[e]));
  } else {
    load_float<T, V>(row + col, out);
  }
}
}  // namespace

// One block per token. Work items are 16-byte pieces: a rotation item is the piece at i and its
// partner at i + D/2 (D/2 is a multiple of the piece), a V item one piece. Every item is
// independent and the pointers are __restrict__, so a thread's loads can all be in flight at once
// (with scalar accesses through possibly-aliasing pointers, batch-1 calls spent ~20 us in serial
// load-store round trips). __grid_constant__ keeps the frequency table in the parameter bank (a
// runtime-indexed by-value struct would otherwise be copied to local memory).
// C: the cache's element type (T, or fp8 e4m3: K rounded to T then to e4m3, V from T to e4m3).
template <typename T, typename C, int D, bool kScaled>
static __global__ void __launch_bounds__(128)
    rope_kv_kernel(T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   C* __restrict__ k_cache, C* __restrict__ v_cache, const RopeKvParams<T> p,
                   const __grid_constant__ RopeFreqs f) {
  wait_for_previous_grid();
  constexpr int H = D / 2;
  constexpr int V = kVec16<T>;
  constexpr int kHalfPieces = H / V;
  static_assert(H % V == 0, "a rotation half must be whole 16-byte pieces");
  __shared__ float s_cos[H];
  __shared__ float s_sin[H];
  const int t = blockIdx.x;
  const int ipos = p.pos[t];
  const float fpos = static_cast<float>(ipos);
  if (f.table != nullptr && ipos >= 0 && ipos < f.table_positions) {
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      const float2 cs = f.table[static_cast<int64_t>(ipos) * H + i];
      s_cos[i] = cs.x;
      s_sin[i] = cs.y;
    }
  } else {
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      // The angle is one fp32 product, as in HF and the reference; cos/sin of it are evaluated
      // in double and rounded, as the reference does, so long positions stay bit-close.
      const float angle = fpos * f.inv_freq[i];
      double s, c;
      sincos(static_cast<double>(angle), &s, &c);
      s_cos[i] = static_cast<float>(c);
      s_sin[i] = static_cast<float>(s);
    }
  }
  __syncthreads();

  // Scaled sums: this token's fused QKV row and x scale.
  const Fp8Sum* acc_row = kScaled ? p.sums.acc + t * p.k_stride : nullptr;
  const float sx = kScaled ? p.sums.x_scale[t] : 0.f;
  // (x[i], x[i + H]) -> (x[i] c - x[i+H] s, x[i+H] c + x[i] s) for the V lanes of one piece of
  // the head starting at column src_col of the token's row `src` (T), or of its fused row of
  // sums when scaled.
  auto rotate = [&](const T* src, int src_col, auto* dst, int i0) {
    using Dst = std::remove_pointer_t<decltype(dst)>;
    float a[V], b[V];
    load_row<T, V, kScaled>(src, p.sums, acc_row, sx, src_col + i0, a);
    load_row<T, V, kScaled>(src, p.sums, acc_row, sx, src_col + i0 + H, b);
    float x[V], y[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      rope_rotate(a[e], b[e], s_cos[i0 + e], s_sin[i0 + e], x[e], y[e]);
      if constexpr (!std::is_same_v<Dst, T>) {
        // An fp8 cache stores the rotated K as the model computes it (rounded to T), then
        // rounded to e4m3: the value a reference that quantizes its T cache would hold.
        x[e] = round_to<T>(x[e]);
        y[e] = round_to<T>(y[e]);
      }
    }
    store_float<Dst, V>(dst + i0, x);
    store_float<Dst, V>(dst + i0 + H, y);
  };

  T* qt = q + t * p.q_stride;
  for (int idx = threadIdx.x; idx < p.heads * kHalfPieces; idx += blockDim.x) {
    const int h = idx / kHalfPieces;  // q's columns start at 0 in both layouts
    rotate(qt, h * D, qt + h * D, (idx % kHalfPieces) * V);
  }

  const int slot = p.slot[t];
  if (slot < 0) return;  // padding token: nothing to cache
  const int64_t block = slot / p.block_size;
  const int offset = slot % p.block_size;
  // Head g's row of this token in the cache: [block, g, offset, :].
  auto cache_row = [&](C* cache, int g) {
    return cache + ((block * p.kv_heads + g) * p.block_size + offset) * D;
  };
  // Scaled sums: k and v are columns of the fused row; T inputs: rows of their own.
  const T* kt = kScaled ? nullptr : k + t * p.k_stride;
  const int k_col = kScaled ? p.heads * D : 0;
  for (int idx = threadIdx.x; idx < p.kv_heads * kHalfPieces; idx += blockDim.x) {
    const int g = idx / kHalfPieces;
    rotate(kt, k_col + g * D, cache_row(k_cache, g), (idx % kHalfPieces) * V);
  }
  const T* vt = kScaled ? nullptr : v + t * p.v_stride;
  const int v_col = (p.heads + p.kv_heads) * D;
  for (int idx = threadIdx.x; idx < p.kv_heads * (D / V); idx += blockDim.x) {
    const int g = idx / (D / V), j = (idx % (D / V)) * V;
    if constexpr (kScaled) {  // rounded to T, then stored as C (the T path's values)
      float x[V];
      load_row<T, V, true>(nullptr, p.sums, acc_row, sx, v_col + g * D + j, x);
      store_float<C, V>(cache_row(v_cache, g) + j, x);
    } else if constexpr (std::is_same_v<C, T>) {
      *reinterpret_cast<Pack<T, V>*>(cache_row(v_cache, g) + j) =
          *reinterpret_cast<const Pack<T, V>*>(vt + g * D + j);
    } else {
      float x[V];
      load_float<T, V>(vt + g * D + j, x);
      store_float<C, V>(cache_row(v_cache, g) + j, x);
    }
  }
}

namespace {

// The checks both launchers share (tokens, cache, frequencies); "" when they pass.
template <typename C>
std::string check_rope_shape(int heads, const RopeKvTokens& tokens, const RopeFreqs& freqs,
                             const PagedKvCache<C>& cache) {
  const int d = cache.head_dim;
  if (tokens.n_tokens < 0) return "n_tokens " + std::to_string(tokens.n_tokens);
  if (heads <= 0 || cache.kv_heads <= 0) {
    return "heads " + std::to_string(heads) + ", kv_heads " + std::to_string(cache.kv_heads);
  }
  if (cache.block_size <= 0 || cache.num_blocks <= 0) {
    return "block_size " + std::to_string(cache.block_size) + ", num_blocks " +
           std::to_string(cache.num_blocks);
  }
  if (freqs.head_dim != d) {
    return "freqs for head_dim " + std::to_string(freqs.head_dim) + ", cache head_dim " +
           std::to_string(d);
  }
  if (tokens.n_tokens == 0) return "";
  if (d != 64 && d != 128)
    return "head_dim " + std::to_string(d) + " is not instantiated (64, 128)";
  if (tokens.pos == nullptr || tokens.slot == nullptr || cache.k == nullptr || cache.v == nullptr) {
    return "null pointer";
  }
  if (!is_aligned(cache.k, 16) || !is_aligned(cache.v, 16)) return "16-byte alignment";
  return "";
}

template <typename T, typename C, bool kScaled>
void launch_rope_kv_kernel(T* q, const T* k, const T* v, const RopeKvParams<T>& p,
                           const RopeFreqs& freqs, const PagedKvCache<C>& cache, int n_tokens,
                           cudaStream_t stream) {
  constexpr int kThreads = 128;
  if (cache.head_dim == 64) {
    launch_kernel(rope_kv_kernel<T, C, 64, kScaled>, n_tokens, kThreads, 0, stream, q, k, v,
                  cache.k, cache.v, p, freqs);
  } else {
    launch_kernel(rope_kv_kernel<T, C, 128, kScaled>, n_tokens, kThreads, 0, stream, q, k, v,
                  cache.k, cache.v, p, freqs);
  }
}

}  // namespace

template <typename T, typename C>
cudaError_t launch_rope_kv(T* q, int64_t q_stride, const T* k, int64_t k_stride, const T* v,
                           int64_t v_stride, int heads, const RopeKvTokens& tokens,
                           const RopeFreqs& freqs, const PagedKvCache<C>& cache,
                           cudaStream_t stream) {
  const int d = cache.head_dim;
  const std::string shape = check_rope_shape(heads, tokens, freqs, cache);
  LLAMA2_LAUNCH_REQUIRE(shape.empty(), shape);
  LLAMA2_LAUNCH_REQUIRE(q_stride >= static_cast<int64_t>(heads) * d,
                        "q_stride " + std::to_string(q_stride) + " < heads * head_dim " +
                            std::to_string(static_cast<int64_t>(heads) * d));
  LLAMA2_LAUNCH_REQUIRE(k_stride >= static_cast<int64_t>(cache.kv_heads) * d &&
                            v_stride >= static_cast<int64_t>(cache.kv_heads) * d,
                        "k_stride " + std::to_string(k_stride) + ", v_stride " +
                            std::to_string(v_stride) + " < kv_heads * head_dim " +
                            std::to_string(static_cast<int64_t>(cache.kv_heads) * d));
  if (tokens.n_tokens == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(q != nullptr && k != nullptr && v != nullptr, "");
  // 16-byte pieces throughout: every row start must be 16-byte aligned.
  constexpr int V = kVec16<T>;
  LLAMA2_LAUNCH_REQUIRE(is_aligned(q, 16) && is_aligned(k, 16) && is_aligned(v, 16),
                        "16-byte alignment");
  LLAMA2_LAUNCH_REQUIRE(q_stride % V == 0 && k_stride % V == 0 && v_stride % V == 0,
                        "strides must be multiples of " + std::to_string(V) + " elements");
  const RopeKvParams<T> p{q_stride,         k_stride,   v_stride,    heads,       cache.kv_heads,
                          cache.block_size, tokens.pos, tokens.slot, ScaledSums{}};
  launch_rope_kv_kernel<T, C, false>(q, k, v, p, freqs, cache, tokens.n_tokens, stream);
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t launch_rope_kv_scaled(ScaledSums qkv, int64_t qkv_stride, T* q, int64_t q_stride,
                                  int heads, const RopeKvTokens& tokens, const RopeFreqs& freqs,
                                  const PagedKvCache<C>& cache, cudaStream_t stream) {
  const int d = cache.head_dim;
  const std::string shape = check_rope_shape(heads, tokens, freqs, cache);
  LLAMA2_LAUNCH_REQUIRE(shape.empty(), shape);
  const int64_t width = (static_cast<int64_t>(heads) + 2 * cache.kv_heads) * d;
  LLAMA2_LAUNCH_REQUIRE(qkv_stride >= width && q_stride >= static_cast<int64_t>(heads) * d,
                        "qkv_stride " + std::to_string(qkv_stride) + " (needs >= " +
                            std::to_string(width) + "), q_stride " + std::to_string(q_stride));
  if (tokens.n_tokens == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(
      q != nullptr && qkv.acc != nullptr && qkv.x_scale != nullptr && qkv.w_scale != nullptr, "");
  constexpr int V = kVec16<T>;
  LLAMA2_LAUNCH_REQUIRE(is_aligned(q, 16) && is_aligned(qkv.acc, 16) &&
                            is_aligned(qkv.w_scale, 16) && qkv_stride % 4 == 0 && q_stride % V == 0,
                        "16-byte alignment of q, the sums and the scales; strides in 16 bytes");
  const RopeKvParams<T> p{q_stride,         qkv_stride, qkv_stride,  heads, cache.kv_heads,
                          cache.block_size, tokens.pos, tokens.slot, qkv};
  launch_rope_kv_kernel<T, C, true>(q, nullptr, nullptr, p, freqs, cache, tokens.n_tokens, stream);
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T, C)                                                               \
  template cudaError_t launch_rope_kv<T, C>(T*, int64_t, const T*, int64_t, const T*, int64_t, \
                                            int, const RopeKvTokens&, const RopeFreqs&,        \
                                            const PagedKvCache<C>&, cudaStream_t);             \
  template cudaError_t launch_rope_kv_scaled<T, C>(ScaledSums, int64_t, T*, int64_t, int,      \
                                                   const RopeKvTokens&, const RopeFreqs&,      \
                                                   const PagedKvCache<C>&, cudaStream_t);
LLAMA2_FOR_EACH_KV_TYPES(LLAMA2_INSTANTIATE)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
