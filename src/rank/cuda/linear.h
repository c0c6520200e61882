// The projections of a layer (y = x . W^T) in the engine's weight dtype (--weight-dtype):
//   auto  W in T: the GEMV kernel for up to LLAMA2_GEMV rows (weight streaming), the skinny
//         tensor-core GEMM up to LLAMA2_SKINNY_ROWS (kernels/gemm_skinny.cuh), cuBLAS above.
//   int8  W8A16: the GEMV dequantizes in its loop (one scale per output row, applied to the sum);
//         products of more rows up to LLAMA2_W8A16_ROWS (default 64) take the tensor-core W8A16
//         GEMM (kernels/gemm_w8a16.cuh), which converts W's bytes in registers and applies the
//         scale to the sums as the GEMV does; more rows run cuBLAS on a dequantized T copy of W
//         (a scratch the size of the largest projection): long prefills and large batches, where
//         cuBLAS's wgmma kernels outrun mma.sync by more than the dequantize costs.
//   fp8   up to LLAMA2_GEMV rows (the GEMV): W8A16, like int8. The GEMV is bound by streaming W;
//         fp8 activations buy it nothing, and cost a quantize launch before every projection
//         (4 per layer, 128 per 7B step) and the accuracy of rounding x to 3 mantissa bits.
//         More rows: W8A8, x quantized to e4m3 per token (launch_quantize_rows), then cuBLASLt's
//         FP8 GEMM (fp8_gemm.h) on the tensor cores, where fp8 x doubles the math rate.
//         So a token's numbers depend on its step's row count (<= LLAMA2_GEMV or not); the HF
//         reference applies the same rule (tests/reference/make_fixtures.py, README there).
//         LLAMA2_W8A16_FP8=1 (an A/B, off by default): the W8A16 GEMM with x in T instead of
//         cuBLASLt for products of more rows than the GEMV takes and at most LLAMA2_W8A16_ROWS
//         (W8A16 numbers there, W8A8 in the GEMV and above).
//   int4  W4A16 (kernels/gemv_w4.cuh): the 4-bit GEMV for up to LLAMA2_GEMV rows, the tensor-core
//         GEMM with the 4-bit weights formed into T in registers (kernels/gemm_w8a16.cuh, W =
//         W4Word) for every larger product, prefill included: no dequantized copy of W.
// --deterministic (LinearRouting::invariant, 16-bit weights only): every product, the LM head's
// too, whatever M, takes the batch-invariant GEMM (kernels/gemm_invariant.cuh); no fusion.
// LLAMA2_QGEMV (TuningKnobs::qgemv) picks the GEMV's arithmetic for 1-byte weights; =old is the
// path before 2026-12-02 (generic conversions, fp8 always W8A8), kept for the A/B.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "common/engine_config.h"
#include "common/tuning_knobs.h"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/gemv.cuh"
#include "kernels/gemv_w4.cuh"
#include "kernels/quant.cuh"
#include "rank/cuda/cuda_weights.h"
#include "rank/cuda/device_buffer.h"
#include "rank/cuda/fp8_gemm.h"

namespace llama2 {

// 4-bit weights: the W8A16 GEMM (4-bit words) takes products of up to this many rows; larger ones
// (prefill) dequantize the weights and run cuBLAS (linear.cu).
constexpr int kInt4GemmMaxRows = 256;

// Which kernel takes a product of M rows (common/tuning_knobs.h: LLAMA2_GEMV, LLAMA2_W8A16_ROWS,
// LLAMA2_SKINNY_ROWS, LLAMA2_W8A16_FP8).
struct LinearRouting {
  int gemv_rows = 1;
  int w8a16_rows = 0;
  int skinny_rows = 0;  // 16-bit weights: more rows than the GEMV, up to these: the skinny GEMM
  bool fp8_w8a16 = false;
  bool fp8_fuse = true;  // LLAMA2_FP8_FUSE: fp8_rows() offers the e4m3 rows to their producers
  // --deterministic: every product on the batch-invariant GEMM (fp16/bf16 weights in T only)
  bool invariant = false;
};

// One rank's projection widths: q|k|v [q + 2 kv, hidden], o [hidden, q], gate|up [2 ffn, hidden],
// down [hidden, ffn] (q, kv, ffn: this rank's shard).
struct ProjectionDims {
  int64_t hidden = 0, q = 0, kv = 0, ffn = 0;
};

template <typename T>
class CudaLinear {
 public:
  // max_rows: the most rows of x a product gets. fp8: Error unless every K (hidden, q, ffn) is a
  // multiple of 16 (cuBLASLt's FP8 layout rule and the GEMV's 16-byte loads).
  CudaLinear(WeightDType wd, const LinearRouting& routing, int max_rows, const ProjectionDims& dims,
             cublasHandle_t cublas, cudaStream_t stream, QgemvChoice qgemv = QgemvChoice::kAuto);

  // y [M, N] = x [M, K] . W [N, K]^T. A fusion (kernels/gemv.cuh: the input RMSNorm, the
  // residual add) needs fuses(x, w, M, K) and goes to the GEMV. x_quantized: x's e4m3 rows are
  // already in fp8_rows(M) (written by the kernel that produced x); the product skips quantizing.
  void matmul(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
              const kernels::GemvFusion<T>& fuse = {}, bool x_quantized = false);
  // fp8 products of M rows on cuBLASLt (W8A8): where the kernel producing their input may also
  // write it quantized (the norms, gate_up_swiglu's act), sparing the product its quantize launch
  // (before: 4 per layer, ~5 us each at 64 rows on an H200). {} when M rows do not quantize x
  // (other dtypes, the GEMV, the W8A16 A/B) or LLAMA2_FP8_FUSE=0.
  kernels::RowsE4m3 fp8_rows(int M) const;
  // With fp8_rows(M) on: the product's unscaled sums (kernels::Fp8Sum) and both scales, without the
  // scale launch, for a consumer that applies them (kernels::launch_add_rmsnorm_scaled, the
  // residual add after o and down on one rank). The sums stay valid until the next product. {}
  // (nothing done) otherwise.
  kernels::ScaledSums matmul_sums(const T* x, const LinearWeight& w, int M, int N, int K,
                                  bool x_quantized);
  // Whether this product goes to the GEMV with x in T, which can fuse: one row, for 1-byte
  // weights not LLAMA2_QGEMV=old's fp8 activations, and with `norm` a row that fits the GEMV's
  // shared memory.
  bool fuses(const T* x, const LinearWeight& w, int M, int K, bool norm) const;
  // The same with W in T whatever the weight dtype (the LM head).
  void matmul_plain(const T* x, const T* w, T* y, int M, int N, int K);
  // One launch for act [M, F] = silu(x . gate^T) * (x . up^T) when the GEMV or the W8A16 GEMM
  // takes M rows (true); otherwise false and nothing is done (the caller runs matmul into
  // [M, 2F], then SwiGLU). act_e4m3 with fp8_rows(M) on: the cuBLASLt product, then act straight
  // into fp8_rows(M) as the down projection's quantized input (true; act is not written).
  // x_quantized as for matmul.
  bool gate_up_swiglu(const T* x, const LinearWeight& w, T* act, int M, int F, int K,
                      const kernels::GemvFusion<T>& fuse = {}, bool x_quantized = false,
                      bool act_e4m3 = false);

  // --weight-dtype fp8: times cuBLASLt's FP8 algorithms (Fp8Gemm::tune) for the four projection
  // shapes at every row count in `rows` that goes to the FP8 GEMM, on these layers' weights, and
  // keeps the fastest for each. Other dtypes: nothing. Start-up only, before any graph capture.
  void tune_fp8(const std::vector<CudaLayerWeights>& layers, const std::vector<int>& rows);

  // Device bytes of the scratch buffers (activation quantization, int8's dequantized copy, the
  // W8A16 GEMM's split-K sums).
  uint64_t scratch_bytes() const {
    return xq_.bytes() + xs_.bytes() + dequant_.bytes() + split_sums_.bytes() +
           split_counts_.bytes();
  }

 private:
  // fp8: x [M, K] to e4m3 with per-row scales in xq_ / xs_.
  void quantize_x(const T* x, int M, int K);
  bool use_gemv(const void* x, const void* w, int M, int K) const;
  // M rows of a 16-bit-weight product go to the skinny GEMM (kernels/gemm_skinny.cuh).
  bool use_skinny(const T* x, const T* w, const T* y, int M, int N, int K) const;
  // M rows go to the W8A16 GEMM (int8 weights, or fp8 with LLAMA2_W8A16_FP8=1; int4: every M
  // above the GEMV's).
  bool use_w8a16(const void* x, const void* w, int M, int K) const;
  // swiglu: W is [gate; up] (N = 2F) and y is act [M, F].
  template <typename W>
  void gemm_w8a16(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
                  bool swiglu = false);
  void matmul_quantized(const T* x, const LinearWeight& w, T* y, int M, int N, int K,
                        const kernels::GemvFusion<T>& fuse, bool x_quantized);
  void gate_up_quantized(const T* x, const LinearWeight& w, T* act, int M, int F, int K,
                         const kernels::GemvFusion<T>& fuse);
  // fp8 with M rows: quantize x (W8A8)? Not for the GEMV (W8A16), except with LLAMA2_QGEMV=old.
  bool fp8_activations(bool gemv) const { return !gemv || qgemv_ == QgemvChoice::kOld; }

  WeightDType wd_;
  ProjectionDims dims_;
  int max_rows_;
  int gemv_rows_;
  int w8a16_rows_;
  int skinny_rows_;   // 0 unless T is 16-bit and the skinny GEMM takes some row count
  int sm_count_ = 0;  // multiprocessors: the skinny GEMM's split of K
  bool fp8_w8a16_;
  bool fp8_fuse_;
  bool invariant_;  // LinearRouting::invariant
  QgemvChoice qgemv_;
  cublasHandle_t cublas_;
  cudaStream_t stream_;
  DeviceBuffer xq_, xs_;  // fp8: [max_rows, max_k] e4m3, [max_rows] fp32
  DeviceBuffer dequant_;  // int8: [max_weight_elems] T
  // The W8A16 GEMM's split-K workspace: fp32 partial sums and per-tile counters (zeroed once).
  DeviceBuffer split_sums_, split_counts_;
  kernels::GemmW8A16Workspace w8a16_ws_;
  std::unique_ptr<Fp8Gemm> fp8_;
};

}  // namespace llama2
