// Rotary embedding of q and k (HF rotate-half convention) fused with writing k and v into the paged
// KV cache.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemv.cuh"
#include "kernels/paged_kv.cuh"
#include "kernels/quant.cuh"

namespace llama2::kernels {

// The fp32 inverse frequencies inv_freq[i] = 1 / theta^(2i / head_dim), i < head_dim / 2, computed
// on the host with the very expression llama2::cpu::rope uses (fp32 pow, as HF builds inv_freq in
// fp32), so that device angles pos * inv_freq[i] are bit-identical to the reference's. Build it
// once per model, not per launch.
struct RopeFreqs {
  static constexpr int kMaxHalf = 64;  // head_dim <= 128
  int head_dim = 0;
  float inv_freq[kMaxHalf] = {};
  // Optional device table [table_positions, head_dim / 2] of (cos, sin) from make_rope_table:
  // positions below table_positions read it instead of evaluating sincos in double on the
  // device (a double sincos per element made a batch-1 launch ~4x slower than its memory work).
  const float2* table = nullptr;
  int table_positions = 0;
};
// Throws nothing; head_dim outside (0, 128] or odd gives head_dim = 0, which every launch rejects.
RopeFreqs make_rope_freqs(int head_dim, double theta);
// The same with the inverse frequencies given ([head_dim / 2], e.g. rope_scaling's from
// common/rope_frequencies.h).
RopeFreqs make_rope_freqs(int head_dim, const float* inv_freq);

// (cos, sin) of pos * inv_freq[i] for pos < positions, i < head_dim / 2, row-major, computed on
// the host exactly as the kernel's fallback and llama2::cpu::rope do (fp32 angle, double cos/sin,
// rounded to fp32). `out` holds positions * head_dim / 2 entries.
void make_rope_table(const RopeFreqs& freqs, int positions, float2* out);

// Which tokens to rotate and where their K/V go.
struct RopeKvTokens {
  const int32_t* pos = nullptr;   // [n_tokens], the position of each token (the rotation angle)
  const int32_t* slot = nullptr;  // [n_tokens], block_id * block_size + offset in the cache;
                                  // < 0: rotate q but write no K/V (a padding token)
  int n_tokens = 0;
};

// For every token t (h < heads, g < cache.kv_heads, i < head_dim / 2, angle = pos[t] * inv_freq[i],
// c = cos(angle), s = sin(angle), both evaluated in double and rounded to fp32 as the reference):
//   q[t, h, i]       <- q_i * c - q_{i+d/2} * s          (in place)
//   q[t, h, i + d/2] <- q_{i+d/2} * c + q_i * s
//   cache.k[slot: g, :] <- the same rotation of k[t, g, :]   (k itself is not modified)
//   cache.v[slot: g, :] <- v[t, g, :]
// Rows are addressed with strides, so q/k/v may be views into one fused [T, (H + 2G) * d] QKV GEMM
// output. All math fp32, one rounding to T per output element.
// Launch: one block of 128 threads per token; the token's cos/sin table (d/2 entries) is built once
// in shared memory and shared by all q and k heads; 16-byte accesses, so q, k, v, the cache and the
// strides must be 16-byte aligned (cudaErrorInvalidValue otherwise). head_dim 64 and 128.
// The cache holds T, or fp8 e4m3 for fp16/bf16 (C): K and V are then rounded to T (as a T cache
// would hold them) and from there to fp8 (saturating at +-448); q stays T.
template <typename T, typename C>
cudaError_t launch_rope_kv(T* q, int64_t q_stride,        // [n_tokens, q_stride], heads * d used
                           const T* k, int64_t k_stride,  // [n_tokens, k_stride], kv_heads * d used
                           const T* v, int64_t v_stride,  // [n_tokens, v_stride], kv_heads * d used
                           int heads, const RopeKvTokens& tokens, const RopeFreqs& freqs,
                           const PagedKvCache<C>& cache,  // written at the tokens' slots
                           cudaStream_t stream);

// The same with q, k and v given as an fp8 QKV product's unscaled sums (--weight-dtype fp8, the
// W8A8 rows): qkv.acc is the fused [n_tokens, qkv_stride] row of sums (q at column 0, k at heads *
// head_dim, v after it), each value read as launch_scale_outer would store it,
// round_T(acc * (x_scale[t] * w_scale[col])); the rotated q goes to q, k and v to the cache. The
// numbers of launch_scale_outer followed by launch_rope_kv, without the [n_tokens, qkv] T copy's
// launch. The sums and w_scale 16-byte aligned, qkv_stride a multiple of 4.
template <typename T, typename C>
cudaError_t launch_rope_kv_scaled(ScaledSums qkv, int64_t qkv_stride, T* q,
                                  int64_t q_stride,  // [n_tokens, q_stride], the output
                                  int heads, const RopeKvTokens& tokens, const RopeFreqs& freqs,
                                  const PagedKvCache<C>& cache, cudaStream_t stream);

// The qkv GEMV's RoPE epilogue (GemvFusion::rope, kernels/gemv.cuh) for one token: its
// position and slot, this cache and the frequencies' (cos, sin) table (needed: the epilogue has
// no sincos fallback). T: the model's type, C the cache's.
template <typename T, typename C>
GemvRopeKv gemv_rope_kv(const PagedKvCache<C>& cache, const RopeKvTokens& token, int heads,
                        const RopeFreqs& freqs) {
  GemvRopeKv r;
  r.pos = token.pos;
  r.slot = token.slot;
  r.k_cache = cache.k;
  r.v_cache = cache.v;
  r.cache_e4m3 = !std::is_same_v<C, T>;
  r.heads = heads;
  r.kv_heads = cache.kv_heads;
  r.head_dim = cache.head_dim;
  r.block_size = cache.block_size;
  r.table = freqs.table;
  r.table_positions = freqs.table_positions;
  return r;
}

}  // namespace llama2::kernels
