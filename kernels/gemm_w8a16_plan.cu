// The W8A16 GEMM's planning (kernels/gemm_w8a16.cuh): the row tile, and the split of K that fills
// one wave of the GPU. Host code only; the kernel is kernels/gemm_w8a16.cu.
#include <algorithm>
#include <cstdint>

#include "kernels/dtype.cuh"
#include "kernels/gemm_w8a16.cuh"

namespace llama2::kernels {
namespace {

constexpr int kBK = kW8A16BlockK;
constexpr int kBN = kW8A16BlockN;
constexpr int kMinSplitTiles = 4;  // stages per split at least: fills the pipeline once

// Rows per block tile. Smaller tiles than M re-read W from L2 (one HBM read per column tile,
// the m tiles run together) but give each warp fewer m16 tiles: on an H200 at 7B shapes
// (llama2_bench_kernels w8a16, 2026-12-02, us for qkv / o / gate|up / down) 64 rows took 40.2 /
// 31.5 / 62.1 / 49.5 in 32-row tiles vs 52.7 / 64.0 / 71.1 / 83.3 in 64-row tiles, and 256 rows
// 102.8 / 53.8 / 214.8 / 107.6 in 64-row tiles vs 138.8 / 69.1 / 221.0 / 123.5 in 128-row tiles.
int bm_for(int M) {
  return M <= 16 ? 16 : M <= 64 ? 32 : 64;
}

}  // namespace

GemmW8A16Tiling plan_gemm_w8a16(int M, int N, int K, const GemmW8A16Workspace& ws, int force_bm) {
  GemmW8A16Tiling t;
  t.bm = force_bm != 0 ? force_bm : bm_for(M);
  const int k_tiles = static_cast<int>(ceil_div(K, kBK));
  t.k_tiles_per_split = std::max(k_tiles, 1);
  if (M < 1 || N < 1 || K < 1 || t.bm < 16) return t;
  const int64_t tiles = ceil_div(M, t.bm) * ceil_div(N, kBN);
  // As many blocks as fit the GPU at once (full occupancy, one wave: a second, partial wave
  // would leave SMs idle): fewer blocks keep too few bytes of W in flight for HBM (Little's law:
  // ~30 KB per SM at ~1 us latency; a block has 3 stages of 8 KB in flight).
  const int64_t slots = int64_t{ws.sm_count} * gemm_w8a16_blocks_per_sm(t.bm);
  if (2 * tiles > slots || tiles > ws.n_counters) return t;
  int64_t splits = std::min<int64_t>(slots / tiles, k_tiles / kMinSplitTiles);
  const int64_t room = int64_t{M} * N > 0 ? ws.partial_elems / (int64_t{M} * N) : 0;
  splits = std::min(splits, room);
  if (splits <= 1) return t;
  t.k_tiles_per_split = static_cast<int>(ceil_div(k_tiles, splits));
  t.splits = static_cast<int>(ceil_div(k_tiles, t.k_tiles_per_split));  // no empty split
  return t;
}

int64_t gemm_w8a16_partial_elems(int M, int N, int K, int sm_count) {
  GemmW8A16Workspace ws;
  ws.sm_count = sm_count;
  ws.partial_elems = INT64_MAX;
  ws.n_counters = gemm_w8a16_counters(sm_count);
  const GemmW8A16Tiling t = plan_gemm_w8a16(M, N, K, ws);
  return t.splits > 1 ? int64_t{t.splits} * M * N : 0;
}

int gemm_w8a16_counters(int sm_count) {
  return 3 * sm_count;  // only grids of at most half the slots (5 blocks per SM at most) split K
}

}  // namespace llama2::kernels
