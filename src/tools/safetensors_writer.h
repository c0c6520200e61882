// Writing safetensors files and their shard index, in the layout Hugging Face's `safetensors` and
// `transformers` read: used by the tools that make test checkpoints and convert weights.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rank/tensor_file.h"

namespace llama2 {

// fp32 -> fp16 / bf16 with round-to-nearest-even, as PyTorch's .half() / .bfloat16() do:
// overflow becomes inf, tiny values become subnormals or signed zero, NaN stays a (quiet) NaN.
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);
// fp32 -> e4m3 "fn" with round-to-nearest-even, saturating at +-448 (infinities too), NaN -> 0x7f:
// the rule of CUDA's __nv_fp8_e4m3(float) (cvt.rn.satfinite), which kernels/quant.cu applies, so
// host-made FP8 checkpoints hold the bytes the GPU's --weight-dtype fp8 would make.
uint8_t f32_to_e4m3(float f);

struct TensorToWrite {
  TensorToWrite() = default;
  TensorToWrite(std::string n, DType d, std::vector<int64_t> s, std::vector<float> v,
                std::vector<int32_t> i = {})
      : name(std::move(n)),
        dtype(d),
        shape(std::move(s)),
        values(std::move(v)),
        ints(std::move(i)) {}

  std::string name;
  DType dtype = DType::F32;    // F32, F16, BF16, F8_E4M3 or I32
  std::vector<int64_t> shape;  // row-major
  std::vector<float> values;   // numel(shape) values, converted to dtype on write (not I32)
  std::vector<int32_t> ints;   // I32: the numel(shape) values, written as they are
};

// Writes `tensors` in the given order to `path`. The header's "__metadata__" gets `metadata`, plus
// "format": "pt" when absent (transformers refuses checkpoints without a known format). Written to
// a temporary sibling and renamed, so a failed run never leaves a half-written checkpoint at
// `path`. Throws Error naming the path (and tensor) on any failure.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a model.safetensors.index.json:
// {"metadata": {"total_size": N}, "weight_map": {tensor: file}}.
// total_size is the sum of the tensors' byte sizes, as transformers computes it.
void write_safetensors_index(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

// A checkpoint's JSON file (config.json, ...): Error naming the path when it cannot be read or
// parsed; written indented, Error naming the path when the write fails.
nlohmann::json read_json_file(const std::string& path);
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace llama2
