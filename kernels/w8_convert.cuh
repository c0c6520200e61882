// Cheap conversions of 1-byte weights (int8, fp8 e4m3) for kernels that stream them (the
// quantized GEMV, kernels/gemv.cu). A 16-byte load holds 16 weights; converting each through the
// generic paths (I2F for int8: a quarter-rate conversion per element on sm_90) made the GEMV
// instruction-bound before it was bandwidth-bound. Here:
//   int8 -> fp32: the byte, its sign bit flipped (b + 128 as an unsigned byte), is placed in the
//                 low mantissa bits of 2^23 with one byte permute (PRMT), and 2^23 + 128 is
//                 subtracted: 2^23 + (b + 128) - (2^23 + 128) = b, exact. PRMT + FADD, both fast.
//   int8 -> f16x2: two bytes into the mantissas of two halves of exponent 4 (4 + u/256, exact
//                 because fp16 has 10 mantissa bits), one HSUB2 of 4.5: b / 256, exact.
//   e4m3 -> f16x2: the paired hardware conversion (cvt.rn.f16x2.e4m3x2, sm_89+), exact.
// The f16x2 forms carry a power-of-two factor (kHalf2Scale below) that keeps sums of products
// with fp16 activations far from fp16's range; the caller multiplies it back into its scale,
// which is exact.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/dtype.cuh"

namespace llama2::kernels {

// The value a weight w has in w8_to_half2's output is w / kHalf2Scale<W>: int8 / 256 (|.| <=
// 0.5), e4m3 / 1024 (|.| <= 0.4375; e4m3's smallest subnormal 2^-9 becomes 2^-19, still exact
// in fp16). A sum of 8 such products with fp16 x stays below 4 max|x|: no overflow for
// |x| < 16384.
template <typename W>
inline constexpr float kHalf2Scale = std::is_same_v<W, int8_t> ? 256.f : 1024.f;

// 16 weights (one 16-byte load, element 0 in the low byte of p.x) as fp32, exact.
template <typename W>
__device__ __forceinline__ void w8_to_float(const uint4& p, float (&out)[16]) {
  const uint32_t words[4] = {p.x, p.y, p.z, p.w};
  if constexpr (std::is_same_v<W, int8_t>) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t u = words[j] ^ 0x80808080u;  // b + 128 per byte
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // bytes [u_i, 0, 0, 0x4B]: the float 2^23 + u_i
        out[4 * j + i] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440u + i)) - 8388736.f;
      }
    }
  } else {
    static_assert(std::is_same_v<W, __nv_fp8_e4m3>, "int8 or e4m3");
    Pack<__nv_fp8_e4m3, 16> pk;
    memcpy(pk.w, words, sizeof words);
    unpack_float(pk, out);  // e4m3x2 -> f16x2 -> fp32 (dtype.cuh)
  }
}

// 16 weights as 8 f16x2 (elements 2i, 2i+1 in h[i], the first low), each w / kHalf2Scale<W>.
template <typename W>
__device__ __forceinline__ void w8_to_half2(const uint4& p, __half2 (&h)[8]) {
  const uint32_t words[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t lo, hi;  // elements (4j, 4j+1) and (4j+2, 4j+3)
    if constexpr (std::is_same_v<W, int8_t>) {
      const uint32_t u = words[j] ^ 0x80808080u;
      lo = __byte_perm(u, 0x44444444u, 0x4140u);  // halves 0x44uu: 4 + u / 256
      hi = __byte_perm(u, 0x44444444u, 0x4342u);
    } else {
      static_assert(std::is_same_v<W, __nv_fp8_e4m3>, "int8 or e4m3");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
      asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n"
          " cvt.rn.f16x2.e4m3x2 %1, b;\n}"
          : "=r"(lo), "=r"(hi)
          : "r"(words[j]));
#else
      __half2_raw r0 = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>(words[j] & 0xFFFFu), __NV_E4M3);
      __half2_raw r1 =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[j] >> 16), __NV_E4M3);
      lo = static_cast<uint32_t>(r0.x) | (static_cast<uint32_t>(r0.y) << 16);
      hi = static_cast<uint32_t>(r1.x) | (static_cast<uint32_t>(r1.y) << 16);
#endif
    }
    memcpy(&h[2 * j], &lo, 4);
    memcpy(&h[2 * j + 1], &hi, 4);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (std::is_same_v<W, int8_t>) {
      h[i] = __hsub2(h[i], __half2half2(__ushort_as_half(0x4480)));  // - 4.5: (u - 128) / 256
    } else {
      h[i] = __hmul2(h[i], __half2half2(__ushort_as_half(0x1400)));  // * 2^-10, exact
    }
  }
}

}  // namespace llama2::kernels
