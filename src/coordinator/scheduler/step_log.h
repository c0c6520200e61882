// LLAMA2_STEP_LOG (TuningKnobs::step_log): one line per engine step, written by an observer of the
// step (step_runner.h), read by benchmarks/serve/step_log_summary.py:
//   decode_rows prefill_seqs prefill_tokens logit_rows ms host_ms
// ms = wall time of the engine step on rank 0 (plan hand-over to logits back on the host);
// host_ms = rank 0's time between the previous step's end and this one's start (sampling,
// detokenizing, events, planning: the GPUs idle meanwhile; 0 after the scheduler was idle, so an
// idle pause is not counted as host work).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "coordinator/scheduler/step_runner.h"

namespace llama2 {

class StepLog final : public StepObserver {
 public:
  // Appends to `path` after a header line; nullptr for an empty path or a file that cannot be
  // opened (said on stderr: the run goes on without a step log).
  static std::unique_ptr<StepLog> open(const std::string& path);
  ~StepLog() override;

  void on_step(const ScheduledStep& step, Clock::time_point begin, Clock::time_point end,
               bool idle_after) override;

 private:
  explicit StepLog(std::FILE* file) : file_(file) {}
  std::FILE* file_;
  // End of the previous step while requests kept running; unset after a step that left the
  // scheduler idle.
  Clock::time_point last_end_{};
};

}  // namespace llama2
