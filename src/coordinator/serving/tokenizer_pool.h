// A few worker threads for the socket front end's slow requests: text prompts longer than
// kInlineTokenizeBytes are tokenized here, so that a client sending megabytes of prompt cannot
// stall the I/O thread (and with it every client). Tasks run in arrival order, one per free
// worker; each task itself reports back to the I/O thread's state under that state's own lock
// (the pool's lock is never held while a task runs, so the caller may post() under its lock).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llama2 {

class TokenizerPool {
 public:
  TokenizerPool() = default;
  ~TokenizerPool() { stop(); }
  TokenizerPool(const TokenizerPool&) = delete;
  TokenizerPool& operator=(const TokenizerPool&) = delete;

  // Starts `threads` workers (at least one).
  void start(int threads);
  void post(std::function<void()> task);
  // Joins the workers; tasks not started yet are dropped (the server is stopping).
  void stop();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

}  // namespace llama2
