#include "rank/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace llama2 {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a worker spins for the next operator before it sleeps. The operators of one step follow
// each other within microseconds; between steps (sampling, the plan broadcast) a few tens; an idle
// server sleeps after this and costs no CPU.
constexpr auto kSpinFor = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(int parts, const std::function<void(int)>& fn) {
  if (parts <= 1 || workers_.empty()) {
    for (int p = 0; p < parts; ++p) fn(p);
    return;
  }
  fn_ = &fn;
  parts_ = parts;
  next_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  {
    // Under the lock so that a worker between its last spin and cv_.wait cannot miss the bump.
    std::lock_guard<std::mutex> lock(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  take_parts();
  // Every worker reports, with or without a part: the next run() may then reuse fn_ and parts_.
  const int workers = static_cast<int>(workers_.size());
  // Spin (the parts end within microseconds of each other), but yield once it takes long: with
  // more threads than cores (--cpu-threads above the CPU count) a worker may be waiting for ours.
  for (int spins = 0; finished_.load(std::memory_order_acquire) != workers; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::take_parts() {
  for (int p = next_.fetch_add(1, std::memory_order_relaxed); p < parts_;
       p = next_.fetch_add(1, std::memory_order_relaxed)) {
    (*fn_)(p);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    const auto spin_until = std::chrono::steady_clock::now() + kSpinFor;
    for (int i = 0; e == seen; ++i) {
      // Pause-spin first; then yield, so that threads beyond the cores let the others run.
      if (i < 2048) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
      e = epoch_.load(std::memory_order_acquire);
      if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
    }
    if (e == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
      e = epoch_.load(std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = e;
    take_parts();
    finished_.fetch_add(1, std::memory_order_release);
  }
}

int parallel_parts(const ThreadPool* pool, int64_t work, int max_parts) {
  if (pool == nullptr || pool->size() <= 1 || work < kMinParallelWork) return 1;
  // Several parts per thread, taken first come first served: a thread on a busier or slower core
  // takes fewer (the development VM's two vCPUs differ by 1.5x). Each part keeps >= half the
  // threshold's work, so the per-part cost (an atomic increment) stays negligible.
  const int64_t by_work = work / (kMinParallelWork / 2);
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({4 * static_cast<int64_t>(pool->size()), by_work,
                                              static_cast<int64_t>(max_parts)})));
}

int cpu_threads_for_rank(int requested, int local_ranks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  cpus = std::max(1, cpus);
  // More threads than CPUs only queue for them: every fork/join would wait on descheduled
  // workers (8 threads on this 2-vCPU VM made a tiny-model batch-8 step 16x slower).
  if (requested > 0) return std::min(requested, cpus);
  return std::max(1, cpus / std::max(1, local_ranks));
}

}  // namespace llama2
