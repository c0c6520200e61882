// Tensor-core GEMM for 16-bit weights and few rows: y = x . W^T with M <= 64 (decode batches of
// 2-64 sequences, short prefill chunks such as a prefix-cache hit's suffix). Such a product is
// bound by reading W once; cuBLAS reads 7B's projections at 2.5-3.5 TB/s there (13.3 us for the
// 33 MB o-projection at 64 rows, llama2_bench_kernels w8a16, 2026-12-02), against ~4.3 TB/s for a
// plain copy, because 128-column tiles give the smaller projections fewer blocks than the GPU has
// multiprocessors. Here:
//   - a block computes all M rows (padded to 16, 32 or 64) of 128 output columns over a range of
//     K, streaming W through shared memory in 64-wide stages with cp.async (4-6 in flight);
//   - K is split over the blocks of a thread-block cluster (sm_90) so that the product fills the
//     GPU; the splits' fp32 partial sums meet through distributed shared memory and are added in
//     split order, so the result does not depend on timing and no global workspace exists;
//   - a launch's first W stages are requested before it waits for the previous kernel
//     (programmatic dependent launch): W does not depend on it.
//
//   y[m, n] = round_T(sum_k x[m, k] * W[n, k])      fp32 accumulation (mma.sync.m16n8k16)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

constexpr int kSkinnyMaxRows = 64;       // M of one launch at most
constexpr int kSkinnyBlockN = 128;       // output columns per block
constexpr int kSkinnyBlockK = 64;        // K of one pipeline stage
constexpr int kSkinnyMaxSplits = 8;      // K splits = blocks of a cluster (the portable limit)
constexpr int kSkinnyPlannedSplits = 6;  // the planner's most: clusters of 8 measured slower

template <typename T>
struct GemmSkinnyArgs {
  const T* x = nullptr;  // [M, K] row-major, fp16 or bf16
  const T* w = nullptr;  // [N, K] row-major (nn.Linear's weight)
  T* y = nullptr;        // [M, N] row-major; must not overlap x
  int M = 0, N = 0, K = 0;
};

// True when launch_gemm_skinny takes these operands: 1 <= M <= kSkinnyMaxRows, N and K positive
// multiples of 8 (whole 16-byte pieces of every row), x, w and y non-null and 16-byte aligned.
inline bool gemm_skinny_fits(const void* x, const void* w, const void* y, int M, int N, int K) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return M >= 1 && M <= kSkinnyMaxRows && N >= 8 && N % 8 == 0 && K >= 8 && K % 8 == 0 &&
         x != nullptr && w != nullptr && y != nullptr && aligned(x) && aligned(w) && aligned(y);
}

// The K splits for M x N x K on a GPU of sm_count multiprocessors (the caller passes them to the
// launcher): the most, up to kSkinnyPlannedSplits, that keep the product within 1.5 blocks per
// multiprocessor with every split at least four stages long. Fitted to llama2_bench_kernels skinny
// on one H200 (logs: benchmarks/logs/2026-12-02-h200-s17/3-skinny in the git history): 7B's o and
// down (32 column tiles) were fastest at 6 splits (12.0 and 25.4 us at one row; 8 splits 16.0 and
// 32.2), 13B's (40 tiles) at 3-4. Deterministic in its arguments.
int plan_gemm_skinny_splits(int M, int N, int K, int sm_count);

// Raises the shared-memory limit of every instantiation (up to ~110 KB per block), once per
// process; the launcher does it too on first use, but a caller that captures launches into CUDA
// graphs calls this first, outside any capture.
cudaError_t prepare_gemm_skinny();

// Launches with `splits` K ranges (1..kSkinnyMaxSplits; plan_gemm_skinny_splits's, or a forced
// one for tests and benchmarks; splits past K's stages are empty and add zero). Needs
// gemm_skinny_fits (cudaErrorInvalidValue and the failed check otherwise). Same y for every
// `splits` up to the order of the fp32 additions, and the same bits for the same `splits` on every
// run.
template <typename T>
cudaError_t launch_gemm_skinny(const GemmSkinnyArgs<T>& args, int splits, cudaStream_t stream);

}  // namespace llama2::kernels
