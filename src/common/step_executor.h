// What the coordinator needs from the engine: run one step plan on every rank and return the
// gathered logits. Implemented by the rank layer (RankEngine); kept abstract so the coordinator
// includes no backend headers.
#pragma once

#include <vector>

#include "common/step_plan.h"

namespace llama2 {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Broadcasts `plan` to every rank, runs it, and returns (on rank 0) the logits of the sequences
  // that asked for them: logits [plan.logit_rows(), vocab_size] fp32, in plan order.
  virtual void execute(const StepPlan& plan, std::vector<float>* logits) = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace llama2
