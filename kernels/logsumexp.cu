#include <cmath>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/logsumexp.cuh"
#include "kernels/reduce.cuh"

namespace llama2::kernels {

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// (m, s) <- the pair for the union of two column sets. -inf maxima contribute nothing (an empty
// set, or a slice of -inf logits) and must not produce exp(-inf - -inf) = NaN.
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
  if (om == -INFINITY) return;
  if (m == -INFINITY) {
    m = om;
    s = os;
    return;
  }
  const float nm = fmaxf(m, om);
  s = s * expf(m - nm) + os * expf(om - nm);
  m = nm;
}
}  // namespace

template <typename T>
static __global__ void __launch_bounds__(kThreads)
    slice_logsumexp_kernel(const T* logits, int64_t ld, int n, int vocab_begin,
                           const int32_t* targets, float* out) {
  wait_for_previous_grid();
  __shared__ float s_m[kWarps], s_s[kWarps];
  const int row = blockIdx.x;
  const T* x = logits + row * ld;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = to_float(x[i]);
    if (v == -INFINITY) continue;  // adds exp(-inf) = 0 (and must not meet m = -inf)
    if (v > m) {                   // NaN never passes: handled below through the sum
      s = (m == -INFINITY ? 0.f : s * expf(m - v)) + 1.f;
      m = v;
    } else {
      s += expf(v - m);  // NaN makes s NaN
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFullMask, m, o);
    const float os = __shfl_xor_sync(kFullMask, s, o);
    merge(m, s, om, os);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_m[warp] = m;
    s_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) merge(m, s, s_m[w], s_s[w]);
    const int t = targets != nullptr ? targets[row] : -1;
    const bool owned = t >= vocab_begin && t < vocab_begin + n;
    out[3 * row + 0] = m;
    out[3 * row + 1] = s;
    out[3 * row + 2] = owned ? to_float(x[t - vocab_begin]) : 0.f;
  }
}

template <typename T>
cudaError_t launch_slice_logsumexp(const T* logits, int64_t ld, int rows, int vocab_local,
                                   int vocab_begin, const int32_t* targets, float* out,
                                   cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(rows >= 0, "rows " + std::to_string(rows));
  LLAMA2_LAUNCH_REQUIRE(vocab_local > 0 && vocab_begin >= 0,
                        "vocab_begin " + std::to_string(vocab_begin) + ", vocab_local " +
                            std::to_string(vocab_local));
  LLAMA2_LAUNCH_REQUIRE(ld >= vocab_local, "ld " + std::to_string(ld) + ", vocab_local " +
                                               std::to_string(vocab_local));
  if (rows == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(logits != nullptr && out != nullptr, "");
  launch_kernel(slice_logsumexp_kernel<T>, rows, kThreads, 0, stream, logits, ld, vocab_local,
                vocab_begin, targets, out);
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T)                                                                      \
  template cudaError_t launch_slice_logsumexp<T>(const T*, int64_t, int, int, int, const int32_t*, \
                                                 float*, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
