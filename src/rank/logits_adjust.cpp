#include "rank/logits_adjust.h"

#include <limits>
#include <string>

#include "common/check.h"

namespace llama2 {

PackedAdjustments pack_adjustments(const StepPlan& plan, int vocab_begin, int vocab_local) {
  PackedAdjustments p;
  p.words_per_row = plan.mask_words_per_row;
  p.mask_base = plan.mask_base;
  const int rows = plan.logit_rows();
  const bool covered = plan.mask_base <= vocab_begin &&
                       int64_t{plan.mask_base} + 32 * int64_t{plan.mask_words_per_row} >=
                           int64_t{vocab_begin} + vocab_local;
  for (const RowAdjust& r : plan.adjust) {
    LLAMA2_CHECK(r.row >= 0 && r.row < rows);
    if (r.mask_begin >= 0) {
      if (!covered) {
        throw Error("the allowed-token mask of logit row " + std::to_string(r.row) +
                    " does not cover this rank's vocabulary slice [" + std::to_string(vocab_begin) +
                    ", " + std::to_string(vocab_begin + vocab_local) + ")");
      }
      p.mask_rows.push_back(r.row);
      const auto at = plan.mask_words.begin() + r.mask_begin;
      p.mask_words.insert(p.mask_words.end(), at, at + plan.mask_words_per_row);
    }
    for (int32_t i = r.bias_begin; i < r.bias_begin + r.bias_count; ++i) {
      const int32_t id = plan.bias_ids[static_cast<size_t>(i)];
      if (id < vocab_begin || id >= vocab_begin + vocab_local) {
        throw Error("a logit bias of row " + std::to_string(r.row) + " names token " +
                    std::to_string(id) + ", outside this rank's vocabulary slice");
      }
      p.bias_rows.push_back(r.row);
      p.bias_cols.push_back(id - vocab_begin);
      p.bias_values.push_back(plan.bias_values[static_cast<size_t>(i)]);
    }
  }
  return p;
}

void apply_adjustments(const StepPlan& plan, float* logits, int vocab_begin, int vocab_local) {
  if (plan.adjust.empty()) return;
  const PackedAdjustments p = pack_adjustments(plan, vocab_begin, vocab_local);
  const int64_t ld = vocab_local;
  for (size_t a = 0; a < p.mask_rows.size(); ++a) {
    float* row = logits + p.mask_rows[a] * ld;
    const uint32_t* words = p.mask_words.data() + a * static_cast<size_t>(p.words_per_row);
    for (int j = 0; j < vocab_local; ++j) {
      const int bit = vocab_begin + j - p.mask_base;
      if (((words[bit / 32] >> (bit % 32)) & 1u) == 0) {
        row[j] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  for (size_t i = 0; i < p.bias_rows.size(); ++i) {
    logits[p.bias_rows[i] * ld + p.bias_cols[i]] += p.bias_values[i];
  }
}

}  // namespace llama2
