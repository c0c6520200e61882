// Which of the one-row GEMV fusions (kernels/gemv.cuh, GemvFusion) a model's batch-1 steps take,
// decided once at start-up from the tuning knobs, the tensor-parallel degree and what the
// projections' GEMV accepts (CudaLinear::fuses). Each gives the numbers of the launches it
// replaces, bit for bit (tests/gpu/test_gemv_fusion.cu, test_gemv_rope.cu).
#pragma once

#include "common/tuning_knobs.h"
#include "rank/cuda/cuda_weights.h"
#include "rank/cuda/linear.h"

namespace llama2 {

struct OneRowFusion {
  // LLAMA2_FUSE_NORM (one rank, default off): each RMSNorm rides in the GEMV that reads it and
  // each residual add in the GEMV that writes it: a layer is 4 GEMVs, RoPE and attention.
  bool norms = false;
  // LLAMA2_FUSE_ROPE: the qkv GEMV rotates q and k and writes k and v into the cache in its
  // epilogue (GemvFusion::rope): no RoPE launch per layer.
  bool rope = false;
};

// x: the residual stream, h: the normed rows, attn / act: the o / down projections' inputs (the
// GEMV's alignment checks); H hidden, nq = heads x head_dim on this rank, F the FFN width.
template <typename T>
OneRowFusion one_row_fusion(const TuningKnobs& k, int tp, const CudaLinear<T>& linear,
                            const CudaLayerWeights& L, const T* x, const T* h, const T* attn,
                            const T* act, int H, int nq, int F, bool rope_table) {
  OneRowFusion f;
  f.norms = k.fuse_norm && tp == 1 && linear.fuses(attn, L.o, 1, nq, false) &&
            linear.fuses(act, L.down, 1, F, false) && linear.fuses(x, L.qkv, 1, H, true) &&
            linear.fuses(x, L.gate_up, 1, H, true);
  f.rope = k.fuse_rope && rope_table && linear.fuses(f.norms ? x : h, L.qkv, 1, H, f.norms);
  return f;
}

}  // namespace llama2
