// Reading the projections of a 4-bit AWQ or GPTQ checkpoint (common/checkpoint_quant.h), which the
// CPU backend dequantizes at load. Each q/k/v/o/gate/up/down_proj module X holds, instead of
// X.weight [out, in]:
//   AWQ (AutoAWQ "gemm"):
//     X.qweight I32 [in, out/8]: word (i, j) holds row i's 4-bit values of output columns
//       8j + {0, 2, 4, 6, 1, 3, 5, 7} in nibbles 0..7 (AWQ's interleaved order);
//     X.qzeros  I32 [in/G, out/8], packed the same way; X.scales F16 [in/G, out].
//   GPTQ (AutoGPTQ, GPTQModel):
//     X.qweight I32 [in/8, out]: word (r, o) holds input rows 8r .. 8r+7 of column o in
//       nibbles 0..7;
//     X.qzeros  I32 [groups, out/8]: nibble k of word (g, j) is column 8j + k; checkpoint_format
//       "gptq" (v1) stores zero - 1, "gptq_v2" the zero itself;
//     X.scales  F16 [groups, out]; X.g_idx I32 [in]: each input row's group (row / G, or any
//       order with desc_act).
// W[o, i] = (q[i, o] - zero[g(i), o]) * scale[g(i), o], in fp32 (the formats' formula; one
// rounding, the product). G = group_size, or in when it is -1.
//
// A rank reads only its block (rank/weight_layout.h): a column-parallel projection's output
// columns (multiples of 8: whole packed words) with every group; a row-parallel one's input rows
// and the groups those rows belong to: with contiguous groups its rows are whole groups
// (common/shard_plan.h cuts the shards on group boundaries); with desc_act it reads its rows'
// g_idx entries first, then the scale and zero rows of the groups they name.
#pragma once

#include <cstdint>
#include <string>

#include "common/model_config.h"
#include "rank/weight_layout.h"

namespace llama2 {

class WeightStore;

// Whether the slice is a projection that a 4-bit checkpoint stores packed.
bool is_int4_slice(const ModelConfig& c, const TensorSlice& s);

// Checks every projection's tensors before any rank copies a byte: dtypes, the packed shapes, the
// number of groups against group_size, g_idx's values (in range; row / G unless desc_act). Error
// naming the file, the tensor, what was found and what the config implies.
void validate_int4_checkpoint(const WeightStore& w, const ModelConfig& c);

// The slice [row_end - row_begin (output columns of W^T, i.e. rows of X.weight), col_end -
// col_begin] dequantized to fp32. Output ranges must be multiples of 8 (the shard plan's).
void read_int4_slice_f32(const WeightStore& w, const ModelConfig& c, const TensorSlice& s,
                         float* out);

// Groups of input columns in the slice (its columns start on a group boundary).
int64_t int4_slice_groups(const ModelConfig& c, const TensorSlice& s);

// The slice as the CUDA 4-bit kernels hold it (kernels/w4_convert.cuh), with rows no = row_end -
// row_begin and columns ni = col_end - col_begin: q [no, ni / 8] words, and per local group g and
// row o the scale [groups, no] and zero point [groups, no] (0..15; GPTQ v1's stored zero + 1).
// Needs contiguous groups with the slice's columns starting on a group boundary and ni % 8 == 0
// (quant.int4_runs_packed() and the shard plan's cuts); Error otherwise.
void read_int4_slice_w4(const WeightStore& w, const ModelConfig& c, const TensorSlice& s,
                        uint32_t* q, float* scale, int32_t* zero);

}  // namespace llama2
