// Helpers shared by the GPU kernel tests: device detection (every test skips cleanly without a
// device), typed device buffers, fp32 <-> T conversion, inputs exactly representable in every
// dtype, and tolerant comparison with a message that names the kernel, dtype and shape.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/step_plan.h"
#include "kernels/dtype.cuh"
#include "kernels/gemv.cuh"

namespace llama2::gputest {

using kernels::dtype_name;

inline bool gpu_available() {
  static const bool available = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return n > 0;
  }();
  return available;
}

// First statement of every GPU test case.
#define LLAMA2_GPU_TEST_OR_SKIP()              \
  do {                                         \
    if (!::llama2::gputest::gpu_available()) { \
      MESSAGE("no CUDA device: skipped");      \
      return;                                  \
    }                                          \
  } while (0)

#define LLAMA2_CUDA_REQUIRE(call)                                                               \
  do {                                                                                          \
    const cudaError_t llama2_rc_ = (call);                                                      \
    REQUIRE_MESSAGE(llama2_rc_ == cudaSuccess, #call << ": " << cudaGetErrorName(llama2_rc_)    \
                                                     << " " << cudaGetErrorString(llama2_rc_)); \
  } while (0)

// Unit roundoff of T: the relative error of one rounding.
template <typename T>
constexpr double unit_roundoff() {
  if constexpr (sizeof(T) == 4)
    return 0x1p-24;
  else if constexpr (std::is_same_v<T, __half>)
    return 0x1p-11;
  else
    return 0x1p-8;
}

// Relative tolerance of a check that would be 1e-5 in fp32 and `n_roundings` roundings to T in
// fp16/bf16 (plus a little slack for the fp32 work around them).
template <typename T>
double rel_tol(double n_roundings) {
  return sizeof(T) == 4 ? 1e-5 : (n_roundings + 0.5) * unit_roundoff<T>();
}

template <typename T>
std::vector<T> to_dtype(const std::vector<float>& x) {
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = kernels::from_float<T>(x[i]);
  return y;
}

template <typename T>
std::vector<float> to_f32(const std::vector<T>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = kernels::to_float(x[i]);
  return y;
}

template <typename T>
std::vector<float> round_vec(const std::vector<float>& x) {
  return to_f32(to_dtype<T>(x));
}

// The double reference of the GEMM tests: want[m, n] = sum_k x[m, k] w[n, k] (unrounded) and
// bound[m, n] = sum_k |x[m, k] w[n, k]| (what an fp32 accumulation's error scales with).
// x [M, K], w [N, K] row-major.
inline void reference_xwt(const std::vector<float>& x, const std::vector<float>& w, int M, int N,
                          int K, std::vector<double>* want, std::vector<double>* bound) {
  want->assign(size_t(M) * N, 0.0);
  bound->assign(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = 0, t = 0;
      for (int i = 0; i < K; ++i) {
        const double p = double(x[size_t(m) * K + i]) * w[size_t(n) * K + i];
        s += p;
        t += std::fabs(p);
      }
      (*want)[size_t(m) * N + n] = s;
      (*bound)[size_t(m) * N + n] = t;
    }
  }
}

// Uniform values in [lo, hi) rounded to bf16 precision, with |x| < 2^-10 flushed to zero: exactly
// representable in fp32, fp16 and bf16 alike, so one CPU reference serves every dtype and the
// inputs of a kernel are the same numbers in each.
inline std::vector<float> exact_random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = __bfloat162float(__float2bfloat16_rn(dist(rng)));
    if (std::fabs(x) < 0x1p-10f) x = 0.f;
  }
  return v;
}

// A device allocation of n elements of T, freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) LLAMA2_CUDA_REQUIRE(cudaMalloc(&ptr_, n * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_ > 0)
      LLAMA2_CUDA_REQUIRE(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0)
      LLAMA2_CUDA_REQUIRE(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bytes 0xff: NaN in fp32, fp16 and bf16, -1 in int32. Outputs are poisoned before every
  // launch so that an element the kernel fails to write cannot pass.
  void poison() {
    if (n_ > 0) LLAMA2_CUDA_REQUIRE(cudaMemset(ptr_, 0xff, n_ * sizeof(T)));
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

struct Tol {
  double rtol = 0;
  double atol = 0;
};

// Every element must satisfy |got - want| <= atol + rtol * |want|; NaN passes only where both are
// NaN. Reports the number of failures, the first and the worst, under `what`.
inline void expect_close(const std::string& what, const std::vector<float>& got,
                         const std::vector<float>& want, Tol tol) {
  REQUIRE_MESSAGE(got.size() == want.size(),
                  what << ": size " << got.size() << " vs " << want.size());
  size_t bad = 0, first = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    double excess = 0;
    if (g == w) {  // also equal infinities, whose difference is NaN
      ok = true;
    } else if (std::isnan(g) || std::isnan(w)) {
      ok = std::isnan(g) && std::isnan(w);
      excess = INFINITY;
    } else {
      const double err = std::fabs(g - w), lim = tol.atol + tol.rtol * std::fabs(w);
      ok = err <= lim;
      excess = err - lim;
    }
    if (!ok) {
      if (bad == 0) first = i;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " elements outside atol "
                               << tol.atol << " + rtol " << tol.rtol << "; first [" << first
                               << "] got " << got[first] << " want " << want[first] << "; worst ["
                               << worst << "] got " << got[worst] << " want " << want[worst]);
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) {
    if (!std::isnan(x)) m = std::max(m, static_cast<double>(std::fabs(x)));
  }
  return m;
}

// Runs f(T{}) for T = float, __half, __nv_bfloat16.
template <typename F>
void for_each_dtype(F&& f) {
  f(float{});
  f(__half{});
  f(__nv_bfloat16{});
}

// A plan whose sequences own shuffled blocks of a cache of `num_blocks` blocks.
inline llama2::StepPlan make_plan(const std::vector<std::pair<int, int>>& seqs, int block_size,
                                  uint32_t seed, int* num_blocks) {
  llama2::StepPlan plan;
  int total_blocks = 0;
  for (const auto& s : seqs)
    total_blocks += static_cast<int>(kernels::ceil_div(s.first + s.second, block_size));
  *num_blocks = total_blocks + 3;  // a few blocks nobody owns: must stay untouched
  std::vector<int32_t> ids(*num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  int next = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    llama2::SeqStep st;
    st.seq_id = static_cast<int32_t>(i);
    st.pos_begin = seqs[i].first;
    st.n_tokens = seqs[i].second;
    st.table_begin = static_cast<int32_t>(plan.block_ids.size());
    st.table_len = static_cast<int32_t>(kernels::ceil_div(st.pos_begin + st.n_tokens, block_size));
    for (int b = 0; b < st.table_len; ++b) plan.block_ids.push_back(ids[next++]);
    plan.seqs.push_back(st);
    for (int t = 0; t < st.n_tokens; ++t) plan.tokens.push_back(0);
  }
  return plan;
}

// "name fp16 [key=value ...]": the label of every check.
template <typename T>
std::string label(const std::string& kernel, const std::string& shape) {
  return kernel + " " + dtype_name<T>() + " " + shape;
}

// A GEMV test's weights wf [N, K] in every type the one-row GEMV takes, each with the arithmetic
// it runs under: T (GemvMath::kAuto); for fp16/bf16 also int8 (wf x 127) and e4m3 (wf x 448) with
// per-row scales [N], under kFp32, kConvert (int8 only: e4m3 with x in T has no generic kernel)
// and kHalf2 (fp16). run(w, scale, math, name) is called once per case, w a device pointer of the
// weight type (scale nullptr for T).
template <typename T, typename Run>
void for_each_gemv_weight(const std::vector<float>& wf, int N, Run&& run) {
  DeviceBuffer<T> w(to_dtype<T>(wf));
  const std::string t = dtype_name<T>();
  run(static_cast<const T*>(w.get()), static_cast<const float*>(nullptr), kernels::GemvMath::kAuto,
      t);
  if constexpr (!std::is_same_v<T, float>) {
    DeviceBuffer<float> scale(exact_random(N, 23 + N, 0.001f, 0.01f));
    std::vector<int8_t> wi(wf.size());
    std::vector<__nv_fp8_e4m3> we(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wi[i] = static_cast<int8_t>(wf[i] * 127.f);
      we[i] = __nv_fp8_e4m3(wf[i] * 448.f);
    }
    DeviceBuffer<int8_t> dwi(wi);
    DeviceBuffer<__nv_fp8_e4m3> dwe(we);
    std::vector<kernels::GemvMath> maths = {kernels::GemvMath::kFp32, kernels::GemvMath::kConvert};
    if (std::is_same_v<T, __half>) maths.push_back(kernels::GemvMath::kHalf2);
    for (const kernels::GemvMath m : maths) {
      const std::string math = " math " + std::to_string(static_cast<int>(m));
      run(static_cast<const int8_t*>(dwi.get()), static_cast<const float*>(scale.get()), m,
          t + " int8" + math);
      if (m != kernels::GemvMath::kConvert) {
        run(static_cast<const __nv_fp8_e4m3*>(dwe.get()), static_cast<const float*>(scale.get()), m,
            t + " fp8" + math);
      }
    }
  }
}

}  // namespace llama2::gputest
