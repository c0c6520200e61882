// Tensor-core GEMM for 1-byte weights with 16-bit activations (W8A16): y = x . (s * W)^T for the
// products of --weight-dtype int8 with more rows than the GEMV takes (decode batches, prefill
// chunks), where the path before this kernel dequantized the whole W into a T scratch and called
// cuBLAS: three times the weight traffic and one more launch per projection.
//
//   y[m, n] = round_T(w_scale[n] * sum_k x[m, k] * W[n, k])      fp32 accumulation
//
// W is int8 (--weight-dtype int8) or fp8 e4m3 (an A/B against the cuBLASLt FP8 GEMM, which
// quantizes x too), or W4Word: 4-bit weights with a scale and zero point per group of 64k
// columns (AWQ / GPTQ / --weight-dtype int4; kernels/w4_convert.cuh), formed into T in registers
// as (q - z) * s, no scale at the end. Its bytes go to shared memory with cp.async and are
// converted to T in registers, in the layout of the mma.sync.m16n8k16 B operand: every int8 and
// every e4m3 value is exact in fp16 and bf16, so the products are those of the dequantized weights
// and the scale is applied once per output column at the end, as the GEMV does (kernels/gemv.cuh,
// launch_gemv_q). The same numbers as the GEMV up to the order of the fp32 additions.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/w4_convert.cuh"

namespace llama2::kernels {

// Output columns per block, and the K slice of one pipeline stage.
constexpr int kW8A16BlockN = 128;
constexpr int kW8A16BlockK = 64;

// The block shape and the split of K of one product. bm: rows of x per block (16, 32 or 64 with
// 4 warps, 128 with 8); splits > 1: K is cut into `splits` ranges of k_tiles_per_split stages
// whose fp32 partial sums meet in the workspace (the last block of an output tile adds them in
// split order, so the result does not depend on which block finishes first).
struct GemmW8A16Tiling {
  int bm = 0;
  int splits = 1;
  int k_tiles_per_split = 0;
};

// Scratch for split-K, owned by the caller (CudaLinear), one per stream.
struct GemmW8A16Workspace {
  int sm_count = 0;           // multiprocessors of the device: sizes the split
  float* partial = nullptr;   // [partial_elems] fp32 partial sums of the splits
  int64_t partial_elems = 0;  // 0: never split K
  int* counters = nullptr;    // [n_counters] arrival counts, all 0 before the first launch (the
  int n_counters = 0;         //   last block of a tile puts its count back to 0)
};

// Blocks per SM of the bm-row tile that its shared memory allows (228 KB); the kernel caps its
// registers to match, and the planner sizes one wave with it.
constexpr int gemm_w8a16_blocks_per_sm(int bm) {
  return bm == 128 ? 2 : bm == 64 ? 3 : bm == 32 ? 4 : 5;
}

// The tiling the launcher uses for M x N x K: bm from M (force_bm, if not 0, instead), and, when
// the output tiles fill at most half of the blocks the GPU runs at once, split K into as many
// ranges as fit in one wave (each at least 4 stages), as far as ws holds the partial sums.
// Deterministic in its arguments.
GemmW8A16Tiling plan_gemm_w8a16(int M, int N, int K, const GemmW8A16Workspace& ws,
                                int force_bm = 0);
// The partial-sum elements plan_gemm_w8a16 would like for this shape with an unlimited workspace
// (0 when it does not split K): the caller sizes its workspace with the largest over its shapes.
int64_t gemm_w8a16_partial_elems(int M, int N, int K, int sm_count);
// Counters any split product needs on a device of sm_count multiprocessors.
int gemm_w8a16_counters(int sm_count);

// True when launch_gemm_w8a16 takes these operands: K a positive multiple of 16 (whole 16-byte
// pieces of a weight row), x and w 16-byte aligned. The caller decides with it before launching.
template <typename X, typename W>
inline bool gemm_w8a16_fits(const X* x, const W* w, int K) {
  return K >= 16 && K % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

template <typename T, typename W>
struct GemmW8A16Args {
  const T* x = nullptr;  // [M, K] row-major, fp16 or bf16
  // [N, K] row-major, int8_t or __nv_fp8_e4m3; W4Word: [N, K / 8] words of 4-bit weights
  // (kernels/w4_convert.cuh), with K a multiple of 32 and N of 8.
  const W* w = nullptr;
  const float* scale = nullptr;  // [N] per output row of W; W4Word: unused
  T* y = nullptr;                // [M, N]; gate_up_swiglu: act [M, N / 2]
  int M = 0, N = 0, K = 0;
  // true: W is the fused [gate; up] projection [N = 2F, K] and y is act [M, F] with
  // act[m, j] = round_T(silu_mul(round_T(gate sum), round_T(up sum))) (kernels/activation.cuh):
  // the numbers of the plain product into [M, 2F] followed by launch_swiglu, in one launch.
  bool gate_up_swiglu = false;
  // W4Word: [ceil(K / group), N] (scale, bias) pairs and the group (a multiple of
  // kW8A16BlockK): W[n, k] = (q - z) * s, formed in registers as T (one rounding) before the
  // tensor cores take it.
  const uint32_t* sz = nullptr;
  int group = 0;
};

// Raises the shared-memory limit of every instantiation (the larger tiles take 51-104 KB), once
// per process; the launcher does it too on first use, but a caller that captures launches into
// CUDA graphs calls this first (CudaLinear's constructor), outside any capture.
cudaError_t prepare_gemm_w8a16();

// Launches with `tiling` (plan_gemm_w8a16's, or a forced one: tests and benchmarks). Needs
// gemm_w8a16_fits(x, w, K), M, N >= 1, a valid tiling, and with splits > 1 a workspace that holds
// splits x M x N partial sums and a counter per output tile (cudaErrorInvalidValue and the failed
// check otherwise).
template <typename T, typename W>
cudaError_t launch_gemm_w8a16(const GemmW8A16Args<T, W>& args, const GemmW8A16Tiling& tiling,
                              const GemmW8A16Workspace& ws, cudaStream_t stream);

}  // namespace llama2::kernels
