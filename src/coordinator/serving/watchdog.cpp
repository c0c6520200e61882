#include "coordinator/serving/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "coordinator/serving/socket_server.h"
#include "rank/engine.h"

namespace llama2 {

bool step_overdue(const StepClock& clock, std::chrono::milliseconds timeout) {
  return timeout.count() > 0 &&
         (!clock.exited.empty() || (clock.running && clock.running_for > timeout));
}

StepWatchdog::StepWatchdog(std::chrono::milliseconds timeout, std::function<StepClock()> probe,
                           std::function<void(const StepClock&)> on_stall)
    : timeout_(timeout), probe_(std::move(probe)), on_stall_(std::move(on_stall)) {
  if (timeout_.count() > 0) thread_ = std::thread([this] { run(); });
}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepWatchdog::run() {
  // A tenth of the timeout keeps the overshoot small; 100 ms at most keeps it under a blink for
  // long timeouts, and 1 ms at least keeps a tiny test timeout from spinning.
  const auto poll =
      std::clamp(timeout_ / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
    const StepClock clock = probe_();
    if (!step_overdue(clock, timeout_)) continue;
    lock.unlock();
    on_stall_(clock);
    return;
  }
}

StepClock engine_step_clock(const RankEngine& engine) {
  const RankBeat b = engine.progress();
  StepClock c;
  c.step = b.step;
  c.running = b.step > b.step_done;
  if (c.running) {
    c.running_for = std::chrono::milliseconds((StepHeartbeat::now_ns() - b.step_ns) / 1000000);
  }
  c.exited = engine.exited_ranks();
  return c;
}

std::string stall_message(const StepClock& clock, std::chrono::milliseconds timeout,
                          const std::string& diagnosis) {
  char head[160];
  std::snprintf(
      head, sizeof(head), "step %lld stalled: it has run for %.1f s (--step-timeout-ms %lld)",
      static_cast<long long>(clock.step), static_cast<double>(clock.running_for.count()) / 1000.0,
      static_cast<long long>(timeout.count()));
  return std::string(head) + "; " + diagnosis;
}

void end_job_after_stall(const std::string& why, SocketServer& server, RankEngine* engine,
                         std::chrono::milliseconds linger) {
  std::cerr << "llama2 serve: " << why << std::endl;
  server.fail_all(ErrorCode::kInternal, why + "; the server is ending the job");
  // The I/O thread keeps running: it delivers the errors and answers health meanwhile.
  std::this_thread::sleep_for(linger);
  server.remove_socket_file();
  const int aborted =
      engine != nullptr ? engine->abort_collectives(std::chrono::milliseconds(500)) : 0;
  std::cerr << "llama2 serve: ending the job (exit code " << kExitStalled
            << (aborted > 0 ? ", NCCL communicators aborted" : "") << ")" << std::endl;
  // No MPI call, no destructor: the engine thread is stuck inside MPI or the GPU (watchdog.h).
  ::_exit(kExitStalled);
}

}  // namespace llama2
