#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/gemm_invariant.cuh"
#include "kernels/mma.cuh"

namespace llama2::kernels {
namespace {

// A tile configuration: BM x BN outputs per block over BK-wide stages, kStages in flight, warps
// WARPS_M x WARPS_N each computing (BM / WARPS_M) x (BN / WARPS_N). Shared rows are padded by 8
// elements (16 bytes) so that ldmatrix's eight row addresses fall in distinct banks.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int kStages = STAGES_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MF = WM / 16, NF = WN / 8;  // m16 and n8 fragments per warp
  static constexpr int kLd = BK + 8;               // shared row stride, elements
  static constexpr int kStageElems = (BM + BN) * kLd;
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageElems * 2;
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "whole mma fragments");
};
// Few rows (decode): 32 output columns per block, so that even a 4096-wide projection spreads over
// 128 blocks, and deep pipelines of W. Many rows (prefill): 128 x 128 tiles, W re-read less.
using SmallTile = Tile<16, 32, 128, 1, 2, 6>;
using MediumTile = Tile<64, 32, 128, 2, 1, 4>;
using LargeTile = Tile<128, 128, 32, 2, 4, 4>;
constexpr int kMediumMaxRows = 256;  // above: LargeTile

// Requests stage `kt` (K columns [kt * BK, kt * BK + BK)) of x's and W's tiles into `s`; rows past
// M or N and columns past K are zero-filled (their sources are not read).
template <class C, typename T>
__device__ __forceinline__ void load_stage(const GemmInvariantArgs<T>& a, int m0, int n0, int kt,
                                           T* s) {
  constexpr int kChunks = C::BK / 8;  // 16-byte pieces per row
  const int k0 = kt * C::BK;
  T* sa = s;
  T* sb = s + C::BM * C::kLd;
  for (int c = threadIdx.x; c < (C::BM + C::BN) * kChunks; c += C::kThreads) {
    const int r = c / kChunks, k = k0 + (c % kChunks) * 8;
    const bool is_a = r < C::BM;
    const int row = is_a ? m0 + r : n0 + (r - C::BM);
    const bool valid = k < a.K && row < (is_a ? a.M : a.N);
    const T* base = is_a ? a.x : a.w;
    const T* src = valid ? base + static_cast<int64_t>(row) * a.K + k : base;
    T* dst = is_a ? sa + r * C::kLd : sb + (r - C::BM) * C::kLd;
    cp_async16_or_zero(dst + (c % kChunks) * 8, src, valid);
  }
}

// The stage's k16 steps in order, each one mma per (m16, n8) fragment of the warp's tile: the
// fixed accumulation order of every output element. Steps at or past K are skipped (never a
// zero step, which could turn an accumulated -0 into +0).
template <class C, typename T>
__device__ __forceinline__ void compute_stage(const T* s, int k0, int K, int wm, int wn,
                                              float (&acc)[C::MF][C::NF][4]) {
  const int lane = threadIdx.x & 31;
  const T* sa = s + (wm * C::WM) * C::kLd;
  const T* sb = s + C::BM * C::kLd + (wn * C::WN) * C::kLd;
#pragma unroll
  for (int ks = 0; ks < C::BK / 16; ++ks) {
    if (k0 + ks * 16 >= K) break;
    uint32_t af[C::MF][4];
#pragma unroll
    for (int mf = 0; mf < C::MF; ++mf) {
      // Lanes 0-15: rows 0-15 at k 0; lanes 16-31: rows 0-15 at k 8 (a[0..3] of mma16816).
      const T* p = sa + (mf * 16 + (lane & 15)) * C::kLd + ks * 16 + (lane >> 4) * 8;
      ldsm_x4(smem_addr(p), af[mf]);
    }
#pragma unroll
    for (int nf = 0; nf < C::NF; nf += 2) {
      // Matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
      const int mi = lane >> 3;
      const T* p = sb + (nf * 8 + (mi >> 1) * 8 + (lane & 7)) * C::kLd + ks * 16 + (mi & 1) * 8;
      uint32_t bf[4];
      ldsm_x4(smem_addr(p), bf);
#pragma unroll
      for (int mf = 0; mf < C::MF; ++mf) {
        mma16816<T>(acc[mf][nf], af[mf], bf[0], bf[1]);
        mma16816<T>(acc[mf][nf + 1], af[mf], bf[2], bf[3]);
      }
    }
  }
}

template <class C, typename T>
__device__ __forceinline__ void store_tile(const GemmInvariantArgs<T>& a, int m0, int n0, int wm,
                                           int wn, const float (&acc)[C::MF][C::NF][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bool pairs = a.N % 2 == 0 && reinterpret_cast<uintptr_t>(a.y) % 4 == 0;
#pragma unroll
  for (int mf = 0; mf < C::MF; ++mf) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm * C::WM + mf * 16 + g + half * 8;
      if (row >= a.M) continue;
      T* yr = a.y + static_cast<int64_t>(row) * a.N;
#pragma unroll
      for (int nf = 0; nf < C::NF; ++nf) {
        const int col = n0 + wn * C::WN + nf * 8 + 2 * t;
        const float v0 = acc[mf][nf][2 * half], v1 = acc[mf][nf][2 * half + 1];
        if (pairs && col + 1 < a.N) {
          const uint32_t packed = pack2<T>(v0, v1);
          *reinterpret_cast<uint32_t*>(yr + col) = packed;
        } else {
          if (col < a.N) yr[col] = from_float<T>(v0);
          if (col + 1 < a.N) yr[col + 1] = from_float<T>(v1);
        }
      }
    }
  }
}

// Grid (column tiles, row tiles): the column tiles run along x so that a few-row product still
// spreads W over the whole GPU.
template <class C, typename T>
static __global__ void __launch_bounds__(C::kThreads)
    gemm_invariant_kernel(const GemmInvariantArgs<T> a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int n0 = blockIdx.x * C::BN, m0 = blockIdx.y * C::BM;
  const int warp = threadIdx.x >> 5;
  const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
  const int k_tiles = (a.K + C::BK - 1) / C::BK;
  float acc[C::MF][C::NF][4] = {};
  wait_for_previous_grid();
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < k_tiles) load_stage<C>(a, m0, n0, s, smem + s * C::kStageElems);
    cp_async_commit();  // empty groups keep the wait count below uniform
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<C::kStages - 2>();
    // Stage kt has landed for every thread; every warp is done with stage kt - 1, whose slot the
    // next request overwrites.
    __syncthreads();
    const int next = kt + C::kStages - 1;
    if (next < k_tiles) load_stage<C>(a, m0, n0, next, smem + (next % C::kStages) * C::kStageElems);
    cp_async_commit();
    compute_stage<C>(smem + (kt % C::kStages) * C::kStageElems, kt * C::BK, a.K, wm, wn, acc);
  }
  cp_async_wait<0>();
  store_tile<C>(a, m0, n0, wm, wn, acc);
}

template <class C, typename T>
cudaError_t launch_tile(const GemmInvariantArgs<T>& a, cudaStream_t stream) {
  const dim3 grid((a.N + C::BN - 1) / C::BN, (a.M + C::BM - 1) / C::BM);
  return launch_kernel(gemm_invariant_kernel<C, T>, grid, dim3(C::kThreads), C::kSmemBytes, stream,
                       a);
}

template <class C, typename T>
cudaError_t allow_smem() {
  return cudaFuncSetAttribute(gemm_invariant_kernel<C, T>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(C::kSmemBytes));
}

}  // namespace

cudaError_t prepare_gemm_invariant() {
  for (cudaError_t e :
       {allow_smem<SmallTile, __half>(), allow_smem<MediumTile, __half>(),
        allow_smem<LargeTile, __half>(), allow_smem<SmallTile, __nv_bfloat16>(),
        allow_smem<MediumTile, __nv_bfloat16>(), allow_smem<LargeTile, __nv_bfloat16>()}) {
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <typename T>
cudaError_t launch_gemm_invariant(const GemmInvariantArgs<T>& a, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(a.M >= 0, "M " + std::to_string(a.M));
  if (a.M == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(a.x != nullptr && a.w != nullptr && a.y != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(gemm_invariant_fits(a.x, a.w, a.N, a.K),
                        "N " + std::to_string(a.N) + ", K " + std::to_string(a.K) +
                            " (K a multiple of 8, x and w 16-byte aligned)");
  // The tile only decides who computes an element, never how (gemm_invariant.cuh).
  const cudaError_t e = a.M <= SmallTile::BM    ? launch_tile<SmallTile>(a, stream)
                        : a.M <= kMediumMaxRows ? launch_tile<MediumTile>(a, stream)
                                                : launch_tile<LargeTile>(a, stream);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

template cudaError_t launch_gemm_invariant<__half>(const GemmInvariantArgs<__half>&, cudaStream_t);
template cudaError_t launch_gemm_invariant<__nv_bfloat16>(const GemmInvariantArgs<__nv_bfloat16>&,
                                                          cudaStream_t);

}  // namespace llama2::kernels
