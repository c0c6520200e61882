// RoPE's frequencies and (cos, sin) tables on one GPU (src/rank/cuda/cuda_model.cu): the table of
// every position for the model's frequencies (rope_scaling linear included), built once; and,
// under dynamic NTK scaling, a per-step table for the steps that hold a sequence past the original
// length, whose frequencies depend on that sequence's length (common/rope_frequencies.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/model_config.h"
#include "common/step_plan.h"
#include "kernels/rope_kv.cuh"
#include "rank/cuda/device_buffer.h"

namespace llama2 {

class RopeTables {
 public:
  // What a step's RoPE launches read: the frequencies with their table, and the per-token index
  // into it (nullptr: the step metadata's positions, i.e. the position table).
  struct Step {
    const kernels::RopeFreqs* freqs = nullptr;
    const int32_t* rows = nullptr;
  };

  RopeTables(const ModelConfig& c, int head_dim, int max_seq_len, int max_step_tokens);

  // The position table's frequencies (every step but a rescaled one).
  const kernels::RopeFreqs& freqs() const { return freqs_; }
  Step position_table() const { return Step{&freqs_, nullptr}; }
  // Whether `plan` holds a sequence whose frequencies are not the position table's.
  bool rescaled(const StepPlan& plan) const;
  // For a rescaled step: each token's (cos, sin), computed on the host as the CPU backend computes
  // them, copied on `stream` into the step table (the previous step's copy must have completed,
  // as for the step metadata), which the launches then read by token row. Such steps replay no
  // graph (their launches read other addresses).
  Step upload(const StepPlan& plan, cudaStream_t stream);

 private:
  const ModelConfig& c_;
  int head_dim_, max_step_tokens_;
  kernels::RopeFreqs freqs_, step_freqs_;
  DeviceBuffer position_table_;  // [max_seq_len, head_dim / 2] (cos, sin)
  DeviceBuffer step_table_;      // dynamic NTK: [max_step_tokens, head_dim / 2] (cos, sin)
  PinnedBuffer step_host_;       // its host copy
  DeviceBuffer rows_;            // dynamic NTK: [max_step_tokens] 0, 1, 2, ...
};

}  // namespace llama2
