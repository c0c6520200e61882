// Reading the projections of an FP8 checkpoint (config.json quantization_config, see
// common/checkpoint_quant.h): each q/k/v/o/gate/up/down_proj.weight [out, in] is F8_E4M3, and
// weight_scale beside it holds either one fp32 scale for the tensor (shape [] or [1]) or one per
// output row (shape [out] or [out, 1]): W[r, k] = scale[r] * e4m3[r, k]. A rank reads only its
// shard: the rows of a column-parallel projection (q/k/v/gate/up) with their scales, the column
// block of a row-parallel one (o/down) with every row's scale.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "rank/weight_layout.h"

namespace llama2 {

class WeightStore;

// "model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj.weight_scale" (and
// "...input_scale" for the static activation scale).
std::string weight_scale_name(const std::string& weight_name);
std::string input_scale_name(const std::string& weight_name);

// Checks the checkpoint's dtypes against config.quant before any rank copies a byte. With fp8:
// every projection is F8_E4M3 with a weight_scale (F32, F16 or BF16) of shape [], [1], [out] or
// [out, 1], and an input_scale, where present, of shape [] or [1]; embeddings, norms and lm_head
// are not fp8. Without quantization_config no tensor the engine reads may be fp8. Error naming the
// tensor, its file and what is allowed. Returns how many input_scale tensors were found (the
// engine quantizes activations per token at run time and does not read them).
int validate_fp8_checkpoint(const WeightStore& w, const ModelConfig& c);

// Whether this slice's tensor is stored as fp8 (a projection of an FP8 checkpoint).
bool is_fp8_slice(const WeightStore& w, const TensorSlice& s);

// The scales of the slice's rows [row_end - row_begin]: weight_scale's values of those rows (per
// channel) or its one value repeated (per tensor). Error for a negative or non-finite scale.
std::vector<float> fp8_row_scales(const WeightStore& w, const TensorSlice& s);

// The slice as fp32 [rows, cols]: an fp8 projection dequantized as scale[r] * e4m3 (one fp32
// product, as kernels/quant.cu's dequantize_rows forms it), anything else converted as stored.
void read_slice_f32(const WeightStore& w, const TensorSlice& s, float* out);

}  // namespace llama2
