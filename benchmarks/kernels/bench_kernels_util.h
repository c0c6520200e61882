// What the files of llama2_bench_kernels share (bench_kernels.cu, bench_attention.cu): device
// buffers, exactly representable random values, the CPU-reference check, the launch timer and the
// report line against the H200 rooflines, the 7B shapes and a shuffled paged-cache layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/step_plan.h"
#include "kernels/dtype.cuh"
#include "rank/cpu_ops.h"

namespace kbench {

namespace k = llama2::kernels;
namespace cpu = llama2::cpu;
using T = __half;

inline constexpr double kHbmGBs = 4315.0;
inline constexpr double kTensorTFs = 872.0;
inline int g_failures = 0;

inline void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(2);
  }
}
#define CK(call) check_cuda((call), #call)

template <typename E>
struct Dev {
  E* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    CK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(E)));
  }
  explicit Dev(const std::vector<E>& h) : Dev(h.size()) { put(h); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void put(const std::vector<E>& h) {
    CK(cudaMemcpy(p, h.data(), h.size() * sizeof(E), cudaMemcpyHostToDevice));
  }
  std::vector<E> get() const {
    std::vector<E> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(E), cudaMemcpyDeviceToHost));
    return h;
  }
};

// Values exactly representable in fp16/bf16 (see tests/gpu/gpu_test_util.h).
inline std::vector<float> rnd(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = __bfloat162float(__float2bfloat16_rn(d(rng)));
  return v;
}
inline std::vector<T> half(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __float2half_rn(x[i]);
  return y;
}
// x rounded to an fp8 e4m3 cache's values, as stored and as fp32 (for the reference).
inline std::vector<__nv_fp8_e4m3> fp8(const std::vector<float>& x) {
  std::vector<__nv_fp8_e4m3> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __nv_fp8_e4m3(x[i]);
  return y;
}
inline std::vector<float> fp8_values(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(__nv_fp8_e4m3(x[i]));
  return y;
}
inline std::vector<float> f32(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __half2float(x[i]);
  return y;
}

// |got - want| <= atol + rtol |want| everywhere (NaN only where both are NaN).
inline void verify(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want, double rtol, double atol) {
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w) continue;
    if (std::isnan(g) || std::isnan(w)) {
      bad += !(std::isnan(g) && std::isnan(w));
      continue;
    }
    const double e = std::fabs(g - w);
    worst = std::max(worst, e);
    bad += e > atol + rtol * std::fabs(w);
  }
  std::printf("  check %-44s %s (max abs err %.3g, %zu/%zu outside tolerance)\n", what.c_str(),
              bad ? "FAIL" : "ok", worst, bad, want.size());
  g_failures += bad != 0;
}

inline double median_us(const std::function<void()>& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms(30);
  for (auto& m : ms) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&m, a, b));
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[ms.size() / 2];
}

inline void report(const std::string& name, const std::string& shape, double us, double bytes,
                   double flops = 0) {
  const double gbs = bytes / us * 1e-3;
  std::printf("  %-14s %-34s %9.2f us %8.1f GB/s (%5.1f%% HBM)", name.c_str(), shape.c_str(), us,
              gbs, 100.0 * gbs / kHbmGBs);
  if (flops > 0) {
    const double tf = flops / us * 1e-6;
    std::printf(" %7.1f TFLOP/s (%4.1f%% fp16 TC)", tf, 100.0 * tf / kTensorTFs);
  }
  std::printf("\n");
}

inline std::string fmt(const char* f, long a, long b = 0, long c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

inline constexpr int kHidden = 4096, kHeads = 32, kDim = 128, kFfn = 11008, kVocab = 32000;

// One sequence per entry of `lens`, blocks shuffled; returns the plan of `news` new tokens per seq.
struct Paged {
  llama2::StepPlan plan;
  int num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> tables;
};
inline Paged make_paged(const std::vector<int>& lens, const std::vector<int>& news, int bs) {
  Paged p;
  for (int len : lens) p.num_blocks += (len + bs - 1) / bs;
  std::vector<int32_t> ids(p.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(9));
  int next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    llama2::SeqStep st;
    st.pos_begin = lens[s] - news[s];
    st.n_tokens = news[s];
    st.table_begin = static_cast<int32_t>(p.plan.block_ids.size());
    st.table_len = (lens[s] + bs - 1) / bs;
    p.max_blocks = std::max(p.max_blocks, static_cast<int>(st.table_len));
    for (int b = 0; b < st.table_len; ++b) p.plan.block_ids.push_back(ids[next++]);
    p.plan.seqs.push_back(st);
    p.plan.tokens.resize(p.plan.tokens.size() + news[s], 0);
  }
  p.tables.assign(lens.size() * p.max_blocks, 0);
  for (size_t s = 0; s < lens.size(); ++s) {
    const auto& st = p.plan.seqs[s];
    std::copy_n(p.plan.block_ids.begin() + st.table_begin, st.table_len,
                p.tables.begin() + s * p.max_blocks);
  }
  return p;
}

// The attention sections (bench_attention.cu).
void bench_decode_all();
void bench_prefill_all();

}  // namespace kbench
