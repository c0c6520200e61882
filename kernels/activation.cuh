// The SwiGLU element function shared by the SwiGLU kernel and the GEMV that fuses it into the
// down projection (device code only).
#pragma once

#include "kernels/dtype.cuh"

namespace llama2::kernels {

// round_T(round_T(silu(g)) * u), silu(g) = g / (1 + exp(-g)) in fp32: HF's
// `act_fn(gate_proj(x)) * up_proj(x)` on T tensors, one rounding per op. The caller stores the
// result as T (the second rounding).
template <typename T>
__device__ __forceinline__ float silu_mul(float g, float u) {
  return round_to<T>(g / (1.f + expf(-g))) * u;
}

}  // namespace llama2::kernels
