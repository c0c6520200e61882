// The front's view of the job's replicas (docs/ARCHITECTURE.md, "Data parallelism"): the request
// owner offers its queue's head here, and ReplicaSet picks the replica, sends the request there,
// forwards cancels to the replica that holds it, and turns what the replicas report into the
// owner's TokenEvent / Finished messages.
//
// Replica 0 may run in this process (a StepRunner over rank 0's own engine: no messages);
// the others are remote leaders reached over a ReplicaLink. The front counts a remote replica's
// capacity itself: a request dispatched there holds one batch slot and blocks_for(prompt) KV
// blocks until its Finished comes back, what the leader's scheduler takes at admission
// (batch_scheduler.h; its sequences then grow, and the leader preempts when they must). The
// leader keeps a small pending queue, so a request the front sent too early only waits there.
//
// The dispatch rule: the queue's head goes to the replica with the most free KV blocks among
// those with a free batch slot and enough free blocks for it (ties: the lowest index); none: it
// waits at the head (FIFO, nothing overtakes it). A request stays on its replica for life.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/replicas/nap.h"
#include "coordinator/replicas/replica_board.h"
#include "coordinator/replicas/replica_wire.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/step_runner.h"

namespace llama2 {

class ReplicaLink;  // replica_link.h (MPI): only the .cpp files need it

struct RemoteReplica {
  int link_rank = 0;   // the leader's rank on the link's communicator
  int world_rank = 0;  // for messages
  int kv_blocks = 0;   // what its engine allocated
};

class ReplicaSet {
 public:
  // Only the in-process replica (batch/generate on one replica, the unit tests).
  explicit ReplicaSet(StepRunner& local);
  // `local` (may be null: no in-process replica) is replica 0, then `remotes` in order, reached
  // over `link` (may be null when there are none); every remote replica has `max_batch` slots and
  // KV blocks of `block_size` tokens.
  ReplicaSet(StepRunner* local, ReplicaLink* link, std::vector<RemoteReplica> remotes,
             int max_batch, int block_size);

  int size() const { return static_cast<int>(stats_.size()); }
  bool has_remotes() const { return !remotes_.empty(); }
  // Dispatches `req` (moved from when taken) by the rule above; the replica's index, or -1 when
  // none can take it now (`req` untouched).
  int try_admit(SubmitRequest& req);
  // Ends request `id` on the replica that holds it: at once for the in-process replica,
  // otherwise the cancel is sent and its Finished comes back through a later step(). False when
  // no replica holds it.
  bool cancel(const CancelRequest& c, SchedulerEvents& events);
  // Sends what dispatch and cancel queued, runs one step of the in-process replica when it has
  // work, and delivers every event the remote replicas have sent. When there was nothing to do
  // it naps (up to 500 us) instead of spinning. Returns the tokens generated (all replicas).
  int step(SchedulerEvents& events);
  // No request is running anywhere (remote: none dispatched without its Finished back).
  bool idle() const;

  // Totals for Admission::set_engine_gauges.
  int running() const;
  int kv_used() const;
  int kv_total() const;
  // Preemptions since start: the in-process scheduler's and the remote leaders' latest reports.
  int64_t preemptions() const;
  // Speculative decoding's counters summed over the replicas (the remote ones as last reported).
  SpecCounters spec_counters() const;
  // The smallest replica's KV capacity in blocks (admission's per-request limit).
  int min_kv_blocks() const;
  // The in-process replica's KV blocks (null when there is none: a dedicated front).
  const BlockAllocator* local_blocks() const {
    return local_ != nullptr ? &local_->scheduler().blocks() : nullptr;
  }
  // Per replica: the leader's latest gauges and the requests dispatched to it.
  const std::vector<ReplicaStat>& stats() const { return stats_; }
  // Per replica, for health and stats (copied to `board` after every change when set).
  void set_board(ReplicaBoard* board) {
    board_ = board;
    for (int r = 0; r < size(); ++r) publish(r);
  }

  // Tells every remote leader to shut its replica down with `exit_code`; returns once sent.
  void shutdown(int exit_code);
  // Any thread: the longest time since a remote leader was last heard from (it reports at least
  // every kReplicaHeartbeat between steps), and which replica that is (-1: no remote replica).
  std::chrono::milliseconds longest_silence(int* replica) const;

 private:
  class Inbox;
  struct Held {
    int replica = 0;
    int blocks = 0;
    bool cancel_sent = false;
  };
  void publish(int replica);
  int free_blocks(int replica) const;
  bool fits(int replica, int blocks) const;
  Held* held(int64_t id);

  StepRunner* local_ = nullptr;
  ReplicaLink* link_ = nullptr;
  int first_remote_ = 0;  // index of remotes_[0] among the replicas
  int max_batch_ = 0, block_size_ = 1;
  std::vector<RemoteReplica> remotes_;
  std::vector<int> remote_running_, remote_reserved_;  // the front's count, per remote
  std::vector<WireWriter> outbox_;                     // per remote, sent by step()
  std::unique_ptr<std::atomic<int64_t>[]> heard_ns_;   // per remote: steady clock, ns
  std::unordered_map<int64_t, Held> held_;             // remote requests in flight
  std::vector<ReplicaStat> stats_;                     // per replica
  ReplicaBoard* board_ = nullptr;
  Nap nap_{std::chrono::microseconds(500)};
};

// Tells each of `remotes` to shut its replica down with `exit_code`; returns once sent.
void send_shutdown(ReplicaLink& link, const std::vector<RemoteReplica>& remotes, int exit_code);

// How often an idle leader reports its gauges (its heartbeat); a busy one reports every step.
constexpr std::chrono::milliseconds kReplicaHeartbeat{100};

}  // namespace llama2
