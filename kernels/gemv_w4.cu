// The W4A16 GEMV and the 4-bit quantizer / dequantizer (kernels/gemv_w4.cuh). Rows, lanes and the
// epilogue are the other GEMVs' (kernels/gemv_common.cuh): two rows a warp (or gate and up), lane j
// reads the 16-byte pieces j, j + 32, ... of its rows: 32 weights of one group per piece, a quarter
// of what a 16-bit row costs in bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/gemv_common.cuh"
#include "kernels/gemv_w4.cuh"
#include "kernels/mma.cuh"
#include "kernels/w4_convert.cuh"

namespace llama2::kernels {
namespace {

using gemv_detail::kWarps;

// One row's group in registers: bias_lo / bias_hi for w4_word_pairs and the group's 16 s.
template <typename T>
struct W4Group {
  W4Pair<T> bias_lo, bias_hi;
  float s16;
  __device__ __forceinline__ explicit W4Group(uint32_t sz) {
    W4Pair<T> scale16;
    w4_group<T>(sz, bias_lo, scale16);
    bias_hi = w4_bias_hi<T>(bias_lo);
    s16 = to_float(w4_as_pair<T>(sz).x) * 16.f;
  }
};

// sum_e x[e] * d[e] over two words (16 weights, d as 8 pairs, x as 8 T pairs), times the group's
// 16 s, added to acc. fp16: 8 HFMA2 into one f16x2 (8 products per half, as the int8 GEMV sums a
// 16-byte load of W), one conversion; bf16: fp32 FMAs.
template <typename T>
__device__ __forceinline__ void pairs_dot(const W4Pair<T> (&d)[8], const uint32_t (&xv)[8],
                                          float s16, float& acc) {
  if constexpr (std::is_same_v<T, __half>) {
    __half2 s = __hmul2(d[0], w4_as_pair<T>(xv[0]));
#pragma unroll
    for (int p = 1; p < 8; ++p) s = __hfma2(d[p], w4_as_pair<T>(xv[p]), s);
    const float2 f = __half22float2(s);
    acc = fmaf(f.x + f.y, s16, acc);
  } else {
    float sum = 0.f;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const float2 w = __bfloat1622float2(d[p]);
      const float2 xf = __bfloat1622float2(w4_as_pair<T>(xv[p]));
      sum = fmaf(w.x, xf.x, sum);
      sum = fmaf(w.y, xf.y, sum);
    }
    acc = fmaf(sum, s16, acc);
  }
}

// W rows n0 / n1 as words (WarpRows over [N, K / 8] uint32). F: the fusions (one row only). Lane
// j reads the 16-byte pieces j, j + 32, ... of each of its R rows (32 weights of one group per
// piece); each x piece is loaded once for the R rows. group_magic = 2^32 / group + 1, so that
// k / group = umulhi(k, group_magic) for k * group < 2^32 (the launcher checks): no division.
// U: 16-byte loads of W in flight per lane and row. Two rows a warp with 4 loads each is the
// launcher's choice for plain products: llama2_bench_kernels w4 (H200, 2026-12-04) measured it
// 14-21% faster than one row x 4 or two rows x 2 on qkv, o_proj and down; gate|up is the same at
// U = 2 and 4.
template <typename T, int M, bool kGateUp, int R, int F, int U = (kGateUp ? 2 : 4)>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_w4_kernel(const T* __restrict__ x, const uint32_t* __restrict__ q,
                   const uint32_t* __restrict__ sz, T* __restrict__ y, int N, int K,
                   uint32_t group_magic, const GemvFusion<T> fuse, int prefetch) {
  using namespace gemv_detail;
  static_assert(F == 0 || M == 1, "fusions: one row");
  static_assert(R == 2 || (R == 1 && !kGateUp), "gate|up reads two rows per output");
  constexpr int kUnroll = U;
  const int lane = threadIdx.x & 31;
  const int words = K / 8;
  const WarpRows<uint32_t, kGateUp, R, (F & kFuseRope) != 0> rows(q, N, words,
                                                                  fuse.rope.head_dim / 2);
  const int n0 = rows.n0, n1 = rows.n1;
  const bool two = rows.two;
  const T* xin = gemv_begin<T, T, uint32_t, F>(x, rows.w0, rows.w1, n0 < N, two, K, prefetch, fuse);
  if (n0 >= N) return;
  const int64_t n_rows = kGateUp ? 2 * N : N;  // sz's row stride
  const uint32_t* sz_rows[2] = {sz + n0, sz + n1};
  float acc[R][M] = {};
#pragma unroll kUnroll
  for (int j = lane * 4; j < words; j += 32 * 4) {
    uint4 p[R];
    p[0] = *reinterpret_cast<const uint4*>(rows.w0 + j);
    if constexpr (R == 2) p[1] = *reinterpret_cast<const uint4*>(rows.w1 + j);
    const int64_t g = __umulhi(static_cast<uint32_t>(j) * 8u, group_magic);
    W4Pair<T> d[R][2][8];  // [row][word pair][T pair]
    float s16[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const W4Group<T> grp(sz_rows[r][g * n_rows]);
      s16[r] = grp.s16;
      const uint32_t w4[4] = {p[r].x, p[r].y, p[r].z, p[r].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        W4Pair<T> four[4];
        w4_word_pairs<T>(w4[i], grp.bias_lo, grp.bias_hi, four);
#pragma unroll
        for (int e = 0; e < 4; ++e) d[r][i / 2][(i % 2) * 4 + e] = four[e];
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t xv[8];
        const uint4 a = *reinterpret_cast<const uint4*>(xin + m * int64_t{K} + (j + 2 * h) * 8);
        const uint4 b = *reinterpret_cast<const uint4*>(xin + m * int64_t{K} + (j + 2 * h + 1) * 8);
        const uint32_t both[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) xv[e] = both[e];
#pragma unroll
        for (int r = 0; r < R; ++r) pairs_dot<T>(d[r][h], xv, s16[r], acc[r][m]);
      }
    }
  }
  auto factor = [](int, int) { return 1.f; };
  gemv_end<T, M, kGateUp, R, F>(acc, factor, y, N, n0, n1, two, lane, fuse);
}

std::atomic<int> variant_rows{0}, variant_unroll{0};

// The benchmark's variant (set_gemv_w4_variant) for a plain one-row product, if one is set: true
// when it launched.
template <typename T, bool kGateUp>
bool launch_variant(const T* x, const W4Matrix& w, T* y, int N, int K, cudaStream_t stream,
                    const GemvFusion<T>& fuse, cudaError_t* rc) {
  using namespace gemv_detail;
  const int r = variant_rows.load(std::memory_order_relaxed);
  const int u = variant_unroll.load(std::memory_order_relaxed);
  if (r == 0 || (kGateUp && r != 2)) return false;
  const int rows_per_block = kGateUp ? kWarps : kWarps * r;
  const auto grid = static_cast<int>(ceil_div(N, rows_per_block));
  const uint32_t magic = w4_group_magic(w.group);
  auto go = [&](auto kernel) {
    *rc =
        launch_kernel(kernel, grid, kWarps * 32, 0, stream, x, w.q, w.sz, y, N, K, magic, fuse, 0);
  };
  if (r == 2) {
    u == 4 ? go(gemv_w4_kernel<T, 1, kGateUp, 2, 0, 4>)
           : go(gemv_w4_kernel<T, 1, kGateUp, 2, 0, 2>);
  } else if constexpr (!kGateUp) {
    u == 8 ? go(gemv_w4_kernel<T, 1, false, 1, 0, 8>) : go(gemv_w4_kernel<T, 1, false, 1, 0, 4>);
  }
  return true;
}

template <typename T, int M, bool kGateUp, int F>
cudaError_t launch_rows(const T* x, const W4Matrix& w, T* y, int N, int K, cudaStream_t stream,
                        const GemvFusion<T>& fuse) {
  using namespace gemv_detail;
  const size_t smem = (F & kFuseNorm) != 0 ? static_cast<size_t>(K) * sizeof(T) : 0;
  const int prefetch = prefetch_row_bytes(int64_t{K} / 2, kGateUp ? 2 * int64_t{N} : N);
  if constexpr (M == 1 && F == 0) {
    cudaError_t rc = cudaSuccess;
    if (launch_variant<T, kGateUp>(x, w, y, N, K, stream, fuse, &rc)) return rc;
  }
  if constexpr ((F & kFuseRope) != 0) {  // a warp per rotation pair (WarpRows, kPairs)
    return launch_kernel(gemv_w4_kernel<T, M, false, 2, F>,
                         static_cast<int>(ceil_div(N / 2, kWarps)), kWarps * 32, smem, stream, x,
                         w.q, w.sz, y, N, K, w4_group_magic(w.group), fuse, prefetch);
  } else {  // two rows a warp (plain: n0, n0 + 1; gate|up: gate and up rows of one output)
    return launch_kernel(gemv_w4_kernel<T, M, kGateUp, 2, F>,
                         static_cast<int>(ceil_div(N, kGateUp ? kWarps : kWarps * 2)), kWarps * 32,
                         smem, stream, x, w.q, w.sz, y, N, K, w4_group_magic(w.group), fuse,
                         prefetch);
  }
}

template <typename T, bool kGateUp>
cudaError_t launch_w4(const T* x, const W4Matrix& w, T* y, int M, int N, int K, cudaStream_t stream,
                      const GemvFusion<T>& fuse) {
  using namespace gemv_detail;
  LLAMA2_LAUNCH_REQUIRE(gemv_w4_fits(x, w, M, K),
                        "M " + std::to_string(M) + " (1.." + std::to_string(kGemvMaxRows) +
                            "), K " + std::to_string(K) + " (a multiple of 32), group " +
                            std::to_string(w.group) + " (a multiple of 64), 16-byte aligned");
  LLAMA2_LAUNCH_REQUIRE(N >= 1 && w.sz != nullptr && y != nullptr, "N " + std::to_string(N));
  LLAMA2_LAUNCH_REQUIRE(!fuse.any() || M == 1, "fusions take one row");
  LLAMA2_LAUNCH_REQUIRE(fuse.norm_weight == nullptr ||
                            int64_t{K} * static_cast<int64_t>(sizeof(T)) <= kGemvNormMaxBytes,
                        "the fused norm's row must fit shared memory");
  LLAMA2_LAUNCH_REQUIRE(!fuse.rope.on() || (N % fuse.rope.head_dim == 0 && !kGateUp),
                        "RoPE: whole heads, plain products");
  if (fuse.any()) {
    cudaError_t rc = cudaSuccess;
    with_fusion<kGateUp>(fusion_bits(fuse), [&](auto f) {
      rc = launch_rows<T, 1, kGateUp, decltype(f)::value>(x, w, y, N, K, stream, fuse);
    });
    return rc;
  }
  cudaError_t rc = cudaSuccess;
  with_rows(M, [&](auto m) {
    rc = launch_rows<T, decltype(m)::value, kGateUp, 0>(x, w, y, N, K, stream, fuse);
  });
  return rc;
}

// One thread per (row, group): the group's range, its grid by AWQ's rule, then its words.
template <typename T>
__global__ void quantize_w4_kernel(const T* __restrict__ w, uint32_t* __restrict__ q,
                                   uint32_t* __restrict__ sz, int N, int K, int group) {
  wait_for_previous_grid();
  const int groups = w4_groups(K, group);
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t{N} * groups) return;
  const int n = static_cast<int>(id % N), g = static_cast<int>(id / N);  // n fastest: sz coalesced
  const int k0 = g * group, k1 = min(K, k0 + group);
  const T* row = w + static_cast<int64_t>(n) * K;
  float lo = INFINITY, hi = -INFINITY;
  for (int k = k0; k < k1; ++k) {
    lo = fminf(lo, to_float(row[k]));
    hi = fmaxf(hi, to_float(row[k]));
  }
  const float s = __half2float(__float2half_rn(fmaxf(hi - lo, 1e-5f) / 15.f));
  const int z = static_cast<int>(fminf(fmaxf(rintf(-lo / s), 0.f), 15.f));
  const float packed[2] = {to_float(from_float<T>(s)), w4_bias<T>(z)};
  sz[static_cast<int64_t>(g) * N + n] = pack2<T>(packed[0], packed[1]);
  for (int k = k0; k < k1; k += 8) {
    uint32_t word = 0;
    for (int e = 0; e < 8; ++e) {
      const float v =
          fminf(fmaxf(rintf(to_float(row[k + e]) / s) + static_cast<float>(z), 0.f), 15.f);
      word |= static_cast<uint32_t>(v) << (4 * w4_nibble(e));
    }
    q[static_cast<int64_t>(n) * (K / 8) + k / 8] = word;
  }
}

template <typename T>
__global__ void dequantize_w4_kernel(const uint32_t* __restrict__ q,
                                     const uint32_t* __restrict__ sz, T* __restrict__ out, int N,
                                     int K, int group) {
  wait_for_previous_grid();
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t{N} * (K / 8)) return;
  const int64_t n = id / (K / 8), k = id % (K / 8) * 8;
  const uint32_t word = q[id], pair = sz[k / group * N + n];
  const W4Pair<T> v = w4_as_pair<T>(pair);
  const float s = to_float(v.x);
  const int z = static_cast<int>(-to_float(v.y) * 16.f - kW4Base<T>);
  // (q - z) s is exact in fp32 (4 x 11 bits): one rounding to T. The 8 values go out as one
  // 16-byte store (prefill dequantizes whole projections for cuBLAS: linear.cu).
  uint32_t packed[4];
  for (int p = 0; p < 4; ++p) {
    float f[2];
    for (int h = 0; h < 2; ++h) {
      const int qv = static_cast<int>((word >> (4 * w4_nibble(2 * p + h))) & 0xfu);
      f[h] = static_cast<float>(qv - z) * s;
    }
    packed[p] = pack2<T>(f[0], f[1]);
  }
  *reinterpret_cast<uint4*>(out + n * K + k) =
      make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

}  // namespace

void set_gemv_w4_variant(int rows_per_warp, int unroll) {
  variant_rows.store(rows_per_warp, std::memory_order_relaxed);
  variant_unroll.store(unroll, std::memory_order_relaxed);
}

template <typename T>
cudaError_t launch_gemv_w4(const T* x, const W4Matrix& w, T* y, int M, int N, int K,
                           cudaStream_t stream, const GemvFusion<T>& fuse) {
  return launch_w4<T, false>(x, w, y, M, N, K, stream, fuse);
}

template <typename T>
cudaError_t launch_gemv_w4_gate_up_swiglu(const T* x, const W4Matrix& w, T* act, int M, int F,
                                          int K, cudaStream_t stream, const GemvFusion<T>& fuse) {
  LLAMA2_LAUNCH_REQUIRE(!fuse.rope.on() && !fuse.add_to_y, "gate|up fuses the norm only");
  return launch_w4<T, true>(x, w, act, M, F, K, stream, fuse);
}

template <typename T>
cudaError_t launch_quantize_w4(const T* w, uint32_t* q, uint32_t* sz, int N, int K, int group,
                               cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(
      w4_shape_fits(K, group) && N >= 1,
      "N " + std::to_string(N) + ", K " + std::to_string(K) + ", group " + std::to_string(group));
  const int64_t threads = int64_t{N} * w4_groups(K, group);
  return launch_kernel(quantize_w4_kernel<T>, static_cast<unsigned>(ceil_div(threads, 256)), 256, 0,
                       stream, w, q, sz, N, K, group);
}

template <typename T>
cudaError_t launch_dequantize_w4(const W4Matrix& w, T* out, int N, int K, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(
      w4_shape_fits(K, w.group) && N >= 1,
      "N " + std::to_string(N) + ", K " + std::to_string(K) + ", group " + std::to_string(w.group));
  const int64_t threads = int64_t{N} * (K / 8);
  return launch_kernel(dequantize_w4_kernel<T>, static_cast<unsigned>(ceil_div(threads, 256)), 256,
                       0, stream, w.q, w.sz, out, N, K, w.group);
}

#define LLAMA2_INSTANTIATE(T)                                                                     \
  template cudaError_t launch_gemv_w4<T>(const T*, const W4Matrix&, T*, int, int, int,            \
                                         cudaStream_t, const GemvFusion<T>&);                     \
  template cudaError_t launch_gemv_w4_gate_up_swiglu<T>(const T*, const W4Matrix&, T*, int, int,  \
                                                        int, cudaStream_t, const GemvFusion<T>&); \
  template cudaError_t launch_quantize_w4<T>(const T*, uint32_t*, uint32_t*, int, int, int,       \
                                             cudaStream_t);                                       \
  template cudaError_t launch_dequantize_w4<T>(const W4Matrix&, T*, int, int, cudaStream_t);
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
