#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "kernels/convert.cuh"
#include "kernels/dtype.cuh"
#include "kernels/gemv_w4.cuh"
#include "kernels/quant.cuh"
#include "kernels/w4_convert.cuh"
#include "rank/cuda/cuda_weights.h"
#include "rank/fp8_checkpoint.h"
#include "rank/int4_checkpoint.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"

namespace llama2 {
namespace {

kernels::SourceType source_type(DType d) {
  switch (d) {
    case DType::F32:
      return kernels::SourceType::kF32;
    case DType::F16:
      return kernels::SourceType::kF16;
    case DType::BF16:
      return kernels::SourceType::kBF16;
    default:
      break;
  }
  throw Error("unsupported checkpoint dtype (allowed: F32, F16, BF16)");
}

template <typename T>
class Filler {
 public:
  Filler(const ModelConfig& c, const WeightStore* store, uint64_t seed, cudaStream_t stream,
         WeightDType wd)
      : c_(c),
        store_(store),
        seed_(seed),
        stream_(stream),
        wd_(wd),
        stored_fp8_(store != nullptr && c.quant.fp8 && wd == WeightDType::kFp8),
        stored_int4_(store != nullptr && c.quant.int4 != Int4Format::kNone &&
                     wd == WeightDType::kInt4) {}

  // Allocates [elems] T for `what` and returns it.
  DeviceBuffer alloc(int64_t elems, const std::string& what) {
    bytes_ += static_cast<uint64_t>(elems) * sizeof(T);
    return DeviceBuffer(static_cast<size_t>(elems) * sizeof(T), what);
  }

  // Writes `slice` at element offset `offset` of dst; `mean`/`scale` are the synthetic values.
  void fill(const TensorSlice& slice, const DeviceBuffer& dst, int64_t offset, float mean,
            float scale) {
    T* out = dst.as<T>() + offset;
    const int64_t n = slice.numel();
    if (store_ == nullptr) {
      CUDA_CHECK(kernels::launch_fill_uniform<T>(out, n, seed_ * 1000003u + counter_++, mean, scale,
                                                 stream_));
      return;
    }
    const DType dtype = upload(slice);
    CUDA_CHECK(
        kernels::launch_convert<T>(staging_.as<void>(), source_type(dtype), n, out, stream_));
  }

  // A projection [N, K]: in T, or quantized with its scales (scratch_ holds the T matrix until
  // finish_linear quantizes it; an FP8 checkpoint read as fp8 needs no scratch).
  LinearWeight alloc_linear(int64_t N, int64_t K, const std::string& what) {
    if (wd_ == WeightDType::kAuto) {
      LinearWeight L;
      L.w = alloc(N * K, what);
      L.rows = N;
      return L;
    }
    if (!stored_fp8_ && !stored_int4_ &&
        scratch_.bytes() < static_cast<size_t>(N * K) * sizeof(T)) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      scratch_ =
          DeviceBuffer(static_cast<size_t>(N * K) * sizeof(T), "weight quantization scratch");
    }
    if (wd_ == WeightDType::kInt4) return alloc_int4(N, K, what);
    bytes_ += static_cast<uint64_t>(N * K) + static_cast<uint64_t>(N) * sizeof(float);
    LinearWeight L;
    L.w = DeviceBuffer(static_cast<size_t>(N * K), what);
    L.scale = DeviceBuffer(static_cast<size_t>(N) * sizeof(float), what + " scales");
    L.rows = N;
    return L;
  }
  // Rows [row0, row0 + slice rows) of projection L (K columns).
  void fill_linear(const TensorSlice& slice, const LinearWeight& L, int64_t row0, int64_t K,
                   float scale) {
    // 4-bit first: its projections have no `.weight` tensor for is_fp8_slice to look up.
    if (store_ != nullptr && is_int4_slice(c_, slice)) {
      fill_int4(slice, L, row0, K);
    } else if (store_ != nullptr && is_fp8_slice(*store_, slice)) {
      fill_fp8(slice, L, row0, K);
    } else {
      fill(slice, wd_ == WeightDType::kAuto ? L.w : scratch_, row0 * K, 0.f, scale);
    }
  }
  void finish_linear(const LinearWeight& L, int64_t N, int64_t K) {
    if (wd_ == WeightDType::kFp8 && !stored_fp8_) {
      CUDA_CHECK((kernels::launch_quantize_rows<__nv_fp8_e4m3, T>(
          scratch_.as<T>(), L.w.as<__nv_fp8_e4m3>(), L.scale.as<float>(), N, static_cast<int>(K),
          stream_)));
    } else if (wd_ == WeightDType::kInt8) {
      CUDA_CHECK((kernels::launch_quantize_rows<int8_t, T>(scratch_.as<T>(), L.w.as<int8_t>(),
                                                           L.scale.as<float>(), N,
                                                           static_cast<int>(K), stream_)));
    } else if (wd_ == WeightDType::kInt4 && !stored_int4_) {
      if constexpr (kHalfType) {
        CUDA_CHECK(kernels::launch_quantize_w4<T>(scratch_.as<T>(), L.w.as<uint32_t>(),
                                                  L.sz.as<uint32_t>(), static_cast<int>(N),
                                                  static_cast<int>(K), L.group, stream_));
      }
    }
  }

  uint64_t bytes() const { return bytes_; }
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  // fp16 / bf16: the compute dtypes of the quantized paths (choose_weight_dtype).
  static constexpr bool kHalfType = !std::is_same_v<T, float>;

  // int4: q [N, K / 8] words and sz [groups, N] pairs; K and the group must suit the kernels.
  LinearWeight alloc_int4(int64_t N, int64_t K, const std::string& what) {
    const int G = int4_group(c_);
    if (!kernels::w4_shape_fits(K, G)) {
      throw Error("--weight-dtype int4: " + what + " has " + std::to_string(K) +
                  " input columns per rank and groups of " + std::to_string(G) +
                  "; the 4-bit kernels need a multiple of 32 columns and groups of a multiple "
                  "of 64 (use another tensor-parallel degree or --weight-dtype int8)");
    }
    const int64_t groups = kernels::w4_groups(static_cast<int>(K), G);
    bytes_ += static_cast<uint64_t>(N * K / 2 + groups * N * 4);
    LinearWeight L;
    L.w = DeviceBuffer(static_cast<size_t>(N * K / 2), what);
    L.sz = DeviceBuffer(static_cast<size_t>(groups * N * 4), what + " group scales");
    L.group = G;
    L.rows = N;
    return L;
  }

  // A 4-bit checkpoint's slice: repacked into L (int4), or dequantized to fp32 on the host and
  // converted into T (the weights, or the scratch of another quantized dtype).
  void fill_int4(const TensorSlice& slice, const LinearWeight& L, int64_t row0, int64_t K) {
    const int64_t rows = slice.row_end - slice.row_begin;
    if (!stored_int4_) {
      std::vector<float> w(static_cast<size_t>(rows * K));
      read_int4_slice_f32(*store_, c_, slice, w.data());
      upload_host(w.data(), w.size() * sizeof(float));
      T* out = (wd_ == WeightDType::kAuto ? L.w : scratch_).as<T>() + row0 * K;
      CUDA_CHECK(kernels::launch_convert<T>(staging_.as<void>(), kernels::SourceType::kF32,
                                            rows * K, out, stream_));
      return;
    }
    if constexpr (kHalfType) {
      const int64_t groups = int4_slice_groups(c_, slice);
      std::vector<uint32_t> q(static_cast<size_t>(rows * K / 8));
      std::vector<float> scale(static_cast<size_t>(groups * rows));
      std::vector<int32_t> zero(scale.size());
      read_int4_slice_w4(*store_, c_, slice, q.data(), scale.data(), zero.data());
      std::vector<uint32_t> sz(scale.size());
      for (size_t i = 0; i < sz.size(); ++i) {
        const T pair[2] = {kernels::from_float<T>(scale[i]),
                           kernels::from_float<T>(kernels::w4_bias<T>(zero[i]))};
        std::memcpy(&sz[i], pair, 4);
      }
      file_bytes_ += q.size() * 4 + scale.size() * 3;  // words, fp16 scales, 4-bit zeros
      // From pageable memory the copies have read q and sz when they return.
      CUDA_CHECK(cudaMemcpyAsync(L.w.as<uint32_t>() + row0 * K / 8, q.data(), q.size() * 4,
                                 cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaMemcpy2DAsync(L.sz.as<uint32_t>() + row0, static_cast<size_t>(L.rows) * 4,
                                   sz.data(), static_cast<size_t>(rows) * 4,
                                   static_cast<size_t>(rows) * 4, static_cast<size_t>(groups),
                                   cudaMemcpyHostToDevice, stream_));
    }
  }

  // Copies `bytes` of host memory into staging_ (through the pinned buffer).
  void upload_host(const void* data, size_t bytes) {
    ensure_staging(bytes);
    std::memcpy(pinned_.as<void>(), data, bytes);
    CUDA_CHECK(cudaMemcpyAsync(staging_.as<void>(), pinned_.as<void>(), bytes,
                               cudaMemcpyHostToDevice, stream_));
  }

  // Room for `bytes` in pinned_ and staging_, after the previous slice's conversion (which reads
  // staging_) has finished.
  void ensure_staging(size_t bytes) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (bytes > pinned_.bytes()) {
      pinned_ = PinnedBuffer(bytes);
      staging_ = DeviceBuffer(bytes, "weight upload staging");
    }
  }

  // Copies the slice's stored bytes from the file into staging_ (through the pinned buffer);
  // returns their dtype.
  DType upload(const TensorSlice& slice) {
    const TensorInfo& info = store_->get(slice.name);
    const size_t bytes = static_cast<size_t>(slice.numel()) * dtype_size(info.dtype);
    ensure_staging(bytes);
    store_->read_block_raw(slice.name, slice.row_begin, slice.row_end, slice.col_begin,
                           slice.col_end, pinned_.as<void>());
    file_bytes_ += bytes;
    CUDA_CHECK(cudaMemcpyAsync(staging_.as<void>(), pinned_.as<void>(), bytes,
                               cudaMemcpyHostToDevice, stream_));
    return info.dtype;
  }

  // A projection slice of an FP8 checkpoint (rank/fp8_checkpoint.h): with --weight-dtype fp8 its
  // e4m3 bytes and row scales go into L as stored (no requantization); otherwise it is
  // dequantized (scale[r] * e4m3) into T: the weights themselves, or int8's scratch.
  void fill_fp8(const TensorSlice& slice, const LinearWeight& L, int64_t row0, int64_t K) {
    const int64_t rows = slice.row_end - slice.row_begin;
    const std::vector<float> scales = fp8_row_scales(*store_, slice);
    upload(slice);  // synchronizes the stream first: scale_staging_ is free to overwrite
    if (stored_fp8_) {
      CUDA_CHECK(cudaMemcpyAsync(L.w.as<uint8_t>() + row0 * K, staging_.as<void>(),
                                 static_cast<size_t>(rows * K), cudaMemcpyDeviceToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(L.scale.as<float>() + row0, scales.data(),
                                 scales.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
      return;
    }
    if (scale_staging_.bytes() < scales.size() * sizeof(float)) {
      scale_staging_ = DeviceBuffer(scales.size() * sizeof(float), "weight scale staging");
    }
    // From pageable memory the copy has read `scales` when it returns.
    CUDA_CHECK(cudaMemcpyAsync(scale_staging_.as<void>(), scales.data(),
                               scales.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
    T* out = (wd_ == WeightDType::kAuto ? L.w : scratch_).as<T>() + row0 * K;
    const auto* q = staging_.as<__nv_fp8_e4m3>();
    constexpr int64_t kMaxRows = 65535;  // launch_dequantize_rows' grid limit
    for (int64_t r = 0; r < rows; r += kMaxRows) {
      const int64_t n = std::min(kMaxRows, rows - r);
      CUDA_CHECK((kernels::launch_dequantize_rows<__nv_fp8_e4m3, T>(
          q + r * K, scale_staging_.as<float>() + r, out + r * K, n, static_cast<int>(K),
          stream_)));
    }
  }

  const ModelConfig& c_;
  const WeightStore* store_;
  uint64_t seed_;
  cudaStream_t stream_;
  WeightDType wd_;
  bool stored_fp8_;       // an FP8 checkpoint read as fp8: projections copied as stored
  bool stored_int4_;      // a 4-bit checkpoint read as int4: projections repacked as stored
  uint64_t counter_ = 0;  // synthetic: one seed per tensor slice
  uint64_t bytes_ = 0, file_bytes_ = 0;
  PinnedBuffer pinned_;
  DeviceBuffer staging_;
  DeviceBuffer scratch_;        // quantized projections: the T matrix before quantization
  DeviceBuffer scale_staging_;  // an FP8 checkpoint's row scales on their way to dequantization
};

}  // namespace

template <typename T>
CudaWeights load_cuda_weights(const ModelConfig& c, const ShardPlan& s, const WeightStore* store,
                              uint64_t seed, cudaStream_t stream, WeightDType weight_dtype) {
  // Uniform in [-a, a] has std a / sqrt(3): a = 0.0346 gives the std 0.02 of Llama's init.
  constexpr float kMat = 0.0346f, kNormMean = 1.f, kNormScale = 0.05f;
  Filler<T> f(c, store, seed, stream, weight_dtype);
  const int64_t H = c.hidden_size, d = s.head_dim;
  const int64_t q = s.num_heads * d, kv = s.num_kv_heads * d, F = s.ffn_size;
  CudaWeights w;
  const TensorSlice emb = embedding_slice(c, s);
  w.embed = f.alloc(emb.numel(), "embedding shard");
  f.fill(emb, w.embed, 0, 0.f, kMat);
  w.final_norm = f.alloc(H, "final norm");
  f.fill(final_norm_slice(c), w.final_norm, 0, kNormMean, kNormScale);
  if (!c.tie_word_embeddings) {
    const TensorSlice head = lm_head_slice(c, s);
    w.lm_head = f.alloc(head.numel(), "LM head shard");
    f.fill(head, w.lm_head, 0, 0.f, kMat);
  }
  w.layers.resize(c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    CudaLayerWeights& L = w.layers[l];
    auto slice = [&](LayerTensor t) { return layer_slice(c, s, l, t); };
    const std::string name = "layer " + std::to_string(l) + " ";
    L.attn_norm = f.alloc(H, name + "attention norm");
    f.fill(slice(LayerTensor::kAttnNorm), L.attn_norm, 0, kNormMean, kNormScale);
    L.qkv = f.alloc_linear(q + 2 * kv, H, name + "qkv");
    f.fill_linear(slice(LayerTensor::kWq), L.qkv, 0, H, kMat);
    f.fill_linear(slice(LayerTensor::kWk), L.qkv, q, H, kMat);
    f.fill_linear(slice(LayerTensor::kWv), L.qkv, q + kv, H, kMat);
    f.finish_linear(L.qkv, q + 2 * kv, H);
    L.o = f.alloc_linear(H, q, name + "o_proj");
    f.fill_linear(slice(LayerTensor::kWo), L.o, 0, q, kMat);
    f.finish_linear(L.o, H, q);
    L.mlp_norm = f.alloc(H, name + "MLP norm");
    f.fill(slice(LayerTensor::kMlpNorm), L.mlp_norm, 0, kNormMean, kNormScale);
    L.gate_up = f.alloc_linear(2 * F, H, name + "gate|up");
    f.fill_linear(slice(LayerTensor::kWgate), L.gate_up, 0, H, kMat);
    f.fill_linear(slice(LayerTensor::kWup), L.gate_up, F, H, kMat);
    f.finish_linear(L.gate_up, 2 * F, H);
    L.down = f.alloc_linear(H, F, name + "down_proj");
    f.fill_linear(slice(LayerTensor::kWdown), L.down, 0, F, kMat);
    f.finish_linear(L.down, H, F);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  w.bytes = f.bytes();
  w.file_bytes = f.file_bytes();
  return w;
}

template CudaWeights load_cuda_weights<float>(const ModelConfig&, const ShardPlan&,
                                              const WeightStore*, uint64_t, cudaStream_t,
                                              WeightDType);
template CudaWeights load_cuda_weights<__half>(const ModelConfig&, const ShardPlan&,
                                               const WeightStore*, uint64_t, cudaStream_t,
                                               WeightDType);
template CudaWeights load_cuda_weights<__nv_bfloat16>(const ModelConfig&, const ShardPlan&,
                                                      const WeightStore*, uint64_t, cudaStream_t,
                                                      WeightDType);

}  // namespace llama2
