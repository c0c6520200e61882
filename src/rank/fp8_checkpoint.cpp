#include "rank/fp8_checkpoint.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"
#include "common/shard_plan.h"
#include "rank/weight_store.h"

namespace llama2 {
namespace {

bool is_projection(LayerTensor t) {
  return t != LayerTensor::kAttnNorm && t != LayerTensor::kMlpNorm && t != LayerTensor::kCount;
}

// "X.weight" without its ".weight".
std::string module_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  LLAMA2_CHECK(weight_name.size() > suffix.size() &&
               weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0);
  return weight_name.substr(0, weight_name.size() - suffix.size());
}

std::string where(const TensorInfo& t) {
  return t.file->path() + ": tensor '" + t.name + "'";
}

// A scale tensor holds one value ([] or [1]) or, when `rows` > 0, one per row ([rows] or
// [rows, 1]).
bool scale_shape_ok(const std::vector<int64_t>& shape, int64_t rows) {
  if (shape.empty() || shape == std::vector<int64_t>{1}) return true;
  return rows > 0 &&
         (shape == std::vector<int64_t>{rows} || shape == std::vector<int64_t>{rows, 1});
}

void check_scale_dtype(const TensorInfo& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16) {
    throw Error(where(t) + " has dtype " + t.dtype_name + "; a scale must be F32, F16 or BF16");
  }
}

// The projections and the tensors that must stay 16-bit (embeddings, norms, LM head).
void split_tensors(const ModelConfig& c, std::vector<TensorSlice>* projections,
                   std::vector<TensorSlice>* others) {
  const ShardPlan whole = make_shard_plan(c, 1, 0);
  others->push_back(embedding_slice(c, whole));
  others->push_back(final_norm_slice(c));
  if (!c.tie_word_embeddings) others->push_back(lm_head_slice(c, whole));
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < static_cast<int>(LayerTensor::kCount); ++i) {
      const auto t = static_cast<LayerTensor>(i);
      (is_projection(t) ? projections : others)->push_back(layer_slice(c, whole, l, t));
    }
  }
}

}  // namespace

std::string weight_scale_name(const std::string& weight_name) {
  return module_of(weight_name) + ".weight_scale";
}

std::string input_scale_name(const std::string& weight_name) {
  return module_of(weight_name) + ".input_scale";
}

int validate_fp8_checkpoint(const WeightStore& w, const ModelConfig& c) {
  std::vector<TensorSlice> projections, others;
  split_tensors(c, &projections, &others);
  const std::string allowed = c.quant.fp8 ? "the q/k/v/o/gate/up/down projections"
                                          : "no tensor: config.json has no quantization_config";
  for (const TensorSlice& s : others) {
    const TensorInfo& t = w.get(s.name);
    if (t.dtype_name.rfind("F8_", 0) == 0) {
      throw Error(where(t) + " is " + t.dtype_name + "; fp8 is allowed on " + allowed +
                  " (embeddings, norms and lm_head stay F32, F16 or BF16)");
    }
  }
  int input_scales = 0;
  for (const TensorSlice& s : projections) {
    const TensorInfo& t = w.get(s.name);
    if (!c.quant.fp8) {
      if (t.dtype_name.rfind("F8_", 0) == 0) {
        throw Error(where(t) + " is " + t.dtype_name +
                    " but config.json has no quantization_config (an FP8 checkpoint names "
                    "quant_method \"fp8\" or \"compressed-tensors\" there)");
      }
      continue;
    }
    if (t.dtype != DType::F8_E4M3) {
      throw Error(where(t) + " has dtype " + t.dtype_name + ", but config.json's " +
                  c.quant.describe() +
                  " quantization_config needs every projection as F8_E4M3 (e4m3fn) with a "
                  "weight_scale (other fp8 formats, and checkpoints with some projections left "
                  "16-bit, are not read)");
    }
    const std::string scale = weight_scale_name(s.name);
    if (!w.has(scale)) {
      throw Error(where(t) + " is F8_E4M3 but its scale '" + scale +
                  "' is missing (allowed: a per-tensor [] or [1], or per-channel [" +
                  std::to_string(s.full_shape[0]) + "] or [" + std::to_string(s.full_shape[0]) +
                  ", 1] weight_scale)");
    }
    const TensorInfo& st = w.get(scale);
    check_scale_dtype(st);
    if (!scale_shape_ok(st.shape, s.full_shape[0])) {
      const std::string rows = std::to_string(s.full_shape[0]);
      throw Error(where(st) + " has shape " + shape_to_string(st.shape) +
                  "; allowed: [] or [1] (per tensor), [" + rows + "] or [" + rows +
                  ", 1] (per output channel); block-wise scales are not read");
    }
    const std::string input = input_scale_name(s.name);
    if (w.has(input)) {
      const TensorInfo& it = w.get(input);
      check_scale_dtype(it);
      if (!scale_shape_ok(it.shape, 0)) {
        throw Error(where(it) + " has shape " + shape_to_string(it.shape) +
                    "; allowed: [] or [1] (one static activation scale per tensor)");
      }
      ++input_scales;
    }
  }
  return input_scales;
}

bool is_fp8_slice(const WeightStore& w, const TensorSlice& s) {
  return w.get(s.name).dtype == DType::F8_E4M3;
}

std::vector<float> fp8_row_scales(const WeightStore& w, const TensorSlice& s) {
  const std::string name = weight_scale_name(s.name);
  const TensorInfo& t = w.get(name);
  const int64_t rows = s.row_end - s.row_begin;
  std::vector<float> out(static_cast<size_t>(rows));
  if (t.numel() == 1) {
    float v = 0.f;
    w.read_block_f32(name, 0, 1, 0, 1, &v);
    std::fill(out.begin(), out.end(), v);
  } else {
    // [out] is one row of `out` values; [out, 1] is `out` rows of one.
    if (t.shape.size() == 1) {
      w.read_block_f32(name, 0, 1, s.row_begin, s.row_end, out.data());
    } else {
      w.read_block_f32(name, s.row_begin, s.row_end, 0, 1, out.data());
    }
  }
  for (size_t r = 0; r < out.size(); ++r) {
    if (!std::isfinite(out[r]) || out[r] < 0.f) {
      throw Error(t.file->path() + ": tensor '" + name + "' row " +
                  std::to_string(s.row_begin + static_cast<int64_t>(r)) + " holds " +
                  std::to_string(out[r]) + "; a weight scale must be finite and >= 0");
    }
  }
  return out;
}

void read_slice_f32(const WeightStore& w, const TensorSlice& s, float* out) {
  w.read_block_f32(s.name, s.row_begin, s.row_end, s.col_begin, s.col_end, out);
  if (!is_fp8_slice(w, s)) return;
  const std::vector<float> scale = fp8_row_scales(w, s);
  const size_t cols = static_cast<size_t>(s.col_end - s.col_begin);
  for (size_t r = 0; r < scale.size(); ++r) {
    for (size_t k = 0; k < cols; ++k) out[r * cols + k] = scale[r] * out[r * cols + k];
  }
}

}  // namespace llama2
