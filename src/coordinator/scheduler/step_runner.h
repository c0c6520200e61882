// One engine step as three calls (nano-vllm's LLMEngine.step, vLLM v1's schedule() /
// execute_model() / update_from_output()): the scheduler plans, the executor runs the plan on
// every rank, the scheduler applies the logits. Observers (the step log) watch each executed step
// from outside; nothing in the three calls knows them.
#pragma once

#include <chrono>

#include "common/step_executor.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/scheduler/batch_scheduler.h"

namespace llama2 {

class StepObserver {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~StepObserver() = default;
  // After each executed step: what ran, when the engine call began and returned, and whether the
  // scheduler had nothing left to run once the step's results were applied.
  virtual void on_step(const ScheduledStep& step, Clock::time_point begin, Clock::time_point end,
                       bool idle_after) = 0;
};

class StepRunner {
 public:
  // `observer` may be null.
  StepRunner(BatchScheduler& scheduler, StepExecutor& exec, StepObserver* observer = nullptr)
      : scheduler_(scheduler), exec_(exec), observer_(observer) {}

  // schedule() -> execute -> apply(), when the scheduler has work; returns the tokens generated
  // (0 and no engine call when idle).
  int step(SchedulerEvents& events);

  BatchScheduler& scheduler() { return scheduler_; }
  const BatchScheduler& scheduler() const { return scheduler_; }

 private:
  BatchScheduler& scheduler_;
  StepExecutor& exec_;
  StepObserver* observer_;
  StepLogits logits_;  // reused from step to step
};

}  // namespace llama2
