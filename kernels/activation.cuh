// The SwiGLU element function, shared by the SwiGLU kernel and the gate|up GEMV that applies it
// in its epilogue (device code only), so both produce bit-identical activations.
#pragma once

#include "kernels/dtype.cuh"

namespace llama2::kernels {

// round_T(silu(g)) * u with silu(g) = g / (1 + exp(-g)) in fp32, g and u already rounded to T: HF's
// `act_fn(gate_proj(x)) * up_proj(x)` on T tensors. The caller rounds the product to T.
template <typename T>
__device__ __forceinline__ float silu_mul(float g, float u) {
  return round_to<T>(g / (1.f + expf(-g))) * u;
}

}  // namespace llama2::kernels
