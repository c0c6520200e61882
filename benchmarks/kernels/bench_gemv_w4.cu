// Streaming 4-bit GEMV benchmark (#38): the batch-1 decode products of Llama-2-7B with W4A16
// weights (kernels/gemv_w4.cuh, groups of 128, quantized on the GPU by launch_quantize_w4), the
// way bench_qgemv.cu measures the 8- and 16-bit GEMVs: back to back over copies of (q, sz) that
// together hold >= 192 MB, so that W streams from HBM as in a decode step and not from the 50 MB
// L2. GB/s counts the bytes of q and sz. Beside the launcher's own choice, the variants of
// set_gemv_w4_variant (rows per warp r, 16-byte loads in flight per lane and row u); "read" is
// the floor of q's bytes with no arithmetic (a warp per row, 16-byte loads, 4 in flight per lane).
//
// Run: build-gpu/llama2_bench_kernels w4   (this section only, ~10 s)
//
// Before timing, each product's first 64 outputs are checked against a double-precision product
// of x and the dequantized weights (launch_dequantize_w4, exact): 1e-3 relative (gate|up 4e-3) +
// 2^-8 sum |x w|, the bound of fp16 sums of 8 products (the GEMV's f16x2 chains).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "benchmarks/kernels/bench_timing.h"
#include "kernels/dtype.cuh"
#include "kernels/gemv_w4.cuh"

namespace k = llama2::kernels;

namespace {

constexpr double kHbm = 4315.0;  // GB/s, as bench_qgemv.cu
constexpr double kStreamBytes = 192e6;
constexpr int kGroup = 128;

struct Shape {
  const char* name;
  int n, k;      // W [n, k]; gate|up: n = 2F
  bool gate_up;  // through the SwiGLU epilogue
};

__global__ void __launch_bounds__(256)
    read_floor_kernel(const uint4* __restrict__ w, int n, int k16, uint32_t* __restrict__ out) {
  k::wait_for_previous_grid();
  const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (row >= n) return;
  const uint4* p = w + static_cast<int64_t>(row) * k16;
  uint32_t acc = 0;
#pragma unroll 4
  for (int i = lane; i < k16; i += 32) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row] = acc;
}

template <typename E>
E* dev(size_t count) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count * sizeof(E), 1)));
  return static_cast<E*>(p);
}

// Checks y's first rows against x * dequantized W in double. Returns true when within the bound.
bool check(const Shape& sh, const std::vector<__half>& xh, const __half* d_wdeq, const __half* d_y,
           double* worst) {
  const int n = sh.n, kk = sh.k, out_n = sh.gate_up ? n / 2 : n, rows = std::min(out_n, 64);
  std::vector<__half> w(static_cast<size_t>(n) * kk), y(out_n);
  CUDA_CHECK(cudaMemcpy(w.data(), d_wdeq, w.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(y.data(), d_y, y.size() * 2, cudaMemcpyDeviceToHost));
  auto dot = [&](int r, double* a) {
    double s = 0;
    *a = 0;
    for (int i = 0; i < kk; ++i) {
      const double p = double(__half2float(xh[i])) * __half2float(w[size_t(r) * kk + i]);
      s += p;
      *a += std::fabs(p);
    }
    return s;
  };
  bool ok = true;
  *worst = 0;
  for (int r = 0; r < rows; ++r) {
    double a = 0, b = 0, want = 0, absum = 0;
    if (sh.gate_up) {
      const double g = dot(r, &a), up = dot(out_n + r, &b);
      want = g / (1 + std::exp(-g)) * up;
      absum = a * std::fabs(up) + std::fabs(g) * b;
    } else {
      want = dot(r, &a);
      absum = a;
    }
    const double tol = (sh.gate_up ? 4e-3 : 1e-3) * std::fabs(want) + 0x1p-8 * absum;
    const double e = std::fabs(__half2float(y[r]) - want);
    *worst = std::max(*worst, e / tol);
    ok = ok && e <= tol;
  }
  return ok;
}

int bench_shape(const Shape& sh) {
  const int n = sh.n, kk = sh.k, out_n = sh.gate_up ? n / 2 : n;
  const size_t q_words = static_cast<size_t>(n) * kk / 8;
  const size_t sz_words = static_cast<size_t>(k::w4_groups(kk, kGroup)) * n;
  const size_t bytes = (q_words + sz_words) * 4;
  const int copies = static_cast<int>(std::ceil(kStreamBytes / static_cast<double>(bytes)));
  std::vector<__half> wh(static_cast<size_t>(n) * kk), xh(kk);
  uint32_t s = 12345u + static_cast<uint32_t>(n + kk);
  auto uni = [&] {  // [-1, 1): a 32-bit LCG is enough for benchmark operands
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) / 8388608.f - 1.f;
  };
  for (auto& v : wh) v = __float2half_rn(uni());
  for (auto& v : xh) v = __float2half_rn(uni());
  __half* d_w = dev<__half>(wh.size());
  __half* d_x = dev<__half>(kk);
  __half* d_y = dev<__half>(out_n);
  uint32_t* d_q = dev<uint32_t>(q_words * copies);
  uint32_t* d_sz = dev<uint32_t>(sz_words * copies);
  uint32_t* d_read = dev<uint32_t>(n);
  CUDA_CHECK(cudaMemcpy(d_w, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_x, xh.data(), kk * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(k::launch_quantize_w4<__half>(d_w, d_q, d_sz, n, kk, kGroup, nullptr));
  for (int c = 1; c < copies; ++c) {
    CUDA_CHECK(cudaMemcpy(d_q + c * q_words, d_q, q_words * 4, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(d_sz + c * sz_words, d_sz, sz_words * 4, cudaMemcpyDeviceToDevice));
  }
  auto matrix = [&](int c) {
    return k::W4Matrix{d_q + (c % copies) * q_words, d_sz + (c % copies) * sz_words, kGroup};
  };
  auto gemv = [&](int c) {
    CUDA_CHECK(sh.gate_up ? k::launch_gemv_w4_gate_up_swiglu<__half>(d_x, matrix(c), d_y, 1, out_n,
                                                                     kk, nullptr)
                          : k::launch_gemv_w4<__half>(d_x, matrix(c), d_y, 1, n, kk, nullptr));
  };
  CUDA_CHECK(k::launch_dequantize_w4<__half>(matrix(0), d_w, n, kk, nullptr));
  auto row = [&](const char* what, double t, const char* note) {
    const double gbs = static_cast<double>(bytes) / t * 1e-3;
    std::printf("  %-8s %-9s N=%-5d K=%-5d %8.2f us %7.1f GB/s (%5.1f%% HBM)  x%d copies  %s\n",
                sh.name, what, n, kk, t, gbs, 100 * gbs / kHbm, copies, note);
  };
  // The launcher's own shape, then the variants: rows per warp x loads in flight per lane.
  struct Variant {
    const char* name;
    int rows, unroll;
  };
  const Variant variants[] = {
      {"w4", 0, 0}, {"w4 r1u4", 1, 4}, {"w4 r1u8", 1, 8}, {"w4 r2u2", 2, 2}, {"w4 r2u4", 2, 4}};
  int bad = 0;
  for (const Variant& v : variants) {
    if (sh.gate_up && v.rows == 1) continue;
    k::set_gemv_w4_variant(v.rows, v.unroll);
    CUDA_CHECK(cudaMemset(d_y, 0, out_n * 2));
    gemv(0);
    CUDA_CHECK(cudaDeviceSynchronize());
    double worst = 0;
    const bool ok = check(sh, xh, d_w, d_y, &worst);
    bad += !ok;
    char note[64];
    std::snprintf(note, sizeof note, "check %s (worst %.2f of the bound)", ok ? "ok" : "FAIL",
                  worst);
    row(v.name, llama2::bench::time_us(gemv), note);
  }
  k::set_gemv_w4_variant(0, 0);
  row("read", llama2::bench::time_us([&](int c) {
        CUDA_CHECK(k::launch_kernel(read_floor_kernel, (n + 7) / 8, 256, 0, nullptr,
                                    reinterpret_cast<const uint4*>(matrix(c).q), n, kk / 32,
                                    d_read));
      }),
      "");
  for (void* p : {static_cast<void*>(d_w), static_cast<void*>(d_x), static_cast<void*>(d_y),
                  static_cast<void*>(d_q), static_cast<void*>(d_sz), static_cast<void*>(d_read)}) {
    CUDA_CHECK(cudaFree(p));
  }
  return bad;
}

}  // namespace

// The section, called from bench_kernels.cu's main. Returns the number of failed checks.
int bench_w4_streaming() {
  std::printf("streaming 4-bit gemv (group %d), one row, W from HBM (>= %.0f MB of copies)\n",
              kGroup, kStreamBytes / 1e6);
  const Shape shapes[] = {{"qkv", 3 * 4096, 4096, false},
                          {"o_proj", 4096, 4096, false},
                          {"gate|up", 2 * 11008, 4096, true},
                          {"down", 4096, 11008, false}};
  int bad = 0;
  for (const Shape& sh : shapes) bad += bench_shape(sh);
  return bad;
}
