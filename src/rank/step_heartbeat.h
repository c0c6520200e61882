// Where each rank of a tensor-parallel group is in the step sequence, published through memory
// shared on a node, so that rank 0's step watchdog can say which rank a stalled step waits for.
// A blocked collective does not say who is missing, and the watchdog thread may not call MPI (the
// program runs at MPI_THREAD_SINGLE): reading these counters is plain atomic loads.
//
// Every rank passes the same sequence of synchronizing points (the hand-over of a step's plan,
// then each all-reduce and gather of the forward pass, in program order), so point counts line up
// across ranks: a rank whose count is behind the others' has not reached the point they wait in.
//
// Scope: the counters live in an MPI_Win_allocate_shared window on each node; rank 0 sees the
// ranks of its own node (a TP group never spans nodes in the launch scripts), ranks elsewhere are
// reported as not observable. On the CUDA backend the all-reduces and gathers are NCCL calls
// queued on the GPU, not host points: there only the plan hand-over and the step boundaries count.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama2 {

enum class SyncPoint : int32_t { kNone = 0, kPlan = 1, kAllReduce = 2, kGather = 3 };

// One rank's published state, as read by rank 0.
struct RankBeat {
  bool observable = false;  // false: on another node, or shared memory was not available
  int pid = 0;
  int64_t step = 0;                   // last step this rank began (steps count from 1)
  int64_t step_done = 0;              // last step it finished
  int64_t point = 0;                  // synchronizing points it has arrived at so far
  bool inside = false;                // still inside point number `point` (waiting for its peers)
  SyncPoint kind = SyncPoint::kNone;  // what point number `point` is
  int64_t since_ns = 0;               // CLOCK_MONOTONIC of its last change
  int64_t step_ns = 0;                // CLOCK_MONOTONIC when it began `step`
  char run_state = 0;  // process state from /proc/PID/stat (R, S, D, T, Z; '?': gone; 0: unread)
};

class StepHeartbeat {
 public:
  // Collective over `comm` (and MPI_Win_free in the destructor). Without a unified shared-memory
  // window the heartbeat keeps this rank's slot in private memory: rank 0's step clock still works,
  // the other ranks are then not observable.
  explicit StepHeartbeat(MPI_Comm comm);
  ~StepHeartbeat();
  StepHeartbeat(const StepHeartbeat&) = delete;
  StepHeartbeat& operator=(const StepHeartbeat&) = delete;

  // The owning rank's writers (two relaxed stores and a clock read each: a few ns per call).
  void begin_step(int64_t step);
  void end_step(int64_t step);
  void arrive(SyncPoint kind);
  void pass();

  // Every rank's state, in rank order, with its process state; no MPI call, safe from any thread
  // of rank 0 (reads /proc: for describing a stall, not for polling).
  std::vector<RankBeat> snapshot() const;
  // This rank's own state (any thread).
  RankBeat self() const;

  static int64_t now_ns();

 private:
  struct Slot;
  Slot* mine_ = nullptr;
  std::vector<Slot*> by_rank_;  // rank 0: the slots it can see (nullptr: not observable)
  MPI_Win win_ = MPI_WIN_NULL;
  MPI_Comm node_ = MPI_COMM_NULL;
  std::unique_ptr<Slot> own_;  // backing of mine_ when there is no shared window
};

// The ranks of rank 0's node whose process has exited (state Z, X or no /proc entry), as
// "rank R (pid P)" joined by ", "; "" when none. For the watchdog's poll (a /proc read per rank).
std::string exited_ranks(const std::vector<RankBeat>& ranks);

// What a stalled step waits for, in one line for people, from rank 0's snapshot: which ranks have
// not reached the point where the others wait (and what they last did), or that every rank waits
// inside the same point or its own computation. `now_ns` is CLOCK_MONOTONIC.
std::string describe_stall(const std::vector<RankBeat>& ranks, int64_t now_ns);

}  // namespace llama2
