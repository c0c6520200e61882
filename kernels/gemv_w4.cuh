// 4-bit weights with 16-bit activations (W4A16): the GEMV for decode's few rows, the quantizer of
// --weight-dtype int4 and the dequantizer. Layout of q and sz: kernels/w4_convert.cuh. The
// products of more rows run on the tensor-core GEMM (kernels/gemm_w8a16.cuh with W = W4Word).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemv.cuh"

namespace llama2::kernels {

// The group size --weight-dtype int4 quantizes with (AWQ's and GPTQ's usual one).
constexpr int kW4LoadGroup = 128;

// A projection [N, K] in 4 bits (device pointers).
struct W4Matrix {
  const uint32_t* q = nullptr;   // [N, K / 8]
  const uint32_t* sz = nullptr;  // [ceil(K / G), N] (scale, bias) T pairs
  int group = 0;                 // G
};

// Groups of a row of K columns.
__host__ __device__ inline int w4_groups(int K, int group) {
  return (K + group - 1) / group;
}

// K and G that the 4-bit kernels take: a lane of the GEMV reads 16 bytes = 32 columns of one
// group, and a 64-column stage of the GEMM lies in one group.
inline bool w4_shape_fits(int64_t K, int64_t group) {
  return K >= 32 && K % 32 == 0 && group >= 64 && group % 64 == 0;
}

// 2^32 / group + 1: the GEMV finds a column's group as umulhi(k, magic), exact while k * group <
// 2^32 (gemv_w4_fits).
inline uint32_t w4_group_magic(int group) {
  return static_cast<uint32_t>(0xffffffffu / static_cast<uint32_t>(group) + 1u);
}

inline bool gemv_w4_fits(const void* x, const W4Matrix& w, int M, int K) {
  return M >= 1 && M <= kGemvMaxRows && w4_shape_fits(K, w.group) &&
         int64_t{K} * w.group < (int64_t{1} << 32) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.q) % 16 == 0;
}

// y[m, n] = round_T(sum_g 16 s[g, n] * sum_{k in g} x[m, k] * (q[n, k] - z[g, n]) / 16), T fp16 or
// bf16. fp16: the products of a word (8 weights) are summed in f16x2 (HFMA2; each half 4
// products of |q - z| / 16 < 1 with x), then in fp32; bf16: fp32 FMAs. The launch shape and the
// fusions are launch_gemv_q's (kernels/gemv.cuh). Needs gemv_w4_fits(x, w, M, K), N >= 1.
template <typename T>
cudaError_t launch_gemv_w4(const T* x,               // [M, K]
                           const W4Matrix& w, T* y,  // [M, N]
                           int M, int N, int K, cudaStream_t stream,
                           const GemvFusion<T>& fuse = {});
// act [M, F] = silu_mul(x . gate^T, x . up^T) for the fused [gate; up] weight [2F, K], as
// launch_gemv_gate_up_swiglu does for 16-bit weights (fusion: the norm only).
template <typename T>
cudaError_t launch_gemv_w4_gate_up_swiglu(const T* x,                         // [M, K]
                                          const W4Matrix& w_gate_up, T* act,  // [M, F]
                                          int M, int F, int K, cudaStream_t stream,
                                          const GemvFusion<T>& fuse = {});

// --weight-dtype int4 at load: w [N, K] in T to q and sz with groups of `group` columns by AWQ's
// round-to-nearest rule (src/tools/quantize_int4.cpp, `llama2 quantize --format awq`): per group
// and row s = fp16(max(hi - lo, 1e-5) / 15), z = clamp(rint(-lo / s), 0, 15), q = clamp(rint(w /
// s) + z, 0, 15); so a file that tool wrote from the same weights holds the same q, z and s.
// Needs w4_shape_fits(K, group).
// A benchmark's A/B of the one-row GEMV's shape (bench_gemv_w4.cu), for plain products and
// gate|up without fusions: rows_per_warp 1 (unroll 4 or 8) or 2 (unroll 2 or 4; gate|up: 2 only);
// 0 restores the launcher's own choice. Process-wide; not an engine setting.
void set_gemv_w4_variant(int rows_per_warp, int unroll);

template <typename T>
cudaError_t launch_quantize_w4(const T* w,  // [N, K]
                               uint32_t* q, uint32_t* sz, int N, int K, int group,
                               cudaStream_t stream);

// out[n, k] = round_T((q - z) * s) (fp32 product): the weights the kernels multiply (tests).
template <typename T>
cudaError_t launch_dequantize_w4(const W4Matrix& w, T* out,  // [N, K]
                                 int N, int K, cudaStream_t stream);

}  // namespace llama2::kernels
