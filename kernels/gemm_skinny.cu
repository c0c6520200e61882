// The skinny GEMM (kernels/gemm_skinny.cuh) on mma.sync.m16n8k16.
//
// Block: 4 warps, BM (16, 32 or 64) rows x 128 output columns. Warp (wn, wk) owns columns
// 64 wn .. 64 wn + 63 (eight n8 tiles) over all BM rows, for k16 steps 2 wk and 2 wk + 1 of each
// stage: a k16 step is BM/16 ldmatrix.x4 of x and four of W for BM/16 x 8 mma (at 64 rows, 4 mma
// per shared-memory load; with 32 columns a warp it was 2.7, and the kernel ran mma.sync at ~190
// TFLOP/s, below the ~270 that reading 7B's weights at HBM speed takes at 64 rows). The two K
// halves meet in the epilogue's shared-memory tile. Per 64-wide K stage, shared memory holds
//   - W: 128 rows x 64 T (128 bytes a row), and x: BM rows x 64 T,
// both with the 16-byte pieces of row r stored at piece ^ (r % 8): the eight rows an ldmatrix
// phase reads then sit in eight different bank groups (rows are 128 bytes apart, which would put
// them all in one).
// Split K: the `splits` blocks of a cluster (blockIdx.x = split) share one 128-column tile; each
// leaves its fp32 sums in its shared memory, and after a cluster barrier block s adds the splits'
// sums, in split order, for its 1/splits share of the tile through distributed shared memory.
#include <cooperative_groups.h>

#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/mma.cuh"

namespace llama2::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;
constexpr int kBN = kSkinnyBlockN;
constexpr int kBK = kSkinnyBlockK;
constexpr int kRowBytes = kBK * 2;  // one stage row of W or x: 64 16-bit elements
static_assert(kBN == 2 * 64 && kBK == 2 * 2 * 16 && kRowBytes == 8 * 16,
              "two warps of 64 columns, two of two k16 steps, eight pieces a row");

template <int BM>
struct SkinnyShape {
  // Stages in flight: ~100 KB of shared memory, two blocks per multiprocessor.
  static constexpr int kStages = BM == 16 ? 6 : BM == 32 ? 5 : 4;
  static constexpr int kMT = BM / 16;  // m16 tiles per warp
  static constexpr int kWBytes = kBN * kRowBytes;
  static constexpr int kXBytes = BM * kRowBytes;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kLdRed = kBN + 8;  // floats per row of the fp32 tile (float4-aligned)
  static constexpr int kSmem = std::max(kStages * kStageBytes, BM* kLdRed * 4);
  static_assert(2 * (kSmem + 1024) <= 232448, "two blocks fit a multiprocessor");
};

// Byte offset of 16-byte piece `piece` of row `row` in a stage operand (the XOR swizzle above).
__device__ __forceinline__ int swizzled(int row, int piece) {
  return row * kRowBytes + ((piece ^ (row & 7)) << 4);
}

template <typename T, int BM>
static __global__ void __launch_bounds__(kThreads, 2)
    gemm_skinny_kernel(const GemmSkinnyArgs<T> a, int k_tiles_per_split) {
  using S = SkinnyShape<BM>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp & 1, wk = warp >> 1;
  const int split = blockIdx.x, splits = gridDim.x;
  const int n0 = blockIdx.y * kBN;
  const int k_tiles = (a.K + kBK - 1) / kBK;
  const int kt0 = split * k_tiles_per_split;
  const int n_kt = max(0, min(k_tiles, kt0 + k_tiles_per_split) - kt0);

  // Stage kt of this split into buffer st. Rows past N or M and pieces past K are zeros (K % 8 ==
  // 0: a piece is wholly inside or outside).
  auto load_w = [&](int kt, int st) {
    unsigned char* ws = smem + st * S::kStageBytes;
    const int k0 = (kt0 + kt) * kBK;
#pragma unroll
    for (int i = 0; i < kBN * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, piece = c & 7;
      const int n = n0 + r, k = k0 + piece * 8;
      const bool ok = n < a.N && k < a.K;
      cp_async16_or_zero(ws + swizzled(r, piece), ok ? a.w + int64_t{n} * a.K + k : a.w, ok);
    }
  };
  auto load_x = [&](int kt, int st) {
    unsigned char* xs = smem + st * S::kStageBytes + S::kWBytes;
    const int k0 = (kt0 + kt) * kBK;
#pragma unroll
    for (int i = 0; i < BM * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, piece = c & 7;
      const int k = k0 + piece * 8;
      const bool ok = r < a.M && k < a.K;
      cp_async16_or_zero(xs + swizzled(r, piece), ok ? a.x + int64_t{r} * a.K + k : a.x, ok);
    }
  };

  // W is immutable: its first stages are requested before the wait for the previous kernel (the
  // producer of x); they join the first group committed below.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < n_kt) load_w(s, s);
  }
  wait_for_previous_grid();
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < n_kt) load_x(s, s);
    cp_async_commit();  // empty groups too: the wait below counts groups
  }

  float acc[S::kMT][8][4];
#pragma unroll
  for (int mt = 0; mt < S::kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
    }
  }

  for (int i = 0; i < n_kt; ++i) {
    cp_async_wait<S::kStages - 2>();  // stage i has landed (for this thread) ...
    __syncthreads();                  // ... for every thread, and stage i - 1 is consumed by all
    const int next = i + S::kStages - 1;
    if (next < n_kt) {
      load_w(next, next % S::kStages);
      load_x(next, next % S::kStages);
    }
    cp_async_commit();

    const uint32_t ws = smem_addr(smem + (i % S::kStages) * S::kStageBytes);
    const uint32_t xs = ws + S::kWBytes;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int ks = wk * 2 + kk;
      // A (x): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) of each m16 tile.
      uint32_t af[S::kMT][4];
#pragma unroll
      for (int mt = 0; mt < S::kMT; ++mt) {
        const int row = mt * 16 + (lane & 15);
        ldsm_x4(xs + swizzled(row, ks * 2 + (lane >> 4)), af[mt]);
      }
      // B (W rows = output columns): per 16 columns, (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15,
      // k 0-7), (n 8-15, k 8-15): b0, b1 of n8 tile 2p, then of tile 2p + 1.
      uint32_t bf[4][4];
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const int n = wn * 64 + p * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldsm_x4(ws + swizzled(n, ks * 2 + ((lane >> 3) & 1)), bf[p]);
      }
#pragma unroll
      for (int mt = 0; mt < S::kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          mma16816<T>(acc[mt][nt], af[mt], bf[nt >> 1][(nt & 1) * 2],
                      bf[nt >> 1][(nt & 1) * 2 + 1]);
        }
      }
    }
  }

  // The block's fp32 tile [BM, kLdRed] in shared memory, over the drained pipeline buffers: the
  // warps of k16 steps 0-1 store their sums, then those of steps 2-3 add theirs (a fixed order).
  cp_async_wait<0>();
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (wk == half) {
#pragma unroll
      for (int mt = 0; mt < S::kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const int col = wn * 64 + nt * 8 + 2 * t;
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // rows g and g + 8 of the m16 tile
            float2* dst = reinterpret_cast<float2*>(red + (mt * 16 + g + 8 * h) * S::kLdRed + col);
            const float2 mine = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            *dst = half == 0 ? mine : make_float2(dst->x + mine.x, dst->y + mine.y);
          }
        }
      }
    }
    __syncthreads();
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's tile is complete and visible to the cluster

  // This block's share of the M x 128 tile, in groups of 4 columns: the splits' sums in split
  // order.
  constexpr int kGroupsPerRow = kBN / 4;
  const int groups = a.M * kGroupsPerRow;
  const int share = (groups + splits - 1) / splits;
  const int end = min(groups, (split + 1) * share);
  for (int gi = split * share + tid; gi < end; gi += kThreads) {
    const int m = gi / kGroupsPerRow, c = (gi % kGroupsPerRow) * 4;
    if (n0 + c >= a.N) continue;  // N % 8 == 0: a group is wholly inside or outside
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < splits; ++r) {
      const float* peer = cluster.map_shared_rank(red, r);
      const float4 v = *reinterpret_cast<const float4*>(peer + m * S::kLdRed + c);
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    const uint2 out = make_uint2(pack2<T>(s.x, s.y), pack2<T>(s.z, s.w));
    *reinterpret_cast<uint2*>(a.y + int64_t{m} * a.N + n0 + c) = out;
  }
  cluster.sync();  // no block leaves while a peer may still read its shared memory
}

template <typename T, int BM>
cudaError_t set_smem_limit() {
  return cudaFuncSetAttribute(gemm_skinny_kernel<T, BM>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, SkinnyShape<BM>::kSmem);
}

template <typename T, int BM>
cudaError_t launch_bm(const GemmSkinnyArgs<T>& a, int splits, cudaStream_t stream) {
  const int k_tiles = static_cast<int>(ceil_div(a.K, kBK));
  const int per_split = static_cast<int>(ceil_div(k_tiles, splits));
  // The splits of one column tile are a cluster (even one split: the kernel's cluster barriers).
  return launch_kernel_in_clusters(
      static_cast<unsigned>(splits), gemm_skinny_kernel<T, BM>,
      dim3(static_cast<unsigned>(splits), static_cast<unsigned>(ceil_div(a.N, kBN))),
      dim3(kThreads), SkinnyShape<BM>::kSmem, stream, a, per_split);
}

}  // namespace

int plan_gemm_skinny_splits(int /*M*/, int N, int K, int sm_count) {
  const int64_t n_tiles = ceil_div(N, kBN), k_tiles = ceil_div(K, kBK);
  const int64_t blocks = 3 * static_cast<int64_t>(std::max(sm_count, 1)) / 2;
  int splits = 1;
  for (int s = 2; s <= kSkinnyPlannedSplits; ++s) {
    if (n_tiles * s <= blocks && k_tiles >= 4 * s) splits = s;
  }
  return splits;
}

cudaError_t prepare_gemm_skinny() {
  static const cudaError_t status = [] {
    for (const cudaError_t e :
         {set_smem_limit<__half, 16>(), set_smem_limit<__half, 32>(), set_smem_limit<__half, 64>(),
          set_smem_limit<__nv_bfloat16, 16>(), set_smem_limit<__nv_bfloat16, 32>(),
          set_smem_limit<__nv_bfloat16, 64>()}) {
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }();
  return status;
}

template <typename T>
cudaError_t launch_gemm_skinny(const GemmSkinnyArgs<T>& a, int splits, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(gemm_skinny_fits(a.x, a.w, a.y, a.M, a.N, a.K),
                        "M " + std::to_string(a.M) + " (1.." + std::to_string(kSkinnyMaxRows) +
                            "), N " + std::to_string(a.N) + ", K " + std::to_string(a.K) +
                            " (positive multiples of 8), x, w, y 16-byte aligned");
  LLAMA2_LAUNCH_REQUIRE(
      splits >= 1 && splits <= kSkinnyMaxSplits,
      "splits " + std::to_string(splits) + ", allowed 1.." + std::to_string(kSkinnyMaxSplits));
  if (const cudaError_t e = prepare_gemm_skinny(); e != cudaSuccess) return e;
  if (a.M <= 16) return launch_bm<T, 16>(a, splits, stream);
  if (a.M <= 32) return launch_bm<T, 32>(a, splits, stream);
  return launch_bm<T, 64>(a, splits, stream);
}

template cudaError_t launch_gemm_skinny<__half>(const GemmSkinnyArgs<__half>&, int, cudaStream_t);
template cudaError_t launch_gemm_skinny<__nv_bfloat16>(const GemmSkinnyArgs<__nv_bfloat16>&, int,
                                                       cudaStream_t);

}  // namespace llama2::kernels
