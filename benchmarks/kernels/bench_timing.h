// What the GEMM benchmarks share (bench_gemm.cu, bench_w8a16.cu, bench_skinny.cu): the launch
// timer and the check of one fp16 result against another.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "common/check.h"

namespace llama2::bench {

// Microseconds per launch: the median of 5 batches of 20 launches, after 5 warm-up launches.
// `launch(i)` gets a running count, so a caller can rotate through copies of its weights and keep
// them coming from HBM rather than L2.
inline double time_us(const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  int i = 0;
  for (int w = 0; w < 5; ++w) launch(i++);
  std::vector<float> ms;
  for (int rep = 0; rep < 5; ++rep) {
    CUDA_CHECK(cudaEventRecord(a));
    for (int j = 0; j < 20; ++j) launch(i++);
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return ms[2] * 1e3 / 20;
}

// The largest |a - b| over the largest |b|, for two device arrays of n fp16 values (infinity when
// a holds a NaN).
inline double rel_diff_fp16(const void* a, const void* b, size_t n) {
  std::vector<__half> ha(n), hb(n);
  CUDA_CHECK(cudaMemcpy(ha.data(), a, n * sizeof(__half), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(hb.data(), b, n * sizeof(__half), cudaMemcpyDeviceToHost));
  double diff = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = __half2float(ha[i]), y = __half2float(hb[i]);
    if (std::isnan(x)) return INFINITY;
    diff = std::max(diff, std::fabs(x - y));
    mag = std::max(mag, std::fabs(y));
  }
  return diff / std::max(mag, 1e-30);
}

}  // namespace llama2::bench
