// 4-bit weights (W4A16: AWQ / GPTQ checkpoints and --weight-dtype int4) in the layout the GEMV
// (kernels/gemv_w4.cu) and the tensor-core GEMM (kernels/gemm_w8a16.cu, W = W4Word) read, and the
// register conversions both use. Device code and layout constants; the launchers are declared in
// kernels/gemv_w4.cuh.
//
// Layout of a [N, K] projection with groups of G input columns (G a multiple of 32):
//   q   [N, K / 8] uint32: word j of row n holds columns 8j .. 8j+7; element e (column 8j + e)
//       in nibble w4_nibble(e), i.e. nibble s holds element {0, 2, 4, 6, 1, 3, 5, 7}[s] (AWQ's own
//       order). Then `(word >> 4p) & 0x000f000f` is the pair of elements (2p, 2p + 1) in the two
//       16-bit halves: a LOP3 per pair, no shuffle (w4_word_pairs needs one shift per word).
//   sz  [ceil(K / G), N] uint32, a T pair per (group, output row): .x the scale s (T), .y the bias
//       -(B + z) / 16 with z the zero point (0..15) and B = kW4Base<T> (1024 fp16, 128 bf16).
//       Group-major, so the 8 consecutive rows of a GEMV block or the 128 of a GEMM tile read one
//       contiguous piece per group.
// A weight is W[n, k] = (q - z) * s. In registers: the nibble pair OR'd into the exponent of B
// is the T pair (B + q) exactly (both types have spacing 1 there), and one HFMA2 with 1/16 and
// the bias gives (q - z) / 16 exactly (|q - z| <= 15 in 1/16 steps: 8 significant bits at most).
// The 1/16 keeps fp16 sums of products with activations in range (as kHalf2Scale does for int8,
// kernels/w8_convert.cuh); the consumer multiplies by 16 s.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace llama2::kernels {

// One 32-bit word of 8 packed 4-bit weights: the GEMM's weight type tag (kernels/gemm_w8a16.cuh).
struct W4Word {
  uint32_t bits;
};

// Element e (0..7) of a word -> its nibble: {0, 4, 1, 5, 2, 6, 3, 7}[e].
__host__ __device__ constexpr int w4_nibble(int e) {
  return (e & 1) * 4 + (e >> 1);
}

template <typename T>
constexpr float kW4Base = std::is_same_v<T, __half> ? 1024.f : 128.f;
template <typename T>
constexpr uint32_t kW4Magic = std::is_same_v<T, __half> ? 0x64006400u : 0x43004300u;

// The bias of a zero point z in T: -(B + z) / 16 (exact in T).
template <typename T>
__host__ __device__ constexpr float w4_bias(int z) {
  return -(kW4Base<T> + static_cast<float>(z)) / 16.f;
}

// T's pair type (fp16 / bf16 only) and moves between it and a 32-bit register.
template <typename T>
struct W4PairOf;
template <>
struct W4PairOf<__half> {
  using type = __half2;
};
template <>
struct W4PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <typename T>
using W4Pair = typename W4PairOf<T>::type;

template <typename T>
__device__ __forceinline__ W4Pair<T> w4_as_pair(uint32_t u) {
  W4Pair<T> v;
  memcpy(&v, &u, 4);
  return v;
}
template <typename T>
__device__ __forceinline__ uint32_t w4_as_bits(W4Pair<T> v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// The 4 pairs of `word` (elements (0, 1), (2, 3), (4, 5), (6, 7)) as (q - z) / 16, exactly.
// fp16: 1 shift + 4 LOP3 + 4 HFMA2: pairs 1 and 3 are masked in place (nibbles 1 / 5 and 3 / 7),
// which puts B + 16 q in the halves (fp16's 10 mantissa bits hold it; B + 16 q <= B + 240 is
// exact); their HFMA2 takes 1/256 and bias_hi = -(B + 16 z) / 256 (w4_bias_hi) instead of 1/16
// and bias_lo. bf16 has 7 mantissa bits, so bits 4..7 would reach its exponent: every pair is
// shifted down first (3 shifts), and bias_hi is not used.
template <typename T>
__device__ __forceinline__ void w4_word_pairs(uint32_t word, W4Pair<T> bias_lo, W4Pair<T> bias_hi,
                                              W4Pair<T> (&d)[4]) {
  if constexpr (std::is_same_v<T, __half>) {
    const uint32_t shifted = word >> 8;
    const __half2 lo = __float2half2_rn(0.0625f), hi = __float2half2_rn(1.f / 256.f);
    d[0] = __hfma2(w4_as_pair<T>((word & 0x000f000fu) | kW4Magic<T>), lo, bias_lo);
    d[1] = __hfma2(w4_as_pair<T>((word & 0x00f000f0u) | kW4Magic<T>), hi, bias_hi);
    d[2] = __hfma2(w4_as_pair<T>((shifted & 0x000f000fu) | kW4Magic<T>), lo, bias_lo);
    d[3] = __hfma2(w4_as_pair<T>((shifted & 0x00f000f0u) | kW4Magic<T>), hi, bias_hi);
  } else {
    (void)bias_hi;
    const __nv_bfloat162 lo = __float2bfloat162_rn(0.0625f);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      d[p] = __hfma2(w4_as_pair<T>(((word >> (4 * p)) & 0x000f000fu) | kW4Magic<T>), lo, bias_lo);
    }
  }
}

// fp16's bias_hi = -(B + 16 z) / 256 from bias_lo = -(B + z) / 16: bias_lo + 15 B / 256 = bias_lo +
// 60, exact (the sum is -4 - z / 16). bf16 does not use it (w4_word_pairs): bias_lo itself.
template <typename T>
__device__ __forceinline__ W4Pair<T> w4_bias_hi(W4Pair<T> bias_lo) {
  if constexpr (std::is_same_v<T, __half>) {
    return __hadd2(bias_lo, __float2half2_rn(15.f * kW4Base<T> / 256.f));
  } else {
    return bias_lo;
  }
}

// A group's (scale, bias) word as the pairs (bias, bias) and (16 s, 16 s).
template <typename T>
__device__ __forceinline__ void w4_group(uint32_t sz, W4Pair<T>& bias2, W4Pair<T>& scale16) {
  const W4Pair<T> v = w4_as_pair<T>(sz);
  if constexpr (std::is_same_v<T, __half>) {
    bias2 = __high2half2(v);
    scale16 = __hmul2(__low2half2(v), __float2half2_rn(16.f));
  } else {
    bias2 = __high2bfloat162(v);
    scale16 = __hmul2(__low2bfloat162(v), __float2bfloat162_rn(16.f));
  }
}

}  // namespace llama2::kernels
