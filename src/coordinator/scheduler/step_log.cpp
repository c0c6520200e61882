#include "coordinator/scheduler/step_log.h"

namespace llama2 {

std::unique_ptr<StepLog> StepLog::open(const std::string& path) {
  if (path.empty()) return nullptr;
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    std::fprintf(stderr, "llama2: LLAMA2_STEP_LOG: cannot open %s; no step log\n", path.c_str());
    return nullptr;
  }
  // Flushed per line: a server that is killed never closes it.
  std::fputs("# decode_rows prefill_seqs prefill_tokens logit_rows ms host_ms\n", f);
  std::fflush(f);
  return std::unique_ptr<StepLog>(new StepLog(f));
}

StepLog::~StepLog() {
  std::fclose(file_);
}

void StepLog::on_step(const ScheduledStep& step, Clock::time_point begin, Clock::time_point end,
                      bool idle_after) {
  using Ms = std::chrono::duration<double, std::milli>;
  const double host_ms = last_end_ == Clock::time_point{} ? 0.0 : Ms(begin - last_end_).count();
  std::fprintf(file_, "%d %d %d %d %.4f %.4f\n", step.decode_rows, step.prefill_seqs,
               step.prefill_tokens, step.plan.logit_rows(), Ms(end - begin).count(), host_ms);
  std::fflush(file_);
  last_end_ = idle_after ? Clock::time_point{} : end;
}

}  // namespace llama2
