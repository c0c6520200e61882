// cpp-httplib's task queue for the HTTP front: one thread per connection for the connection's
// whole life (that is how cpp-httplib 0.11 serves), started on demand up to `threads`, then a
// bounded list of accepted connections waiting for a thread; past that, connections are handed to
// one refusal thread, on which the front answers 503 server_busy at once (refusing()). The
// default ThreadPool of cpp-httplib has max(8, cores - 1) threads and an unbounded list: on a
// small machine the ninth streaming client would wait for one of the first eight to finish.
#pragma once

#include <httplib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace llama2 {

class ConnectionPool final : public httplib::TaskQueue {
 public:
  // `nice` > 0: every thread of the pool lowers its own priority by that much when it starts.
  ConnectionPool(int threads, int max_queued, int nice = 0)
      : max_threads_(threads), max_queued_(max_queued), nice_(nice) {}
  ~ConnectionPool() override { shutdown(); }

  // cpp-httplib 0.11-0.14 (Debian 12, Ubuntu 24.04) declare `void enqueue`, 0.15 and later (Debian
  // 13) `bool enqueue`, false meaning "queue full, drop the connection". This pool never refuses
  // through that path (it answers 503 itself), so it returns true where a value is wanted.
  using EnqueueResult =
      decltype(std::declval<httplib::TaskQueue&>().enqueue(std::function<void()>()));

  EnqueueResult enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    // Idle workers not yet claimed by a job already waiting: a burst of connections arriving
    // before the woken workers run must still get one thread each.
    const int free_workers = idle_ - static_cast<int>(jobs_.size());
    if (free_workers <= 0 && static_cast<int>(workers_.size()) < max_threads_) {
      workers_.emplace_back([this] { work(); });
    } else if (free_workers <= 0 && static_cast<int>(jobs_.size()) - idle_ >= max_queued_) {
      refusals_.push_back(std::move(fn));
      if (!refuser_.joinable()) refuser_ = std::thread([this] { refuse(); });
      cv_.notify_all();
      return static_cast<EnqueueResult>(true);
    }
    jobs_.push_back(std::move(fn));
    cv_.notify_all();
    return static_cast<EnqueueResult>(true);
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    if (refuser_.joinable()) refuser_.join();
  }

  // True on the refusal thread: the connection it serves gets 503 server_busy.
  static bool refusing() { return refusing_flag(); }

 private:
  static bool& refusing_flag() {
    thread_local bool flag = false;
    return flag;
  }
  // Linux: PRIO_PROCESS with a thread id sets that one thread's niceness.
  void lower_priority() const {
    if (nice_ > 0) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice_);
  }
  void work() {
    lower_priority();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, nothing left
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  void refuse() {
    lower_priority();
    refusing_flag() = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !refusals_.empty(); });
      if (refusals_.empty()) return;
      std::function<void()> fn = std::move(refusals_.front());
      refusals_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const int max_threads_, max_queued_, nice_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  std::thread refuser_;
  std::deque<std::function<void()>> jobs_, refusals_;
  int idle_ = 0;
  bool stopping_ = false;
};

}  // namespace llama2
