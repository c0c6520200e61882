// RMSNorm as HF LlamaRMSNorm, and the fused residual-add + RMSNorm that precedes every attention
// and MLP block after the first.
//
// Numerics (match HF in the model dtype T): the sum of squares and 1/rms are fp32; the normalized
// value is rounded to T before the weight multiply, and the product is rounded to T again, exactly
// as `weight * hidden_states.to(input_dtype)` does. For T = float this is llama2::cpu::rmsnorm.
//
// Residual stream dtype: kept in T (not fp32). HF adds the residual in the model dtype
// (`hidden_states = residual + hidden_states` on fp16/bf16 tensors), so rounding the sum to T is
// what the reference fixtures contain; it also halves the residual traffic of the two fused kernels
// per layer. The norm is computed from the rounded (stored) residual, again as HF does.
#pragma once

#include <cuda_runtime.h>

#include "kernels/quant.cuh"

namespace llama2::kernels {

// out[t, :] = round_T(round_T(x[t, :] * rsqrt(mean(x[t, :]^2) + eps)) * weight).
// Launch: one block per row, 32..512 threads, 16-byte accesses when hidden % (16/sizeof(T)) == 0
// and the pointers are 16-byte aligned (else scalar), warp-shuffle + shared-memory reduction.
// q8 on (the fp8 product that reads out wants its rows in e4m3, src/rank/cuda/linear.h): out's
// rows are also written quantized, as launch_quantize_rows would from out (kernels/quant.cuh).
template <typename T>
cudaError_t launch_rmsnorm(const T* x,       // [n_rows, hidden]
                           const T* weight,  // [hidden]
                           int n_rows, int hidden, float eps,
                           T* out,  // [n_rows, hidden]; may alias x
                           cudaStream_t stream, RowsE4m3 q8 = {});

// residual[t, :] = round_T(residual[t, :] + x[t, :]); out[t, :] = rmsnorm(residual[t, :]) * weight.
// Same launch shape and q8 as launch_rmsnorm.
template <typename T>
cudaError_t launch_add_rmsnorm(T* residual,      // [n_rows, hidden], updated in place
                               const T* x,       // [n_rows, hidden], the block's output
                               const T* weight,  // [hidden]
                               int n_rows, int hidden, float eps,
                               T* out,  // [n_rows, hidden]; may alias x, not residual
                               cudaStream_t stream, RowsE4m3 q8 = {});

// launch_add_rmsnorm with the block's output given as an fp8 product's unscaled sums (one rank: no
// all-reduce between the product and the add): x[t, j] = round_T(acc[t, j] * (x_scale[t] *
// w_scale[j])), so the product needs no scale launch; the same numbers as launch_scale_outer
// followed by launch_add_rmsnorm. x.x_scale may be q8.scale (each row's block reads its scale
// before it writes the new one).
template <typename T>
cudaError_t launch_add_rmsnorm_scaled(T* residual,      // [n_rows, hidden], updated in place
                                      ScaledSums x,     // [n_rows, hidden] sums, [n_rows], [hidden]
                                      const T* weight,  // [hidden]
                                      int n_rows, int hidden, float eps,
                                      T* out,  // [n_rows, hidden]; not residual
                                      cudaStream_t stream, RowsE4m3 q8 = {});

}  // namespace llama2::kernels
