// The launch timer the GEMM benchmarks share (bench_gemm.cu, bench_w8a16.cu).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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

}  // namespace llama2::bench
