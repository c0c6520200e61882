// Rank 0's step watchdog (`llama2 serve --step-timeout-ms`): a thread that watches the engine's
// step clock and, when one step has run longer than the timeout, ends the job in bounded time
// instead of letting every request hang behind a stalled rank.
//
// How the job ends, and why this way: the program starts MPI with plain MPI_Init
// (MPI_THREAD_SINGLE), so no thread but the engine's may call MPI, and the engine thread is the one
// that is stuck (in a collective, or waiting for the GPU). MPI_Init_thread(MPI_THREAD_MULTIPLE)
// would let the watchdog call MPI_Abort, at the price of locks on every MPI call of the hot path
// and of trusting MPI_Abort to run while another thread is inside a collective. Instead the
// watchdog makes no MPI call at all: it answers the clients, removes the socket file, asks the
// NCCL communicators to abort (CUDA), and calls _exit(kExitStalled). mpirun then ends every other
// rank because one exited non-zero without MPI_Finalize (Open MPI 4.1, measured: SIGTERM, and
// SIGKILL ~2 s later for ranks that do not leave on SIGTERM, stopped ones included), and exits with
// that code. Under Slurm's srun the same needs `--kill-on-bad-exit=1`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace llama2 {

class RankEngine;
class SocketServer;

// The exit code of a job ended by the watchdog (mpirun passes it on).
constexpr int kExitStalled = 3;
// How long the server keeps answering (health: "stalled"; new generations: shutting_down) after
// the in-flight clients got their error, so that clients and health checks see why it goes away.
constexpr std::chrono::milliseconds kStallLinger{1000};
// The same after a rank's process exited: mpirun ends the other ranks ~2 s after one dies (Open
// MPI 4.1, SIGTERM then SIGKILL), so rank 0 must have answered and removed its socket before.
constexpr std::chrono::milliseconds kExitedLinger{300};

// What the watchdog reads: the step rank 0 is in and for how long it has run, and the ranks of its
// tensor-parallel group on its node whose process has exited.
struct StepClock {
  int64_t step = 0;      // the latest step begun (1-based)
  bool running = false;  // that step has not finished
  std::chrono::milliseconds running_for{0};
  std::string exited;  // "rank R (pid P), ..." (RankEngine::exited_ranks); "": none
};

// True when `clock` shows a step that has run for longer than `timeout`, or an exited rank: its
// peers wait in (or will reach) a collective it never joins, so the job cannot go on (timeout 0:
// never; the watchdog is off).
bool step_overdue(const StepClock& clock, std::chrono::milliseconds timeout);

class StepWatchdog {
 public:
  // Polls `probe` every min(timeout / 10, 100 ms) on a thread of its own and calls `on_stall`
  // (on that thread) once, with the overdue clock, when step_overdue(); afterwards it stops
  // polling. A zero timeout starts no thread.
  StepWatchdog(std::chrono::milliseconds timeout, std::function<StepClock()> probe,
               std::function<void(const StepClock&)> on_stall);
  // Stops the thread (waits for on_stall if it is running).
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

 private:
  void run();

  std::chrono::milliseconds timeout_;
  std::function<StepClock()> probe_;
  std::function<void(const StepClock&)> on_stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Rank 0's step clock from the engine's heartbeat.
StepClock engine_step_clock(const RankEngine& engine);

// The serve command's end after a stall, in this order: print `why` (which names the step and,
// from the heartbeat, the rank it waits for); end every in-flight generation with an `internal`
// error and mark the server stalled; keep answering for `linger`; remove the socket file; abort
// the NCCL communicators of `engine` (null: a dedicated front has none); _exit(kExitStalled).
// Never returns.
[[noreturn]] void end_job_after_stall(const std::string& why, SocketServer& server,
                                      RankEngine* engine,
                                      std::chrono::milliseconds linger = kStallLinger);

// "step 42 stalled: no progress for 3.0 s (--step-timeout-ms 3000); <the engine's diagnosis>".
std::string stall_message(const StepClock& clock, std::chrono::milliseconds timeout,
                          const std::string& diagnosis);

}  // namespace llama2
