// Worker threads for the CPU backend's operators: a fixed pool that runs one operator's parts at a
// time (fork/join); the calling thread and the workers take parts until none is left.
//
// Why a pool of its own and not OpenMP: the ranks are MPI processes whose core budget is decided by
// the launcher (binding, ranks per node); the pool sizes itself from the affinity mask and the
// local rank count, and workers that spin briefly between the operators of a step, then sleep, cost
// nothing while a serve process is idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llama2 {

class ThreadPool {
 public:
  // `threads` >= 1 counts the calling thread: ThreadPool(1) starts no worker and runs inline.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(part) once for every part in [0, parts), on whichever thread takes it first (the
  // caller included); returns when all have returned. fn must not throw. Not reentrant: one run()
  // at a time, from the thread that owns the pool.
  void run(int parts, const std::function<void(int)>& fn);

 private:
  void worker_loop();
  void take_parts();  // fn_ on parts from next_ until none is left

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> epoch_{0};  // bumped once per run(); workers wait for it to move
  std::atomic<int> finished_{0};    // workers done with the current epoch
  std::atomic<int> next_{0};        // the next part to take
  const std::function<void(int)>* fn_ = nullptr;
  int parts_ = 0;
  std::mutex mu_;  // orders an epoch bump against a worker going to sleep on cv_
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
};

// Operators smaller than this many multiply-adds run on one thread: waking the pool and joining
// costs about a microsecond, so a split has to save more than that (see benchmarks/RESULTS.md).
constexpr int64_t kMinParallelWork = 48 * 1024;

// How many parts to split `work` (multiply-adds) into: at most `max_parts` and 4 per thread; 1 (no
// pool, a one-thread pool, or too little work) means run inline.
int parallel_parts(const ThreadPool* pool, int64_t work, int max_parts);

// Threads for one rank's CPU backend from the CPUs this process may run on (its affinity mask,
// which mpirun's binding narrows): `requested` when > 0, at most those CPUs; else the CPUs shared
// among the `local_ranks` on the node.
int cpu_threads_for_rank(int requested, int local_ranks);

}  // namespace llama2
