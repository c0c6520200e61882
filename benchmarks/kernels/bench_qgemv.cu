// Streaming GEMV benchmark: batch-1 decode products of Llama-2-7B (one row of x, fp16) with the
// weights in fp16, fp8 e4m3 or int8 (--weight-dtype), the kernel's arithmetic variants side by
// side (kernels/gemv.cuh GemvMath: "old" = kConvert, the generic conversions, for fp8 with
// per-token fp8 activations as the engine ran it before 2026-12-02; "fp32" = the cheap
// conversions of kernels/w8_convert.cuh with fp32 FMAs, the engine's default; "half2" = f16x2
// products, LLAMA2_QGEMV=half2).
//
// Run: build-gpu/llama2_bench_kernels qgemv   (this section only, ~20 s; part of the full run too)
//
// Each measurement launches the kernel back to back over copies of W that together hold >= 192 MB,
// so the 50 MB L2 cannot serve a matrix from the previous launch: what is timed is streaming W
// from HBM, as in a decode step (where the 32 layers' weights follow each other). GB/s counts the
// bytes of W (plus the scales) only; median of 15 rounds over all copies. "read*" are floors:
// kernels that only load W (read_rows_kernel). Before timing, every
// variant's output on copy 0 is checked against a double-precision product of the same quantized
// operands (fp32 accumulation: one fp16 rounding, 1e-3 relative, + 1e-5 sum |x w|; half2:
// + 2^-8 sum |x w|, the bound of fp16 sums of 8 products, as tests/gpu/test_quant.cu).
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"
#include "kernels/quant.cuh"

namespace k = llama2::kernels;

namespace {

constexpr double kHbm = 4315.0;  // GB/s, the H200's measured copy rate (bench_kernels.cu)
constexpr double kStreamBytes = 192e6;
int g_bad = 0;

void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(2);
  }
}
#define QCK(call) ck((call), #call)

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { QCK(cudaMalloc(&p, std::max<size_t>(bytes, 1))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <typename E>
  E* as() const {
    return static_cast<E*>(p);
  }
};

// Weight formats: the element stored per weight and how one stored byte pattern reads as fp32.
enum class Fmt { kFp16, kFp8, kInt8 };
const char* fmt_name(Fmt f) {
  return f == Fmt::kFp16 ? "fp16" : f == Fmt::kFp8 ? "fp8" : "int8";
}
size_t elem_bytes(Fmt f) {
  return f == Fmt::kFp16 ? 2 : 1;
}

struct Variant {
  const char* name;
  k::GemvMath math;
  bool fp8_x;  // fp8: x quantized per token first (W8A8), as before 2026-12-02
};

struct Shape {
  const char* name;
  int n, k;
  bool gate_up;  // [2F, K] through the SwiGLU epilogue (n = 2F)
};

// Random W [n, k] in `f` (raw bytes, e4m3 without NaN), its fp32 values (before the row scale)
// and per-row scales; x [k] fp16 values in [-1, 1].
struct Operands {
  std::vector<uint8_t> w;
  std::vector<float> wf, scale, x;
};
Operands make(Fmt f, int n, int kk, uint32_t seed) {
  std::mt19937 rng(seed);
  Operands o;
  const size_t count = static_cast<size_t>(n) * kk;
  o.w.resize(count * elem_bytes(f));
  o.wf.resize(count);
  o.scale.resize(n);
  std::uniform_real_distribution<float> u(-1.f, 1.f), s(0.5f / 127, 2.f / 127);
  for (auto& v : o.scale) v = f == Fmt::kFp16 ? 1.f : s(rng);
  for (size_t i = 0; i < count; ++i) {
    if (f == Fmt::kFp16) {
      const __half h = __float2half_rn(u(rng));
      std::memcpy(&o.w[2 * i], &h, 2);
      o.wf[i] = __half2float(h);
    } else if (f == Fmt::kInt8) {
      const int8_t q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
      o.w[i] = static_cast<uint8_t>(q);
      o.wf[i] = q;
    } else {
      uint8_t b = static_cast<uint8_t>(rng());
      if ((b & 0x7F) == 0x7F) b &= 0xFE;  // not NaN
      __nv_fp8_e4m3 e;
      e.__x = b;
      o.w[i] = b;
      o.wf[i] = static_cast<float>(e);
    }
  }
  o.x.resize(kk);
  for (auto& v : o.x) v = __half2float(__float2half_rn(u(rng)));
  return o;
}

// Double-precision y of the first `rows` outputs (gate|up: through SwiGLU) and sum |x w| per row.
void reference(const Operands& o, const std::vector<float>& xv, int n, int kk, bool gate_up,
               int rows, std::vector<double>* want, std::vector<double>* absum) {
  auto dot = [&](int r, double* a) {
    double s = 0;
    *a = 0;
    for (int i = 0; i < kk; ++i) {
      const double p = double(xv[i]) * o.wf[static_cast<size_t>(r) * kk + i];
      s += p;
      *a += std::fabs(p);
    }
    return s * o.scale[r];
  };
  want->resize(rows);
  absum->resize(rows);
  for (int r = 0; r < rows; ++r) {
    double a = 0, b = 0;
    if (!gate_up) {
      (*want)[r] = dot(r, &a);
      (*absum)[r] = a * o.scale[r];
    } else {
      const double g = dot(r, &a), up = dot(n / 2 + r, &b);
      (*want)[r] = g / (1 + std::exp(-g)) * up;
      (*absum)[r] = (a * o.scale[r]) * std::fabs(up) + std::fabs(g) * b * o.scale[n / 2 + r];
    }
  }
}

// The floor of a 1-byte GEMV with no arithmetic: the same grid (8 warps a block, kRows rows a
// warp), the same 16-byte loads, kUnroll in flight per lane per row, and one XOR per load, to tell
// streaming limits (launch, ramp and tail of a ~4-40 us kernel) from the cost of the conversions
// and FMAs. "read" is the GEMV's own shape (1 row, 4 deep); "read-u8" and "read-r2" ask whether a
// deeper unroll or two rows a warp would stream faster.
template <int kRows, int kUnroll>
__global__ void __launch_bounds__(256)
    read_rows_kernel(const uint4* __restrict__ w, int n, int k16, uint32_t* __restrict__ out) {
  k::wait_for_previous_grid();
  const int lane = threadIdx.x & 31, row0 = (blockIdx.x * 8 + (threadIdx.x >> 5)) * kRows;
  if (row0 >= n) return;
  uint32_t acc = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const uint4* p = w + static_cast<int64_t>(min(row0 + r, n - 1)) * k16;
#pragma unroll kUnroll
    for (int i = lane; i < k16; i += 32) {
      const uint4 v = p[i];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row0] = acc;
}

double median_round_us(int copies, const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  QCK(cudaEventCreate(&a));
  QCK(cudaEventCreate(&b));
  for (int c = 0; c < copies; ++c) launch(c);  // warm-up
  std::vector<float> ms(15);
  for (auto& m : ms) {
    QCK(cudaEventRecord(a));
    for (int c = 0; c < copies; ++c) launch(c);
    QCK(cudaEventRecord(b));
    QCK(cudaEventSynchronize(b));
    QCK(cudaEventElapsedTime(&m, a, b));
  }
  QCK(cudaGetLastError());
  QCK(cudaEventDestroy(a));
  QCK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2] / copies;  // per launch
}

void bench_shape(const Shape& sh, Fmt f) {
  const int n = sh.n, kk = sh.k, out_n = sh.gate_up ? n / 2 : n;
  const Operands o = make(f, n, kk, 1000 + n + kk);
  const size_t w_bytes = static_cast<size_t>(n) * kk * elem_bytes(f);
  const int copies = static_cast<int>(std::ceil(kStreamBytes / w_bytes));
  Buf w(w_bytes * copies), scale(n * sizeof(float)), x(kk * sizeof(__half)), xq(kk),
      xs(sizeof(float)), y(static_cast<size_t>(n) * 4);  // [out_n] fp16, or read's [n] words
  QCK(cudaMemcpy(w.p, o.w.data(), w_bytes, cudaMemcpyHostToDevice));
  for (int c = 1; c < copies; ++c) {
    QCK(cudaMemcpy(w.as<uint8_t>() + c * w_bytes, w.p, w_bytes, cudaMemcpyDeviceToDevice));
  }
  QCK(cudaMemcpy(scale.p, o.scale.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<__half> xh(kk);
  for (int i = 0; i < kk; ++i) xh[i] = __float2half_rn(o.x[i]);
  QCK(cudaMemcpy(x.p, xh.data(), kk * sizeof(__half), cudaMemcpyHostToDevice));
  // fp8 "old": x quantized per token (W8A8); the reference then uses x's e4m3 values and scale.
  QCK((k::launch_quantize_rows<__nv_fp8_e4m3, __half>(x.as<__half>(), xq.as<__nv_fp8_e4m3>(),
                                                      xs.as<float>(), 1, kk, 0)));
  std::vector<__nv_fp8_e4m3> xq_h(kk);
  float xs_h = 0;
  QCK(cudaMemcpy(xq_h.data(), xq.p, kk, cudaMemcpyDeviceToHost));
  QCK(cudaMemcpy(&xs_h, xs.p, sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> x8(kk);
  for (int i = 0; i < kk; ++i) x8[i] = static_cast<float>(xq_h[i]) * xs_h;

  std::vector<Variant> variants;
  if (f == Fmt::kFp16) variants = {{"fp16", k::GemvMath::kAuto, false}};
  if (f == Fmt::kInt8) {
    variants = {{"old", k::GemvMath::kConvert, false},
                {"fp32", k::GemvMath::kFp32, false},
                {"half2", k::GemvMath::kHalf2, false}};
  }
  if (f == Fmt::kFp8) {
    variants = {{"old", k::GemvMath::kConvert, true},
                {"fp32", k::GemvMath::kFp32, false},
                {"half2", k::GemvMath::kHalf2, false}};
  }
  if (f != Fmt::kFp16) {
    for (const char* r : {"read", "read-u8", "read-r2"})
      variants.push_back({r, k::GemvMath::kAuto, false});
  }
  const int rows = std::min(out_n, 64);
  for (const Variant& v : variants) {
    const std::string vname = v.name;
    const bool read_only = vname.rfind("read", 0) == 0;
    auto launch = [&](int c) {
      const uint8_t* wc = w.as<uint8_t>() + c * w_bytes;
      if (read_only) {
        const auto* w4 = reinterpret_cast<const uint4*>(wc);
        auto* out = reinterpret_cast<uint32_t*>(y.p);
        if (vname == "read-r2") {
          QCK(k::launch_kernel(read_rows_kernel<2, 4>, static_cast<int>((n + 15) / 16), 256, 0,
                               nullptr, w4, n, kk / 16, out));
        } else {
          QCK(k::launch_kernel(vname == "read" ? read_rows_kernel<1, 4> : read_rows_kernel<1, 8>,
                               static_cast<int>((n + 7) / 8), 256, 0, nullptr, w4, n, kk / 16,
                               out));
        }
        return;
      }
      const float* ws = scale.as<float>();
      __half* yp = y.as<__half>();
      cudaError_t rc = cudaSuccess;
      if (f == Fmt::kFp16) {
        const __half* wh = reinterpret_cast<const __half*>(wc);
        rc = sh.gate_up
                 ? k::launch_gemv_gate_up_swiglu<__half>(x.as<__half>(), wh, yp, 1, n / 2, kk, 0)
                 : k::launch_gemv<__half>(x.as<__half>(), wh, yp, 1, n, kk, 0);
      } else if (f == Fmt::kInt8) {
        const int8_t* wi = reinterpret_cast<const int8_t*>(wc);
        rc = sh.gate_up ? k::launch_gemv_q_gate_up_swiglu<__half, __half, int8_t>(
                              x.as<__half>(), nullptr, wi, ws, yp, 1, n / 2, kk, 0, v.math)
                        : k::launch_gemv_q<__half, __half, int8_t>(x.as<__half>(), nullptr, wi, ws,
                                                                   yp, 1, n, kk, 0, v.math);
      } else {
        using E = __nv_fp8_e4m3;
        const E* we = reinterpret_cast<const E*>(wc);
        if (v.fp8_x) {
          rc = sh.gate_up ? k::launch_gemv_q_gate_up_swiglu<__half, E, E>(
                                xq.as<E>(), xs.as<float>(), we, ws, yp, 1, n / 2, kk, 0, v.math)
                          : k::launch_gemv_q<__half, E, E>(xq.as<E>(), xs.as<float>(), we, ws, yp,
                                                           1, n, kk, 0, v.math);
        } else {
          rc = sh.gate_up ? k::launch_gemv_q_gate_up_swiglu<__half, __half, E>(
                                x.as<__half>(), nullptr, we, ws, yp, 1, n / 2, kk, 0, v.math)
                          : k::launch_gemv_q<__half, __half, E>(x.as<__half>(), nullptr, we, ws, yp,
                                                                1, n, kk, 0, v.math);
        }
      }
      QCK(rc);
    };
    launch(0);
    QCK(cudaDeviceSynchronize());
    std::vector<__half> got_h(out_n);
    QCK(cudaMemcpy(got_h.data(), y.p, out_n * sizeof(__half), cudaMemcpyDeviceToHost));
    std::vector<double> want, absum;
    reference(o, v.fp8_x ? x8 : o.x, n, kk, sh.gate_up, rows, &want, &absum);
    int bad = 0;
    double worst = 0;
    for (int r = 0; r < (read_only ? 0 : rows); ++r) {
      // One fp16 rounding of y (gate|up: of gate, up, silu and y) + fp32 summation order.
      const double tol = (sh.gate_up ? 4e-3 : 1e-3) * std::fabs(want[r]) + 1e-5 * absum[r] +
                         (v.math == k::GemvMath::kHalf2 ? 0x1p-8 * absum[r] : 0.0);
      const double e = std::fabs(__half2float(got_h[r]) - want[r]);
      worst = std::max(worst, e / tol);
      bad += !(e <= tol);
    }
    g_bad += bad != 0;
    const double us = median_round_us(copies, launch);
    const double bytes = static_cast<double>(w_bytes) + (f == Fmt::kFp16 ? 0 : n * 4.0);
    const double gbs = bytes / us * 1e-3;
    std::printf(
        "  %-8s %-5s %-6s N=%-5d K=%-5d %8.2f us %7.1f GB/s (%5.1f%% HBM)  x%d copies  "
        "check %s (worst %.2f of tol)\n",
        sh.name, fmt_name(f), v.name, n, kk, us, gbs, 100 * gbs / kHbm, copies, bad ? "FAIL" : "ok",
        worst);
  }
}

}  // namespace

// The section, called from bench_kernels.cu's main. Returns the number of failed checks.
int bench_qgemv_streaming() {
  std::printf("streaming gemv, one row, W from HBM (>= %.0f MB of copies per measurement)\n",
              kStreamBytes / 1e6);
  const Shape shapes[] = {{"qkv", 3 * 4096, 4096, false},
                          {"o_proj", 4096, 4096, false},
                          {"gate|up", 2 * 11008, 4096, true},
                          {"down", 4096, 11008, false}};
  for (const Shape& sh : shapes) {
    for (Fmt f : {Fmt::kFp16, Fmt::kFp8, Fmt::kInt8}) bench_shape(sh, f);
  }
  return g_bad;
}
