// One rank's weight shard in GPU memory, in the layout the CUDA runner's GEMMs read: q|k|v fused
// into one [q + 2 kv, H] matrix and gate|up into one [2 F, H] matrix, so each layer runs four
// GEMMs instead of seven (one pass over the activations per fused group, larger N per launch).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/cuda/device_buffer.h"

namespace llama2 {

class WeightStore;

// A projection's weight [N, K] in the compute dtype T, or quantized (--weight-dtype fp8 | int8;
// kernels/quant.cuh) with one fp32 scale per row: W ~= scale[n] * w[n, k], or in 4 bits (int4:
// kernels/w4_convert.cuh) with a (scale, bias) pair per group of `group` columns and row.
struct LinearWeight {
  DeviceBuffer w;      // [N, K] of T, int8 or e4m3; int4: q [N, K / 8] uint32
  DeviceBuffer scale;  // [N] fp32; empty when w is T or int4
  DeviceBuffer sz;     // int4: [ceil(K / group), N] (scale, bias) T pairs; else empty
  int group = 0;       // int4: input columns per group
  int64_t rows = 0;    // N
};

struct CudaLayerWeights {
  DeviceBuffer attn_norm;  // [H]
  LinearWeight qkv;        // [q_local + 2 kv_local, H]: q rows, then k rows, then v rows
  LinearWeight o;          // [H, q_local]  (the input columns of o_proj this rank owns)
  DeviceBuffer mlp_norm;   // [H]
  LinearWeight gate_up;    // [2 F_local, H]: gate rows, then up rows
  LinearWeight down;       // [H, F_local]  (the input columns of down_proj)
};

struct CudaWeights {
  DeviceBuffer embed;       // [vocab_local, H]
  DeviceBuffer final_norm;  // [H]
  DeviceBuffer lm_head;     // [vocab_local, H]; empty when tied to embed
  std::vector<CudaLayerWeights> layers;
  uint64_t bytes = 0;       // device bytes of all of the above
  uint64_t file_bytes = 0;  // bytes read from the checkpoint (0 for synthetic weights)
};

// Fills the shard in element type T (float, __half, __nv_bfloat16). From `store`: each slice is
// copied from the memory-mapped file into a pinned staging buffer, uploaded, and converted to T on
// the device (the host never holds more than the largest slice). Without a store (nullptr):
// deterministic synthetic weights from `seed`, generated on the device (uniform, std 0.02 for
// matrices, 1 +- 0.05 for norms: finite activations through 80 layers in fp16).
// weight_dtype fp8 / int8: each projection is filled in T into a scratch matrix on the device and
// quantized per output row from there (this rank's shard only; the scratch is freed at the end).
// An FP8 checkpoint (c.quant.fp8, rank/fp8_checkpoint.h): with fp8 its e4m3 bytes and scales are
// uploaded as stored; with the compute dtype (kAuto) or int8 they are dequantized on the device
// first (int8 then quantizes that as above).
// weight_dtype int4: a 4-bit checkpoint's words, zero points and scales repacked on the host into
// the kernels' layout (rank/int4_checkpoint.h, read_int4_slice_w4); any other source filled in T
// and quantized in groups of 128 by launch_quantize_w4. A 4-bit checkpoint read as another dtype
// is dequantized on the host (fp32) first.
template <typename T>
CudaWeights load_cuda_weights(const ModelConfig& c, const ShardPlan& s, const WeightStore* store,
                              uint64_t seed, cudaStream_t stream,
                              WeightDType weight_dtype = WeightDType::kAuto);

}  // namespace llama2
