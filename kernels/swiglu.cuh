// SwiGLU activation of the MLP, reading the fused gate|up GEMM output.
#pragma once

#include <cuda_runtime.h>

namespace llama2::kernels {

// out[t, j] = round_T(round_T(silu(gate[t, j])) * up[t, j]) with gate = gate_up[t, 0:F] and
// up = gate_up[t, F:2F]; silu(g) = g / (1 + exp(-g)) in fp32. The two roundings are HF's
// (`act_fn(gate_proj(x)) * up_proj(x)` on T tensors); for T = float this is llama2::cpu::swiglu.
// Launch: grid-stride over [n_tokens, F / N] with N = 16 / sizeof(T) elements per access when
// F % N == 0 and the pointers are 16-byte aligned (else N = 1), 256 threads per block.
template <typename T>
cudaError_t launch_swiglu(const T* gate_up,  // [n_tokens, 2 * ffn], gate columns first
                          int n_tokens, int ffn,
                          T* out,  // [n_tokens, ffn]; must not overlap gate_up
                          cudaStream_t stream);

}  // namespace llama2::kernels
