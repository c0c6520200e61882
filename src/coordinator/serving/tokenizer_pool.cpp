#include "coordinator/serving/tokenizer_pool.h"

#include <algorithm>

namespace llama2 {

void TokenizerPool::start(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { loop(); });
}

void TokenizerPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void TokenizerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  tasks_.clear();
}

void TokenizerPool::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace llama2
