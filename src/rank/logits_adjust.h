// A step's vocabulary adjustments (StepPlan::adjust, common/step_plan.h) applied to this rank's
// slice of the logit rows before any reduction reads them: a token outside a row's allowed mask
// becomes -inf, a biased token gets its bias added. Applied before the slice reductions (argmax,
// top-k candidates, log-sum-exp) and before full rows are gathered, so the candidates, the
// sampled token and its logprobs are exactly those of the adjusted full row on one rank. The CPU
// version is here; the CUDA runner packs the same adjustments (pack_adjustments) for
// kernels::launch_apply_token_mask / launch_add_token_bias, tested against apply_adjustments.
#pragma once

#include <cstdint>
#include <vector>

#include "common/step_plan.h"

namespace llama2 {

// plan: as this rank received it (slice_adjustments: mask words and biases of its slice).
// logits: [plan.logit_rows(), vocab_local] fp32, this rank's columns [vocab_begin,
// vocab_begin + vocab_local). Error when the plan's mask does not cover the slice or a bias names
// a token outside it.
void apply_adjustments(const StepPlan& plan, float* logits, int vocab_begin, int vocab_local);

// The adjustments of `plan` for one upload to the device, row by row: the masked rows and their
// mask words (words_per_row each, bit 0 of the first word = token mask_base), the bias entries as
// (row, column in the slice, value). Checked as apply_adjustments checks.
struct PackedAdjustments {
  std::vector<int32_t> mask_rows;    // [n_masked] logit rows
  std::vector<uint32_t> mask_words;  // [n_masked, words_per_row]
  int words_per_row = 0;
  int mask_base = 0;
  std::vector<int32_t> bias_rows;  // [n_bias]
  std::vector<int32_t> bias_cols;  // [n_bias] column within the slice
  std::vector<float> bias_values;  // [n_bias]
};
PackedAdjustments pack_adjustments(const StepPlan& plan, int vocab_begin, int vocab_local);

}  // namespace llama2
