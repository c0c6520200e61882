#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <string>
#include <utility>

#include "common/check.h"
#include "kernels/gemm_invariant.cuh"
#include "kernels/gemm_skinny.cuh"
#include "kernels/gemv.cuh"
#include "kernels/quant.cuh"
#include "rank/cuda/cuda_types.h"
#include "rank/cuda/linear.h"

namespace llama2 {
namespace {
using E4m3 = __nv_fp8_e4m3;
// fp32 models keep fp32 weights (choose_weight_dtype refuses quantizing them): the quantized
// kernels are not instantiated for float.
template <typename T>
constexpr bool kQuantizable = !std::is_same_v<T, float>;

bool is_aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

kernels::W4Matrix w4(const LinearWeight& w) {
  return {w.w.as<uint32_t>(), w.sz.as<uint32_t>(), w.group};
}

// LLAMA2_QGEMV as the GEMV's arithmetic for 1-byte weights (kernels/gemv.cuh).
template <typename T>
kernels::GemvMath gemv_math(QgemvChoice q) {
  switch (q) {
    case QgemvChoice::kHalf2:
      // f16x2 products need fp16 activations; a bf16 model keeps the default.
      return std::is_same_v<T, __half> ? kernels::GemvMath::kHalf2 : kernels::GemvMath::kAuto;
    case QgemvChoice::kOld:
      return kernels::GemvMath::kConvert;
    case QgemvChoice::kAuto:
      break;
  }
  return kernels::GemvMath::kAuto;
}
}  // namespace

template <typename T>
CudaLinear<T>::CudaLinear(WeightDType wd, const LinearRouting& r, int max_rows,
                          const ProjectionDims& d, cublasHandle_t cublas, cudaStream_t stream,
                          QgemvChoice qgemv)
    : wd_(wd),
      dims_(d),
      max_rows_(max_rows),
      gemv_rows_(r.gemv_rows),
      w8a16_rows_(r.w8a16_rows),
      skinny_rows_(kQuantizable<T> && r.skinny_rows > r.gemv_rows ? r.skinny_rows : 0),
      fp8_w8a16_(r.fp8_w8a16),
      fp8_fuse_(r.fp8_fuse),
      invariant_(r.invariant),
      qgemv_(qgemv),
      cublas_(cublas),
      stream_(stream) {
  LLAMA2_CHECK(wd == WeightDType::kAuto || kQuantizable<T>);
  if (invariant_) {
    // choose_deterministic admits 16-bit weights only; the GEMM reads whole 16-byte pieces.
    LLAMA2_CHECK(wd == WeightDType::kAuto && kQuantizable<T>);
    for (const auto& [what, k] : {std::pair<const char*, int64_t>{"hidden size", d.hidden},
                                  {"attention width per rank (heads x head_dim)", d.q},
                                  {"intermediate size per rank", d.ffn}}) {
      if (k % 8 != 0) {
        throw Error(std::string("--deterministic on the cuda backend needs every projection's "
                                "input width to be a multiple of 8; the ") +
                    what + " is " + std::to_string(k) + " (use --backend cpu)");
      }
    }
    CUDA_CHECK(kernels::prepare_gemm_invariant());  // before any graph capture
    skinny_rows_ = 0;
    gemv_rows_ = 0;
  }
  static_assert(kSkinnyKnobMaxRows == kernels::kSkinnyMaxRows, "LLAMA2_SKINNY_ROWS's range");
  if (skinny_rows_ > 0) {
    CUDA_CHECK(kernels::prepare_gemm_skinny());  // before any graph capture
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  }
  const int64_t max_k = std::max({d.hidden, d.q, d.ffn});
  const bool w8a16 = wd == WeightDType::kInt8 || (wd == WeightDType::kFp8 && fp8_w8a16_);
  // int4: the GEMM takes the products above the GEMV's rows up to kInt4GemmMaxRows; above, the
  // weights are dequantized into dequant_ for cuBLAS (prefill 2048 on the H200, 2026-12-04: the
  // GEMM with in-register conversion reached 232 model TFLOP/s, fp16 weights through cuBLAS 578).
  if (wd == WeightDType::kInt4) w8a16_rows_ = std::min(max_rows, kInt4GemmMaxRows);
  if ((w8a16 || wd == WeightDType::kInt4) && kQuantizable<T> &&
      std::min(max_rows, w8a16_rows_) > gemv_rows_) {
    CUDA_CHECK(kernels::prepare_gemm_w8a16());  // before any graph capture
    // Split-K scratch for the largest need of any product the W8A16 GEMM may take (a few MB).
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&w8a16_ws_.sm_count, cudaDevAttrMultiProcessorCount, device));
    int64_t sums = 0;
    for (int M = gemv_rows_ + 1; M <= std::min(max_rows, w8a16_rows_); ++M) {
      for (const auto& [N, K] : {std::pair<int64_t, int64_t>{d.q + 2 * d.kv, d.hidden},
                                 {d.hidden, d.q},
                                 {2 * d.ffn, d.hidden},
                                 {d.hidden, d.ffn}}) {
        sums = std::max(sums, kernels::gemm_w8a16_partial_elems(
                                  M, static_cast<int>(N), static_cast<int>(K), w8a16_ws_.sm_count));
      }
    }
    if (sums > 0) {
      w8a16_ws_.n_counters = kernels::gemm_w8a16_counters(w8a16_ws_.sm_count);
      split_sums_ = DeviceBuffer(static_cast<size_t>(sums) * sizeof(float), "W8A16 split-K sums");
      split_counts_ = DeviceBuffer(static_cast<size_t>(w8a16_ws_.n_counters) * sizeof(int),
                                   "W8A16 split-K counters");
      CUDA_CHECK(cudaMemsetAsync(split_counts_.as<void>(), 0, split_counts_.bytes(), stream));
      w8a16_ws_.partial = split_sums_.as<float>();
      w8a16_ws_.partial_elems = sums;
      w8a16_ws_.counters = split_counts_.as<int>();
    }
  }
  if (wd == WeightDType::kFp8) {
    for (const auto& [what, k] : {std::pair<const char*, int64_t>{"hidden size", d.hidden},
                                  {"attention width per rank (heads x head_dim)", d.q},
                                  {"intermediate size per rank", d.ffn}}) {
      if (k % 16 != 0) {
        throw Error(std::string("--weight-dtype fp8 needs every projection's input width to be a "
                                "multiple of 16; the ") +
                    what + " is " + std::to_string(k) +
                    " (use --weight-dtype int8 or auto, or another tensor-parallel degree)");
      }
    }
    xq_ = DeviceBuffer(static_cast<size_t>(max_rows) * max_k, "fp8 activations");
    xs_ = DeviceBuffer(static_cast<size_t>(max_rows) * sizeof(float), "fp8 activation scales");
    const int64_t max_n = std::max({d.q + 2 * d.kv, d.hidden, 2 * d.ffn});
    fp8_ = std::make_unique<Fp8Gemm>(TypeInfo<T>::kCuda, max_rows, max_n, stream);
  } else if ((wd == WeightDType::kInt8 && max_rows > gemv_rows_ &&
              (max_rows > w8a16_rows_ || d.hidden % 16 != 0 || d.q % 16 != 0 || d.ffn % 16 != 0)) ||
             (wd == WeightDType::kInt4 && max_rows > w8a16_rows_)) {
    // Products the W8A16 GEMM does not take: more rows than LLAMA2_W8A16_ROWS (int4:
    // kInt4GemmMaxRows), or (int8) a K that is not a multiple of 16. The planner counts int4's
    // (CapacityPlan::scratch_bytes_per_gpu).
    const int64_t largest = std::max(
        {(d.q + 2 * d.kv) * d.hidden, d.hidden * d.q, 2 * d.ffn * d.hidden, d.hidden * d.ffn});
    dequant_ = DeviceBuffer(static_cast<size_t>(largest) * sizeof(T),
                            "quantized weights dequantized for cuBLAS");
  }
}

template <typename T>
void CudaLinear<T>::tune_fp8(const std::vector<CudaLayerWeights>& layers,
                             const std::vector<int>& rows) {
  if (wd_ != WeightDType::kFp8 || layers.empty()) return;
  // The activations' values do not matter to the timing; 0x38 is 1.0 in e4m3.
  CUDA_CHECK(cudaMemsetAsync(xq_.as<void>(), 0x38, xq_.bytes(), stream_));
  const ProjectionDims& d = dims_;
  using Member = const LinearWeight CudaLayerWeights::*;
  const std::pair<Member, std::pair<int64_t, int64_t>> shapes[] = {
      {&CudaLayerWeights::qkv, {d.q + 2 * d.kv, d.hidden}},
      {&CudaLayerWeights::o, {d.hidden, d.q}},
      {&CudaLayerWeights::gate_up, {2 * d.ffn, d.hidden}},
      {&CudaLayerWeights::down, {d.hidden, d.ffn}}};
  for (const auto& [member, nk] : shapes) {
    std::vector<const void*> weights;
    for (const CudaLayerWeights& l : layers) weights.push_back((l.*member).w.template as<void>());
    for (const int M : rows) {
      // The rows the FP8 GEMM takes (matmul_quantized): above the GEMV, not the W8A16 A/B's.
      if (M <= gemv_rows_ || M > max_rows_ || (fp8_w8a16_ && M <= w8a16_rows_)) continue;
      fp8_->tune(xq_.as<void>(), weights, M, static_cast<int>(nk.first),
                 static_cast<int>(nk.second));
    }
  }
}

template <typename T>
kernels::RowsE4m3 CudaLinear<T>::fp8_rows(int M) const {
  // The W8A8 rows of matmul_quantized: fp8 weights, more rows than the GEMV, not the W8A16 A/B.
  if (wd_ != WeightDType::kFp8 || !fp8_fuse_ || M <= gemv_rows_ || M > max_rows_ ||
      (fp8_w8a16_ && M <= w8a16_rows_)) {
    return {};
  }
  return {xq_.as<__nv_fp8_e4m3>(), xs_.as<float>()};
}

template <typename T>
kernels::ScaledSums CudaLinear<T>::matmul_sums(const T* x, const LinearWeight& w, int M, int N,
                                               int K, bool x_quantized) {
  if (!fp8_rows(M).on()) return {};
  if (!x_quantized) quantize_x(x, M, K);
  return {fp8_->run_sums(xq_.as<void>(), w.w.as<void>(), M, N, K), xs_.as<float>(),
          w.scale.as<float>()};
}

template <typename T>
bool CudaLinear<T>::use_gemv(const void* x, const void* w, int M, int K) const {
  // kernels::gemv_fits with the element sizes of this weight dtype (16 bytes of W per load).
  if (M > gemv_rows_) return false;
  if (wd_ == WeightDType::kAuto) {
    return kernels::gemv_fits(static_cast<const T*>(x), static_cast<const T*>(w), M, K);
  }
  if (wd_ == WeightDType::kInt4) {  // the group suits the kernels (checked at load)
    return M <= kernels::kGemvMaxRows && K % 32 == 0 && is_aligned16(x) && is_aligned16(w);
  }
  return kernels::gemv_fits(static_cast<const T*>(x), static_cast<const int8_t*>(w), M, K);
}

template <typename T>
bool CudaLinear<T>::use_w8a16(const void* x, const void* w, int M, int K) const {
  if (M <= gemv_rows_ || M > w8a16_rows_) return false;
  if (wd_ == WeightDType::kInt4) {
    return K % 32 == 0 && is_aligned16(x) && is_aligned16(w);
  }
  if (wd_ != WeightDType::kInt8 && !(wd_ == WeightDType::kFp8 && fp8_w8a16_)) return false;
  return kernels::gemm_w8a16_fits(static_cast<const T*>(x), static_cast<const int8_t*>(w), K);
}

template <typename T>
template <typename W>
void CudaLinear<T>::gemm_w8a16(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
                               bool swiglu) {
  if constexpr (kQuantizable<T>) {
    kernels::GemmW8A16Args<T, W> args{x, w.w.as<W>(), w.scale.as<float>(), y, M, N, K, swiglu};
    args.sz = w.sz.as<uint32_t>();  // int4's group scales (empty otherwise)
    args.group = w.group;
    CUDA_CHECK((kernels::launch_gemm_w8a16<T, W>(args, kernels::plan_gemm_w8a16(M, N, K, w8a16_ws_),
                                                 w8a16_ws_, stream_)));
  }
}

template <typename T>
void CudaLinear<T>::quantize_x(const T* x, int M, int K) {
  CUDA_CHECK(
      (kernels::launch_quantize_rows<E4m3, T>(x, xq_.as<E4m3>(), xs_.as<float>(), M, K, stream_)));
}

template <typename T>
void CudaLinear<T>::matmul_plain(const T* x, const T* w, T* y, int M, int N, int K) {
  if (M == 0) return;
  if (invariant_) {
    if constexpr (kQuantizable<T>) {
      CUDA_CHECK(kernels::launch_gemm_invariant<T>({x, w, y, M, N, K}, stream_));
    }
    return;
  }
  if (M <= gemv_rows_ && kernels::gemv_fits(x, w, M, K)) {
    CUDA_CHECK(kernels::launch_gemv<T>(x, w, y, M, N, K, stream_));
  } else if (use_skinny(x, w, y, M, N, K)) {
    if constexpr (kQuantizable<T>) {
      CUDA_CHECK(kernels::launch_gemm_skinny<T>(
          {x, w, y, M, N, K}, kernels::plan_gemm_skinny_splits(M, N, K, sm_count_), stream_));
    }
  } else {
    gemm_xwt(cublas_, TypeInfo<T>::kCuda, x, w, y, M, N, K);
  }
}

template <typename T>
bool CudaLinear<T>::use_skinny(const T* x, const T* w, const T* y, int M, int N, int K) const {
  // Only the products whose 128-column tiles fill at most half the multiprocessors (7B and 13B's o
  // and down): there cuBLAS leaves most of the GPU idle and K split over a cluster won (one H200,
  // 2026-12-02, llama2_bench_kernels skinny: 7B o 12.0-13.9 us vs cuBLAS 16.2-16.7 at 1-32 rows,
  // down 25.4-28.6 vs 28.6-30.0); on the wide ones (qkv, gate|up, the LM head) and at 64 rows
  // cuBLAS's wgmma kernels were as fast or faster.
  return M > gemv_rows_ && M <= skinny_rows_ &&
         2 * ((N + kernels::kSkinnyBlockN - 1) / kernels::kSkinnyBlockN) <= sm_count_ &&
         kernels::gemm_skinny_fits(x, w, y, M, N, K);
}

template <typename T>
bool CudaLinear<T>::fuses(const T* x, const LinearWeight& w, int M, int K, bool norm) const {
  return !invariant_ && M == 1 && use_gemv(x, w.w.as<void>(), M, K) &&
         (wd_ != WeightDType::kFp8 || !fp8_activations(true)) &&
         (!norm || (K % static_cast<int>(16 / sizeof(T)) == 0 &&
                    int64_t{K} * static_cast<int64_t>(sizeof(T)) <= kernels::kGemvNormMaxBytes));
}

template <typename T>
void CudaLinear<T>::matmul(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
                           const kernels::GemvFusion<T>& fuse, bool x_quantized) {
  if (M == 0) return;
  LLAMA2_CHECK(!x_quantized || fp8_rows(M).on());
  LLAMA2_CHECK(!fuse.any() || fuses(x, w, M, K, fuse.norm_weight != nullptr));
  if (wd_ == WeightDType::kAuto) {
    if (fuse.any()) {
      CUDA_CHECK(kernels::launch_gemv<T>(x, w.w.as<T>(), y, M, N, K, stream_, fuse));
      return;
    }
    return matmul_plain(x, w.w.as<T>(), y, M, N, K);
  }
  matmul_quantized(x, w, y, M, N, K, fuse, x_quantized);
}

template <typename T>
void CudaLinear<T>::matmul_quantized(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
                                     const kernels::GemvFusion<T>& fuse, bool x_quantized) {
  if constexpr (kQuantizable<T>) {
    const bool gemv = use_gemv(x, w.w.as<void>(), M, K);
    if (!gemv && use_w8a16(x, w.w.as<void>(), M, K)) {
      if (wd_ == WeightDType::kInt8) return gemm_w8a16<int8_t>(x, w, y, M, N, K);
      if (wd_ == WeightDType::kInt4) return gemm_w8a16<kernels::W4Word>(x, w, y, M, N, K);
      return gemm_w8a16<E4m3>(x, w, y, M, N, K);
    }
    switch (wd_) {
      case WeightDType::kAuto:
        break;
      case WeightDType::kInt4:
        if (gemv) {
          CUDA_CHECK(kernels::launch_gemv_w4<T>(x, w4(w), y, M, N, K, stream_, fuse));
        } else {  // more rows than the 4-bit GEMM takes: dequantized, then cuBLAS
          LLAMA2_CHECK(!fuse.any() && dequant_.bytes() >= static_cast<size_t>(N) * K * sizeof(T));
          CUDA_CHECK(kernels::launch_dequantize_w4<T>(w4(w), dequant_.as<T>(), N, K, stream_));
          gemm_xwt(cublas_, TypeInfo<T>::kCuda, x, dequant_.as<T>(), y, M, N, K);
        }
        return;
      case WeightDType::kInt8:
        if (gemv) {
          CUDA_CHECK((kernels::launch_gemv_q<T, T, int8_t>(x, nullptr, w.w.as<int8_t>(),
                                                           w.scale.as<float>(), y, M, N, K, stream_,
                                                           gemv_math<T>(qgemv_), fuse)));
        } else {
          LLAMA2_CHECK(dequant_.bytes() >= static_cast<size_t>(N) * K * sizeof(T));
          CUDA_CHECK((kernels::launch_dequantize_rows<int8_t, T>(
              w.w.as<int8_t>(), w.scale.as<float>(), dequant_.as<T>(), N, K, stream_)));
          gemm_xwt(cublas_, TypeInfo<T>::kCuda, x, dequant_.as<T>(), y, M, N, K);
        }
        return;
      case WeightDType::kFp8:
        if (!fp8_activations(gemv)) {  // W8A16 (linear.h)
          CUDA_CHECK((kernels::launch_gemv_q<T, T, E4m3>(x, nullptr, w.w.as<E4m3>(),
                                                         w.scale.as<float>(), y, M, N, K, stream_,
                                                         gemv_math<T>(qgemv_), fuse)));
          return;
        }
        if (!x_quantized) quantize_x(x, M, K);
        if (gemv) {
          CUDA_CHECK((kernels::launch_gemv_q<T, E4m3, E4m3>(xq_.as<E4m3>(), xs_.as<float>(),
                                                            w.w.as<E4m3>(), w.scale.as<float>(), y,
                                                            M, N, K, stream_)));
        } else {
          fp8_->run(xq_.as<void>(), xs_.as<float>(), w.w.as<void>(), w.scale.as<float>(), y, M, N,
                    K);
        }
        return;
    }
  }
}

template <typename T>
bool CudaLinear<T>::gate_up_swiglu(const T* x, const LinearWeight& w, T* act, int M, int F, int K,
                                   const kernels::GemvFusion<T>& fuse, bool x_quantized,
                                   bool act_e4m3) {
  LLAMA2_CHECK(!fuse.any() || fuses(x, w, M, K, fuse.norm_weight != nullptr));
  LLAMA2_CHECK(!x_quantized || fp8_rows(M).on());
  if (invariant_) return false;  // the GEMM into [M, 2F], then SwiGLU (elementwise)
  if (act_e4m3 && fp8_rows(M).on()) {
    if constexpr (kQuantizable<T>) {
      if (!x_quantized) quantize_x(x, M, K);
      // The product reads xq_ before the epilogue kernel overwrites it with act (stream order).
      fp8_->run_swiglu_e4m3(xq_.as<void>(), xs_.as<float>(), w.w.as<void>(), w.scale.as<float>(),
                            fp8_rows(M), M, 2 * F, K);
    }
    return true;
  }
  if (use_w8a16(x, w.w.as<void>(), M, K)) {  // SwiGLU in the W8A16 GEMM's epilogue
    if (wd_ == WeightDType::kInt8) {
      gemm_w8a16<int8_t>(x, w, act, M, 2 * F, K, true);
    } else if (wd_ == WeightDType::kInt4) {
      gemm_w8a16<kernels::W4Word>(x, w, act, M, 2 * F, K, true);
    } else {
      gemm_w8a16<E4m3>(x, w, act, M, 2 * F, K, true);
    }
    return true;
  }
  if (!use_gemv(x, w.w.as<void>(), M, K)) return false;
  if (wd_ == WeightDType::kAuto) {
    CUDA_CHECK(kernels::launch_gemv_gate_up_swiglu<T>(x, w.w.as<T>(), act, M, F, K, stream_, fuse));
    return true;
  }
  gate_up_quantized(x, w, act, M, F, K, fuse);
  return true;
}

template <typename T>
void CudaLinear<T>::gate_up_quantized(const T* x, const LinearWeight& w, T* act, int M, int F,
                                      int K, const kernels::GemvFusion<T>& fuse) {
  if constexpr (kQuantizable<T>) {
    switch (wd_) {
      case WeightDType::kAuto:
        break;
      case WeightDType::kInt4:
        CUDA_CHECK(
            kernels::launch_gemv_w4_gate_up_swiglu<T>(x, w4(w), act, M, F, K, stream_, fuse));
        break;
      case WeightDType::kInt8:
        CUDA_CHECK((kernels::launch_gemv_q_gate_up_swiglu<T, T, int8_t>(
            x, nullptr, w.w.as<int8_t>(), w.scale.as<float>(), act, M, F, K, stream_,
            gemv_math<T>(qgemv_), fuse)));
        break;
      case WeightDType::kFp8:
        if (!fp8_activations(true)) {  // W8A16 (linear.h)
          CUDA_CHECK((kernels::launch_gemv_q_gate_up_swiglu<T, T, E4m3>(
              x, nullptr, w.w.as<E4m3>(), w.scale.as<float>(), act, M, F, K, stream_,
              gemv_math<T>(qgemv_), fuse)));
          break;
        }
        quantize_x(x, M, K);
        CUDA_CHECK((kernels::launch_gemv_q_gate_up_swiglu<T, E4m3, E4m3>(
            xq_.as<E4m3>(), xs_.as<float>(), w.w.as<E4m3>(), w.scale.as<float>(), act, M, F, K,
            stream_)));
        break;
    }
  }
}

template class CudaLinear<float>;
template class CudaLinear<__half>;
template class CudaLinear<__nv_bfloat16>;

}  // namespace llama2
