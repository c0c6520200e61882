// The batch-invariant GEMM of --deterministic (docs/deterministic.md): y = x . W^T for 16-bit x and
// W, whose every output element is computed by the same arithmetic whatever the row count M, the
// row's place among the M rows, or the tile configuration that covers it:
//
//   acc = 0; for k0 = 0, 16, 32, ... < K (in order): acc = mma.m16n8k16(x[m, k0:k0+16],
//   W[n, k0:k0+16], acc) (fp32 accumulate); y[m, n] = round_T(acc)
//
// One accumulator chain per element, no split of K (so no partial sums to combine), no atomics.
// The mma instruction computes each element of its 16x8 tile from that element's row, column and
// accumulator only, so which rows share a tile (padding rows are zeros) cannot change a row's
// bits, and the tile shape (chosen here by M, for speed) only decides which threads compute which
// elements. Against the default products (linear.h: the GEMV for one row, the skinny GEMM with K
// split by M, cuBLAS whose heuristic picks the algorithm and split-K by M), a row here gets the
// same numbers alone and in any batch, at the cost of speed: mma.sync instead of Hopper's wgmma
// for large M, and no split of K for small M (the few-row products stream W with many column
// tiles and a deep cp.async pipeline instead).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

template <typename T>
struct GemmInvariantArgs {
  const T* x = nullptr;  // [M, K] row-major, fp16 or bf16
  const T* w = nullptr;  // [N, K] row-major (nn.Linear's weight)
  T* y = nullptr;        // [M, N] row-major; must not overlap x or w
  int M = 0, N = 0, K = 0;
};

// True when launch_gemm_invariant takes these operands: M >= 0, N >= 1, K a positive multiple of
// 8 (whole 16-byte pieces of each row), x and w 16-byte aligned.
inline bool gemm_invariant_fits(const void* x, const void* w, int N, int K) {
  return N > 0 && K > 0 && K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// Lets the kernels use more than 48 KB of shared memory; call once per device before launching
// (and before any graph capture).
cudaError_t prepare_gemm_invariant();

// y[m, n] = round_T(sum_k x[m, k] * W[n, k]) in the fixed order above. Tiles (rows x columns x K
// per stage, stages): M <= 16: 16 x 32 x 128 x 6 (two warps; a 7B o projection gives 128 blocks);
// M <= 256: 64 x 32 x 128 x 4 (two warps); above: 128 x 128 x 32 x 4 (eight warps). T: __half,
// __nv_bfloat16.
template <typename T>
cudaError_t launch_gemm_invariant(const GemmInvariantArgs<T>& args, cudaStream_t stream);

}  // namespace llama2::kernels
