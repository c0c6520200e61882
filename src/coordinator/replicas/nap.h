// A growing sleep for a polling loop that found nothing to do: from 50 us, doubling, up to `max`;
// reset() after work. Keeps an idle rank to a few percent of a core while a busy one never sleeps
// (the front waiting for remote replicas, an idle replica leader).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace llama2 {

class Nap {
 public:
  explicit Nap(std::chrono::microseconds max) : max_(max) {}
  void sleep() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(max_, next_ * 2);
  }
  void reset() { next_ = std::chrono::microseconds(50); }

 private:
  std::chrono::microseconds max_;
  std::chrono::microseconds next_{50};
};

}  // namespace llama2
