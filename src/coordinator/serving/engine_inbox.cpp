#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

void EngineInbox::post(EngineCommand cmd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(std::move(cmd));
  }
  cv_.notify_one();
}

std::deque<EngineCommand> EngineInbox::take(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (commands_.empty() && wait.count() > 0)
    cv_.wait_for(lock, wait, [this] { return !commands_.empty(); });
  std::deque<EngineCommand> out;
  out.swap(commands_);
  return out;
}

void EngineInbox::set_draining() {
  draining_.store(true, std::memory_order_release);
  state_changed();
}

void EngineInbox::set_stalled() {
  stalled_.store(true, std::memory_order_release);
  draining_.store(true, std::memory_order_release);
  state_changed();
}

void EngineInbox::state_changed() {
  for (const auto& wake : wakers_) wake();
}

}  // namespace llama2
