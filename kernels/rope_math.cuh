// RoPE's rotation of one (x_i, x_{i + d/2}) pair, shared by launch_rope_kv (kernels/rope_kv.cu)
// and the GEMV's RoPE epilogue (kernels/gemv_common.cuh): both must give the same bits, so the
// roundings are explicit (two products, then the difference / sum), not left to the compiler's
// choice of fused multiply-adds, which can differ between two kernels. It is also the order of
// llama2::cpu::rope (x c - y s, y c + x s, each product rounded to fp32).
#pragma once

#include <cuda_runtime.h>

namespace llama2::kernels {

__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float& x,
                                            float& y) {
  x = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  y = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

}  // namespace llama2::kernels
