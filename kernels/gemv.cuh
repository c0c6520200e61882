// Skinny matrix products for decode: y = x . W^T with few rows in x (batch <= kGemvMaxRows), where
// the whole cost is streaming W once from HBM. cuBLAS picks general GEMM tiles for these shapes
// and leaves bandwidth unused; this kernel keeps many 16-byte loads of W in flight per SM.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

constexpr int kGemvMaxRows = 8;

// True when launch_gemv and launch_gemv_gate_up_swiglu take these operands: 1 <= M <=
// kGemvMaxRows, K a positive multiple of 16 bytes, x and w 16-byte aligned. The caller decides
// with it before launching (cuBLAS otherwise), so a launch error is never mistaken for "use
// cuBLAS instead".
template <typename X, typename W>
inline bool gemv_fits(const X* x, const W* w, int M, int K) {
  constexpr int kVec = static_cast<int>(16 / sizeof(W));
  return M >= 1 && M <= kGemvMaxRows && K >= 1 && K % kVec == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// What a one-row GEMV may do around its product (batch-1 decode: the RMSNorms, residual adds and
// RoPE of a layer then need no kernels of their own; src/rank/cuda/cuda_model.cu).
//   norm_weight  x is the residual stream [1, K] and the product takes rmsnorm(x) * norm_weight,
//                computed by every block into shared memory with the numbers launch_rmsnorm
//                writes, bit for bit (its block's partial sums in its order; rmsnorm.cu).
//   add_to_y     y[0, n] = round_T(y[0, n] + round_T(product)): the residual add of
//                launch_add_rmsnorm, in place (y is the residual stream; plain products only).
//   rope         (the fused [q | k | v] projection of one token) launch_rope_kv in the epilogue:
//                q is rotated into y, k rotated and v as it is go to the paged cache at the
//                token's slot, with launch_rope_kv's numbers bit for bit (k and v's columns of y
//                are not written). A warp then takes the rows n and n + head_dim / 2 of one
//                head, the two halves of each rotation pair. Plain products only, no residual
//                add; N = (heads + 2 kv_heads) * head_dim.
// Each needs M == 1 and x in T (no fp8 activations); the norm also K * sizeof(T) <=
// kGemvNormMaxBytes and a 16-byte aligned norm_weight.
struct GemvRopeKv {
  const int32_t* pos = nullptr;   // [1], the token's position (the rotation angle)
  const int32_t* slot = nullptr;  // [1], block * block_size + offset; < 0: rotate q, cache nothing
  void* k_cache = nullptr;        // PagedKvCache<C>::k / ::v, C = T or e4m3 (cache_e4m3)
  void* v_cache = nullptr;
  bool cache_e4m3 = false;  // K and V rounded to T, then to e4m3, as launch_rope_kv stores them
  int heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  // RopeFreqs::table (kernels/rope_kv.cuh): (cos, sin) by position; a position at or past
  // table_positions gives NaN rows (the host passes the table for the whole max_seq_len).
  const float2* table = nullptr;
  int table_positions = 0;
  bool on() const { return k_cache != nullptr; }
};

template <typename T>
struct GemvFusion {
  const T* norm_weight = nullptr;
  float norm_eps = 0.f;
  bool add_to_y = false;
  GemvRopeKv rope = {};
  bool any() const { return norm_weight != nullptr || add_to_y || rope.on(); }
};
constexpr int kGemvNormMaxBytes = 48 * 1024;  // the normalized row in shared memory

// y[m, n] = round_T(sum_k x[m, k] * w[n, k]) for m < M, n < N, fp32 accumulation.
// Needs gemv_fits(x, w, M, K) and N >= 1 (cudaErrorInvalidValue and the failed check otherwise).
// Launch: 256 threads = 8 warps per block, each warp owns 2 consecutive rows of W and walks K in
// 16-byte pieces (lane j reads piece j, j + 32, ...: one 512-byte coalesced segment per row and
// step, 4 steps unrolled so ~8 loads per lane are in flight); x is read through the L1 cache (it
// is tiny and read by every warp); per-row sums are reduced with warp shuffles.
template <typename T>
cudaError_t launch_gemv(const T* x,  // [M, K]
                        const T* w,  // [N, K]
                        T* y,        // [M, N]
                        int M, int N, int K, cudaStream_t stream, const GemvFusion<T>& fuse = {});

// The gate|up projection with SwiGLU in its epilogue: act[m, j] = round_T(silu_mul(
// round_T(x[m] . gate[j]), round_T(x[m] . up[j]))) for j < F, where w_gate_up is the fused
// [gate; up] weight [2F, K]: the same numbers as launch_gemv into [M, 2F] then launch_swiglu,
// with one launch and no [M, 2F] intermediate. One warp per output j (rows j and F + j of W).
template <typename T>
cudaError_t launch_gemv_gate_up_swiglu(const T* x,          // [M, K]
                                       const T* w_gate_up,  // [2F, K]
                                       T* act,              // [M, F]
                                       int M, int F, int K, cudaStream_t stream,
                                       const GemvFusion<T>& fuse = {});  // norm only

// How launch_gemv_q turns 1-byte weights into numbers (LLAMA2_QGEMV, src/common/tuning_knobs.h).
//   kAuto     kFp32 for activations in T, kConvert for fp8 activations.
//   kConvert  every element of W and x through the generic fp32 conversions (dtype.cuh: int8 by
//             I2F, e4m3 by e4m3x2 -> f16x2 -> fp32): the kernel before the cheap conversions, kept
//             for the A/B. Instantiated for int8 W with x in T and for e4m3 W with e4m3 x only.
//   kFp32     W8A16 (x in T) with kernels/w8_convert.cuh's conversions (int8: byte permute +
//             one subtract) and fp32 FMAs: the same sums as kConvert, bit for bit.
//   kHalf2    W8A16 with fp16 x only: f16x2 products summed in fp16 over each 16-weight load
//             (8 terms), then in fp32; about twice fewer instructions per weight than kFp32 and
//             one more fp16 rounding per 8 products.
enum class GemvMath { kAuto, kConvert, kFp32, kHalf2 };

// Quantized weights (--weight-dtype, kernels/quant.cuh): W is int8_t or __nv_fp8_e4m3 with one
// fp32 scale per row of W (w_scale[N], gate|up: [2F]); x is T (W8A16, the engine's GEMV for both
// weight dtypes) or, with W e4m3, x quantized to e4m3 per row by launch_quantize_rows with
// x_scale[M] (W8A8: the path before 2026-12-02, kept for LLAMA2_QGEMV=old):
// y[m, n] = round_T(x_scale[m] * w_scale[n] * sum_k x[m, k] * w[n, k]), fp32 accumulation
// (kHalf2: see GemvMath). The same launch shape as launch_gemv, with 16 weights per 16-byte load;
// needs gemv_fits(x, w, M, K); a math the operands do not take is cudaErrorInvalidValue.
template <typename T, typename X, typename W>
cudaError_t launch_gemv_q(const X* x, const float* x_scale,  // [M, K], [M] (fp8 x) or nullptr
                          const W* w, const float* w_scale,  // [N, K], [N]
                          T* y,                              // [M, N]
                          int M, int N, int K, cudaStream_t stream, GemvMath math = GemvMath::kAuto,
                          const GemvFusion<T>& fuse = {});
template <typename T, typename X, typename W>
cudaError_t launch_gemv_q_gate_up_swiglu(const X* x, const float* x_scale,          // [M, K], [M]
                                         const W* w_gate_up, const float* w_scale,  // [2F, K], [2F]
                                         T* act,                                    // [M, F]
                                         int M, int F, int K, cudaStream_t stream,
                                         GemvMath math = GemvMath::kAuto,
                                         const GemvFusion<T>& fuse = {});  // norm only

}  // namespace llama2::kernels
