// The W8A16 GEMM (kernels/gemm_w8a16.cuh) on mma.sync.m16n8k16.
//
// A block computes a bm x 128 tile of y with 4 warps side by side along N (32 columns = 4 n8
// tiles each; bm = 128 adds a second row of 4 warps), every warp over all of its rows, so each
// weight byte is converted once per block. Per 64-wide K stage, 4 stages in flight (cp.async):
//   - W: 128 rows x 64 bytes, dense (no padding needed, see below);
//   - x: bm rows x 64 T, rows padded by 16 bytes.
// K order inside a stage. A lane (g = lane / 4, t = lane % 4) supplies k = 2t, 2t+1, 2t+8, 2t+9
// of each k16 step for both operands. Any permutation of k applied to x and W alike leaves the
// sums unchanged, so lane t takes the 16 consecutive stage columns 16t .. 16t+15 and uses bytes
// 16t + 4s .. 16t + 4s + 3 in step s (s = 0..3) as its k = 2t, 2t+1, 2t+8, 2t+9. Then:
//   - the B fragments of a whole stage for one n8 tile are ONE 16-byte shared load per lane (the
//     8 lanes of a load phase read two whole 64-byte rows: conflict-free without padding), one
//     32-bit word per step, converted to two T pairs with a few integer / half instructions;
//   - the A fragments of a stage for one m16 tile are four 16-byte loads per lane (columns 16t ..
//     16t+15 of rows g and g+8; the 16-byte row padding puts the 8 lanes of a phase on 8
//     different bank quads), where ldmatrix would need the natural order.
// Split K: each split stores its fp32 sums in the workspace, the last block to arrive at a tile
// (atomic counter) adds the splits in order 0..S-1, scales and writes y.
// [gate; up] with SwiGLU (the decode batch's gate|up projection, as launch_gemv_q_gate_up_swiglu
// does for a few rows): a block loads gate rows j0..j0+63 and the up rows of the same columns, the
// gate warps leave round_T(gate) in shared memory and the up warps write act; with split K the
// last block combines both halves from the workspace. No [M, 2F] intermediate, one launch less.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/activation.cuh"
#include "kernels/dtype.cuh"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/mma.cuh"
#include "kernels/w4_convert.cuh"

namespace llama2::kernels {
namespace {

constexpr int kBN = kW8A16BlockN;
constexpr int kBK = kW8A16BlockK;
constexpr int kStages = 4;

template <typename W>
constexpr bool kIsW4 = std::is_same_v<W, W4Word>;

// kW4: W's stage is 128 rows x 32 bytes (64 4-bit columns) plus the stage's group (scale, bias)
// words of the 128 rows.
template <typename T, int BM, bool kW4 = false>
struct W8A16Shape {
  static constexpr int kWarpsM = BM == 128 ? 2 : 1;
  static constexpr int kThreads = 128 * kWarpsM;
  static constexpr int kWarpRows = BM / kWarpsM;
  static constexpr int kMT = kWarpRows / 16;  // m16 tiles per warp
  static constexpr int kLdX = kBK + 8;        // T per x row in shared memory (16 bytes padding)
  static constexpr int kWRowBytes = kW4 ? kBK / 2 : kBK;
  static constexpr int kWBytes = kBN * kWRowBytes;
  static constexpr int kSzBytes = kW4 ? kBN * 4 : 0;
  static constexpr int kXBytes = BM * kLdX * static_cast<int>(sizeof(T));
  static constexpr int kStageBytes = kWBytes + kSzBytes + kXBytes;
  static constexpr int kSmem = kStages * kStageBytes;
  // Blocks per SM that the shared memory allows (228 KB): registers are capped to match (the
  // [gate; up] epilogue otherwise took 168-174 registers at bm 64 and cost a third of the blocks).
  static constexpr int kMinBlocks = gemm_w8a16_blocks_per_sm(BM);
  static_assert(kMinBlocks * (kSmem + 1024) <= 232448, "the blocks fit an SM's shared memory");
  static_assert(kWarpRows % 16 == 0 && kStageBytes % 16 == 0, "whole m16 tiles, aligned stages");
  static_assert((kWBytes / 16) % kThreads == 0 && (BM * kBK / 8) % kThreads == 0,
                "every thread copies the same number of 16-byte pieces");
};

template <typename T, typename W>
struct W8A16Params {
  const T* x;
  const W* w;
  const float* scale;  // [N]; W4: nullptr (the scales are in sz)
  const uint32_t* sz;  // W4: [ceil(K / group), N] (kernels/w4_convert.cuh)
  int group;           // W4: columns per group, a multiple of kBK
  T* y;
  int M, N, K;
  int k_tiles_per_split;
  float* partial;   // [splits, M, N] when gridDim.z > 1
  int* counters;    // [m tiles x n tiles]
  bool pair_store;  // y rows hold whole (even, odd) column pairs at 4-byte alignment
};

// The factor of output column n's sums: its row scale; 4-bit weights carry theirs per group.
template <typename T, typename W>
__device__ __forceinline__ float col_scale(const W8A16Params<T, W>& p, int n) {
  if constexpr (kIsW4<W>) {
    return 1.f;
  } else {
    return p.scale[n];
  }
}

// Four weights (one 32-bit word, the first in the low byte) as two registers of T pairs (the
// first two, the last two), exactly.
template <typename T, typename W>
__device__ __forceinline__ void weights_to_pairs(uint32_t w, uint32_t& lo, uint32_t& hi) {
  if constexpr (std::is_same_v<W, int8_t>) {
    const uint32_t u = w ^ 0x80808080u;  // each byte: v + 128, unsigned
    if constexpr (std::is_same_v<T, __half>) {
      // fp16 0x64XX is 1024 + XX (spacing 1 in [1024, 2048)): subtract 1024 + 128.
      const uint32_t l = __byte_perm(u, 0x64646464u, 0x4140);
      const uint32_t h = __byte_perm(u, 0x64646464u, 0x4342);
      const uint32_t magic = 0x64806480u;
      __half2 lh, hh, mh;
      memcpy(&lh, &l, 4);
      memcpy(&hh, &h, 4);
      memcpy(&mh, &magic, 4);
      lh = __hsub2(lh, mh);
      hh = __hsub2(hh, mh);
      memcpy(&lo, &lh, 4);
      memcpy(&hi, &hh, 4);
    } else {
      // bf16 has too few mantissa bits for that trick: fp32 0x4B0000XX is 2^23 + XX.
      float f[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        f[i] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650 | i)) - 8388736.f;
      }
      lo = pack2<T>(f[0], f[1]);
      hi = pack2<T>(f[2], f[3]);
    }
  } else {
    uint32_t l, h;  // e4m3 pairs -> f16x2 (sm_89+, exact)
    asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n"
        " cvt.rn.f16x2.e4m3x2 %1, b;\n}"
        : "=r"(l), "=r"(h)
        : "r"(w));
    if constexpr (std::is_same_v<T, __half>) {
      lo = l;
      hi = h;
    } else {  // every e4m3 value is a bf16 value too
      __half2 lh, hh;
      memcpy(&lh, &l, 4);
      memcpy(&hh, &h, 4);
      const float2 a = __half22float2(lh), b = __half22float2(hh);
      lo = pack2<T>(a.x, a.y);
      hi = pack2<T>(b.x, b.y);
    }
  }
}

// kSwiGLU: W is the fused [gate; up] weight [N = 2F, K] and y is act [M, F] (see the header);
// a block's 128 W rows are then gate rows j0 .. j0+63 and up rows F + j0 .. F + j0 + 63 of its 64
// act columns, so gate and up of one column meet in the block.
template <typename T, typename W, int BM, bool kSwiGLU>
static __global__ void __launch_bounds__(W8A16Shape<T, BM, kIsW4<W>>::kThreads,
                                         W8A16Shape<T, BM, kIsW4<W>>::kMinBlocks)
    gemm_w8a16_kernel(const W8A16Params<T, W> p) {
  wait_for_previous_grid();
  constexpr bool kW4 = kIsW4<W>;
  using S = W8A16Shape<T, BM, kW4>;
  constexpr int kThreads = S::kThreads, kMT = S::kMT, kLdX = S::kLdX;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / 4, wn = warp % 4;
  const int g = lane >> 2, t = lane & 3;
  // m tiles vary fastest: the blocks that share a W tile run together and W comes from HBM once.
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * kBN;
  const int k_tiles = (p.K + kBK - 1) / kBK;
  const int kt_begin = blockIdx.z * p.k_tiles_per_split;
  const int n_kt = min(k_tiles, kt_begin + p.k_tiles_per_split) - kt_begin;
  const int F = p.N / 2, j0 = blockIdx.y * (kBN / 2);  // kSwiGLU: act columns j0 .. j0 + 63
  // The W row of the block's local column c (0..127), and whether it exists.
  auto w_row = [&](int c) {
    if constexpr (kSwiGLU) return c < kBN / 2 ? j0 + c : F + j0 + c - kBN / 2;
    return n0 + c;
  };
  auto w_row_ok = [&](int c) {
    if constexpr (kSwiGLU) return j0 + c % (kBN / 2) < F;
    return n0 + c < p.N;
  };

  // Stage kt -> buffer st. Rows past M or N and columns past K are zeros (K % 16 == 0: every
  // 16-byte piece is wholly inside or outside).
  auto load = [&](int kt, int st) {
    const int k0 = kt * kBK;
    unsigned char* ws = smem + st * S::kStageBytes;
    // 16-byte pieces of a W row per stage: 4 (bytes) or 2 (4-bit: 32 columns each).
    constexpr int kPieces = S::kWRowBytes / 16, kCols = kBK / kPieces;
    const auto* wb = reinterpret_cast<const unsigned char*>(p.w);
    const int64_t row_bytes = kW4 ? int64_t{p.K} / 2 : p.K;
#pragma unroll
    for (int i = 0; i < S::kWBytes / 16 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c / kPieces, piece = c % kPieces;
      const int n = w_row(r), k = k0 + piece * kCols;
      const bool ok = w_row_ok(r) && k < p.K;
      cp_async16_or_zero(ws + r * S::kWRowBytes + piece * 16,
                         ok ? wb + n * row_bytes + k * S::kWRowBytes / kBK : wb, ok);
    }
    if constexpr (kW4) {
      // The (scale, bias) words of the stage's group for the 128 rows: 4 rows per piece (N % 8
      // == 0, so the 4 rows of a piece are all in or all out, and gate|up's halves split on a
      // piece boundary).
      if (tid < kBN / 4) {
        const int r = tid * 4;
        const bool ok = w_row_ok(r) && k0 < p.K;
        const uint32_t* src = p.sz + int64_t{k0 / p.group} * p.N + w_row(r);
        cp_async16_or_zero(ws + S::kWBytes + r * 4, ok ? src : p.sz, ok);
      }
    }
    T* xs = reinterpret_cast<T*>(ws + S::kWBytes + S::kSzBytes);
#pragma unroll
    for (int i = 0; i < BM * kBK / 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, piece = c & 7;
      const int m = m0 + r, k = k0 + piece * 8;
      const bool ok = m < p.M && k < p.K;
      cp_async16_or_zero(xs + r * kLdX + piece * 8, ok ? p.x + int64_t{m} * p.K + k : p.x, ok);
    }
  };

  float acc[kMT][4][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kt) load(kt_begin + s, s);
    cp_async_commit();  // empty groups too: the wait below counts groups
  }
  for (int i = 0; i < n_kt; ++i) {
    cp_async_wait<kStages - 2>();  // stage i has landed (for this thread) ...
    __syncthreads();               // ... for every thread, and stage i - 1 is consumed by all
    if (i + kStages - 1 < n_kt) load(kt_begin + i + kStages - 1, (i + kStages - 1) % kStages);
    cp_async_commit();

    const unsigned char* ws = smem + (i % kStages) * S::kStageBytes;
    const T* xs = reinterpret_cast<const T*>(ws + S::kWBytes + S::kSzBytes);
    uint32_t b[4][4][2];  // [n8 tile][k16 step][b0, b1]
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int r = wn * 32 + nt * 8 + g;
      if constexpr (kW4) {
        // The lane's 16 columns 16t .. 16t+15 are two words; step s takes columns 4s .. 4s+3 of
        // them: pairs 2 (s % 2) and 2 (s % 2) + 1 of word s / 2, times 16 s (w4_convert.cuh).
        const uint2 raw = *reinterpret_cast<const uint2*>(ws + r * S::kWRowBytes + t * 8);
        W4Pair<T> bias2, scale16;
        w4_group<T>(*reinterpret_cast<const uint32_t*>(ws + S::kWBytes + r * 4), bias2, scale16);
        W4Pair<T> d[2][4];  // [word][pair]
        w4_word_pairs<T>(raw.x, bias2, w4_bias_hi<T>(bias2), d[0]);
        w4_word_pairs<T>(raw.y, bias2, w4_bias_hi<T>(bias2), d[1]);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            b[nt][s][h] = w4_as_bits<T>(__hmul2(d[s / 2][2 * (s % 2) + h], scale16));
          }
        }
      } else {
        const uint4 raw = *reinterpret_cast<const uint4*>(ws + r * kBK + t * 16);
        weights_to_pairs<T, W>(raw.x, b[nt][0][0], b[nt][0][1]);
        weights_to_pairs<T, W>(raw.y, b[nt][1][0], b[nt][1][1]);
        weights_to_pairs<T, W>(raw.z, b[nt][2][0], b[nt][2][1]);
        weights_to_pairs<T, W>(raw.w, b[nt][3][0], b[nt][3][1]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const T* row = xs + (wm * S::kWarpRows + mt * 16 + g) * kLdX + t * 16;
      // Columns 16t .. 16t+15 of rows g and g + 8, two per word (16-byte shared loads).
      const uint4 l0 = *reinterpret_cast<const uint4*>(row);
      const uint4 l1 = *reinterpret_cast<const uint4*>(row + 8);
      const uint4 h0 = *reinterpret_cast<const uint4*>(row + 8 * kLdX);
      const uint4 h1 = *reinterpret_cast<const uint4*>(row + 8 * kLdX + 8);
      const uint32_t lo[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
      const uint32_t hi[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) mma16816<T>(acc[mt][nt], a, b[nt][s][0], b[nt][s][1]);
      }
    }
  }
  cp_async_wait<0>();

  // acc[mt][nt][2h + j]: row m0 + wm * kWarpRows + mt * 16 + g + 8h, column n0 + wn * 32 +
  // nt * 8 + 2t + j.
  const int row0 = m0 + wm * S::kWarpRows + g, c0 = wn * 32 + 2 * t, col0 = n0 + c0;
  if (kSwiGLU && gridDim.z == 1) {
    // Gate warps (columns 0..63) leave round_T(gate) in shared memory, up warps finish.
    constexpr int kLdG = kBN / 2 + 1;
    float* gs = reinterpret_cast<float*>(smem);  // [BM][kLdG], over the drained stages
    static_assert(BM * kLdG * 4 <= S::kSmem, "gate tile fits the stages");
    __syncthreads();
    if (wn < 2) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = c0 + nt * 8 + (e & 1), r = row0 - m0 + mt * 16 + 8 * (e >> 1);
            const float s = w_row_ok(c) ? col_scale(p, j0 + c) : 0.f;
            gs[r * kLdG + c] = round_to<T>(acc[mt][nt][e] * s);
          }
        }
      }
    }
    __syncthreads();
    if (wn >= 2) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = c0 - kBN / 2 + nt * 8 + (e & 1), r = row0 - m0 + mt * 16 + 8 * (e >> 1);
            const int j = j0 + c, m = m0 + r;
            if (j >= F || m >= p.M) continue;
            const float u = round_to<T>(acc[mt][nt][e] * col_scale(p, F + j));
            p.y[int64_t{m} * F + j] = from_float<T>(silu_mul<T>(gs[r * kLdG + c], u));
          }
        }
      }
    }
    return;
  }
  if (!kSwiGLU && gridDim.z == 1) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int n = col0 + nt * 8;
        if (n >= p.N) continue;
        const float s0 = col_scale(p, n), s1 = n + 1 < p.N ? col_scale(p, n + 1) : 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = row0 + mt * 16 + 8 * h;
          if (m >= p.M) continue;
          T* dst = p.y + int64_t{m} * p.N + n;
          const float v0 = acc[mt][nt][2 * h] * s0, v1 = acc[mt][nt][2 * h + 1] * s1;
          if (p.pair_store) {
            *reinterpret_cast<uint32_t*>(dst) = pack2<T>(v0, v1);
          } else {
            dst[0] = from_float<T>(v0);
            if (n + 1 < p.N) dst[1] = from_float<T>(v1);
          }
        }
      }
    }
    return;
  }

  // Split K: this split's sums, then the last block of the tile adds them all.
  const int64_t MN = int64_t{p.M} * p.N;
  float* part = p.partial + blockIdx.z * MN;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = c0 + nt * 8, n = w_row(c);  // c, c + 1: the same half (gate or up)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = row0 + mt * 16 + 8 * h;
        if (m >= p.M || !w_row_ok(c)) continue;
        float* dst = part + int64_t{m} * p.N + n;
        dst[0] = acc[mt][nt][2 * h];
        if (w_row_ok(c + 1)) dst[1] = acc[mt][nt][2 * h + 1];
      }
    }
  }
  __threadfence();  // this block's sums are visible device-wide before it is counted
  __syncthreads();
  __shared__ int last;
  if (tid == 0) {
    int* counter = p.counters + blockIdx.y * gridDim.x + blockIdx.x;
    last = atomicAdd(counter, 1) == static_cast<int>(gridDim.z) - 1;
    if (last) *counter = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The splits are added in order (deterministic). Every load of a thread is independent of its
  // adds, so all of a split's loads are in flight together: the first version added element by
  // element, one L2 round trip per element and split (64 x 11 per thread for o_proj at batch 64),
  // and that serial tail made the whole GEMM slower than dequantize + cuBLAS (7B b64, H200).
  const int Z = static_cast<int>(gridDim.z);
  if constexpr (kSwiGLU) {
    // Act column j0 + tid % 64 of rows tid / 64 + i * kStep: its gate sum at j, up sum at F + j.
    constexpr int kStep = kThreads / (kBN / 2), kPer = BM / kStep;
    const int j = j0 + tid % (kBN / 2), r0 = m0 + tid / (kBN / 2);
    if (j >= F) return;
    float gs[kPer], us[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) gs[i] = us[i] = 0.f;
    for (int z = 0; z < Z; ++z) {
      const float* src = p.partial + z * MN + int64_t{r0} * p.N + j;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (r0 + i * kStep < p.M) {
          gs[i] += __ldcg(src + int64_t{i} * kStep * p.N);
          us[i] += __ldcg(src + int64_t{i} * kStep * p.N + F);
        }
      }
    }
    const float sg = col_scale(p, j), su = col_scale(p, F + j);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int m = r0 + i * kStep;
      if (m < p.M) {
        p.y[int64_t{m} * F + j] =
            from_float<T>(silu_mul<T>(round_to<T>(gs[i] * sg), round_to<T>(us[i] * su)));
      }
    }
  } else {
    // Columns n .. n+3 (n = n0 + 4 (tid % 32)) of rows tid / 32 + i * kStep: 16-byte loads when
    // N % 4 == 0.
    constexpr int kStep = kThreads / (kBN / 4), kPer = BM / kStep;
    const int n = n0 + tid % (kBN / 4) * 4, r0 = m0 + tid / (kBN / 4);
    if (n >= p.N) return;
    const bool vec = p.N % 4 == 0;
    float sum[kPer][4];
#pragma unroll
    for (int i = 0; i < kPer; ++i) sum[i][0] = sum[i][1] = sum[i][2] = sum[i][3] = 0.f;
    for (int z = 0; z < Z; ++z) {
      const float* src = p.partial + z * MN + int64_t{r0} * p.N + n;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        if (r0 + i * kStep >= p.M) continue;
        const float* at = src + int64_t{i} * kStep * p.N;
        if (vec) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(at));
          sum[i][0] += v.x;
          sum[i][1] += v.y;
          sum[i][2] += v.z;
          sum[i][3] += v.w;
        } else {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            if (n + c < p.N) sum[i][c] += __ldcg(at + c);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int m = r0 + i * kStep;
      if (m >= p.M) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (n + c < p.N) {
          p.y[int64_t{m} * p.N + n + c] = from_float<T>(sum[i][c] * col_scale(p, n + c));
        }
      }
    }
  }
}

// Lets the kernel take its shared memory (above the default 48 KB), once per instantiation and
// process (one device per rank): prepare_gemm_w8a16 does it for all before any graph capture, as
// cudaFuncSetAttribute is not a call to make while a stream is being captured.
template <typename T, typename W, int BM>
cudaError_t allow_smem() {
  static std::atomic<bool> done{false};
  constexpr int kSmem = W8A16Shape<T, BM, kIsW4<W>>::kSmem;
  if constexpr (kSmem <= 48 * 1024) return cudaSuccess;
  if (done.load(std::memory_order_acquire)) return cudaSuccess;
  for (const cudaError_t rc :
       {cudaFuncSetAttribute(gemm_w8a16_kernel<T, W, BM, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        cudaFuncSetAttribute(gemm_w8a16_kernel<T, W, BM, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem)}) {
    if (rc != cudaSuccess) return rc;
  }
  done.store(true, std::memory_order_release);
  return cudaSuccess;
}

template <typename T, typename W>
cudaError_t allow_smem_all() {
  for (const cudaError_t rc : {allow_smem<T, W, 16>(), allow_smem<T, W, 32>(),
                               allow_smem<T, W, 64>(), allow_smem<T, W, 128>()}) {
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

template <typename T, typename W, int BM>
cudaError_t launch_bm(const W8A16Params<T, W>& p, bool swiglu, int splits, cudaStream_t stream) {
  using S = W8A16Shape<T, BM, kIsW4<W>>;
  auto* kernel = swiglu ? gemm_w8a16_kernel<T, W, BM, true> : gemm_w8a16_kernel<T, W, BM, false>;
  const cudaError_t rc = allow_smem<T, W, BM>();
  if (rc != cudaSuccess) return rc;
  const dim3 grid(static_cast<unsigned>(ceil_div(p.M, BM)),
                  static_cast<unsigned>(ceil_div(p.N, kBN)), static_cast<unsigned>(splits));
  return launch_kernel(kernel, grid, S::kThreads, S::kSmem, stream, p);
}

}  // namespace

cudaError_t prepare_gemm_w8a16() {
  for (const cudaError_t rc :
       {allow_smem_all<__half, int8_t>(), allow_smem_all<__nv_bfloat16, int8_t>(),
        allow_smem_all<__half, __nv_fp8_e4m3>(), allow_smem_all<__nv_bfloat16, __nv_fp8_e4m3>(),
        allow_smem_all<__half, W4Word>(), allow_smem_all<__nv_bfloat16, W4Word>()}) {
    if (rc != cudaSuccess) return rc;
  }
  return cudaSuccess;
}

template <typename T, typename W>
cudaError_t launch_gemm_w8a16(const GemmW8A16Args<T, W>& a, const GemmW8A16Tiling& t,
                              const GemmW8A16Workspace& ws, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(a.M >= 1 && a.N >= 1,
                        "M " + std::to_string(a.M) + ", N " + std::to_string(a.N));
  if constexpr (kIsW4<W>) {
    LLAMA2_LAUNCH_REQUIRE(a.K >= 32 && a.K % 32 == 0 && a.group >= kBK && a.group % kBK == 0 &&
                              a.N % 8 == 0 && a.sz != nullptr,
                          "4-bit: K " + std::to_string(a.K) + " (a multiple of 32), group " +
                              std::to_string(a.group) + " (a multiple of 64), N " +
                              std::to_string(a.N) + " (a multiple of 8), sz given");
  } else {
    LLAMA2_LAUNCH_REQUIRE(
        a.K >= 16 && a.K % 16 == 0,
        "K " + std::to_string(a.K) +
            " must be a positive multiple of 16 (16-byte pieces of a weight row)");
  }
  LLAMA2_LAUNCH_REQUIRE(t.bm == 16 || t.bm == 32 || t.bm == 64 || t.bm == 128,
                        "bm " + std::to_string(t.bm) + ", allowed 16, 32, 64, 128");
  LLAMA2_LAUNCH_REQUIRE(!a.gate_up_swiglu || a.N % 2 == 0,
                        "N " + std::to_string(a.N) + " of [gate; up] must be even");
  LLAMA2_LAUNCH_REQUIRE(ceil_div(a.N, kBN) <= 65535,
                        "N " + std::to_string(a.N) + ", allowed up to 65535 x 128");
  const int64_t k_tiles = ceil_div(a.K, kBK);
  LLAMA2_LAUNCH_REQUIRE(t.splits >= 1 && t.k_tiles_per_split >= 1 &&
                            int64_t{t.splits - 1} * t.k_tiles_per_split < k_tiles &&
                            int64_t{t.splits} * t.k_tiles_per_split >= k_tiles,
                        "splits " + std::to_string(t.splits) + " x " +
                            std::to_string(t.k_tiles_per_split) + " stages for " +
                            std::to_string(k_tiles) + " stages of K");
  const int64_t tiles = ceil_div(a.M, t.bm) * ceil_div(a.N, kBN);
  LLAMA2_LAUNCH_REQUIRE(
      t.splits == 1 ||
          (ws.partial != nullptr && ws.counters != nullptr &&
           int64_t{t.splits} * a.M * a.N <= ws.partial_elems && tiles <= ws.n_counters),
      "split K needs " + std::to_string(int64_t{t.splits} * a.M * a.N) + " partial sums and " +
          std::to_string(tiles) + " counters; the workspace has " +
          std::to_string(ws.partial_elems) + " and " + std::to_string(ws.n_counters));
  LLAMA2_LAUNCH_REQUIRE(
      a.x != nullptr && a.w != nullptr && a.y != nullptr && (kIsW4<W> || a.scale != nullptr), "");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(a.x, 16) && is_aligned(a.w, 16), "x and w 16-byte aligned");
  W8A16Params<T, W> p{a.x,
                      a.w,
                      a.scale,
                      a.sz,
                      a.group,
                      a.y,
                      a.M,
                      a.N,
                      a.K,
                      t.k_tiles_per_split,
                      ws.partial,
                      ws.counters,
                      !a.gate_up_swiglu && a.N % 2 == 0 && is_aligned(a.y, 4)};
  switch (t.bm) {
    case 16:
      return launch_bm<T, W, 16>(p, a.gate_up_swiglu, t.splits, stream);
    case 32:
      return launch_bm<T, W, 32>(p, a.gate_up_swiglu, t.splits, stream);
    case 64:
      return launch_bm<T, W, 64>(p, a.gate_up_swiglu, t.splits, stream);
    default:
      return launch_bm<T, W, 128>(p, a.gate_up_swiglu, t.splits, stream);
  }
}

#define LLAMA2_INSTANTIATE(T, W)                                                                   \
  template cudaError_t launch_gemm_w8a16<T, W>(const GemmW8A16Args<T, W>&, const GemmW8A16Tiling&, \
                                               const GemmW8A16Workspace&, cudaStream_t);
LLAMA2_INSTANTIATE(__half, int8_t)
LLAMA2_INSTANTIATE(__nv_bfloat16, int8_t)
LLAMA2_INSTANTIATE(__half, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE(__nv_bfloat16, __nv_fp8_e4m3)
LLAMA2_INSTANTIATE(__half, W4Word)
LLAMA2_INSTANTIATE(__nv_bfloat16, W4Word)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
