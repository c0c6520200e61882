// What the coordinator needs from the engine: run one step plan on every rank and return the
// logit rows. Implemented by the rank layer (RankEngine); kept abstract so the coordinator
// includes no backend headers.
#pragma once

#include <cstdint>
#include <vector>

#include "common/step_plan.h"

namespace llama2 {

// The logit rows of a step (each sequence's n_logits, in plan order), on rank 0, after the
// plan's vocabulary adjustments (StepPlan::adjust).
//   plan.candidates == 0: values [rows, vocab] fp32 (full logits), ids empty;
//   plan.candidates == k: values and ids [rows, k], each row's k best (logit, token id) over the
//   whole vocabulary, best first (larger value first, equal values by lower id, NaN first).
struct StepLogits {
  int rows = 0;
  int width = 0;  // vocab (full) or k (candidates)
  std::vector<float> values;
  std::vector<int32_t> ids;
  // Only when plan.any_logprobs(): [rows], each logit row's log-sum-exp of the raw logits over the
  // whole vocabulary (log p(token) = raw logit - lse) for the rows with want_logprobs, NaN for the
  // others. Candidate steps compute it from each rank's slice summaries (logits_gather.h); full
  // steps on rank 0 from the gathered rows.
  std::vector<double> lse;

  bool full() const { return ids.empty(); }
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Broadcasts `plan` to every rank, runs it, and returns (on rank 0) the logit rows.
  virtual void execute(const StepPlan& plan, StepLogits* logits) = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace llama2
