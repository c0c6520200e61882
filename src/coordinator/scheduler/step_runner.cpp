#include "coordinator/scheduler/step_runner.h"

namespace llama2 {

int StepRunner::step(SchedulerEvents& events) {
  const ScheduledStep step = scheduler_.schedule();
  if (step.empty()) return 0;
  const StepObserver::Clock::time_point begin = StepObserver::Clock::now();
  exec_.execute(step.plan, &logits_);
  const StepObserver::Clock::time_point end = StepObserver::Clock::now();
  const int generated = scheduler_.apply(step, logits_, events);
  if (observer_ != nullptr) observer_->on_step(step, begin, end, scheduler_.idle());
  return generated;
}

}  // namespace llama2
