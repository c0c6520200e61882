// The request owner on rank 0 (engine thread): the one FIFO queue, deadlines, cancellation and
// disconnects, the timings and counters of every request, and the one prompt-length check (through
// Admission, its thread-safe half). It drives a BatchScheduler only through the messages of
// request_messages.h: try_admit(SubmitRequest) for the queue's head before each step, CancelRequest
// for a running request, and it receives TokenEvent / Finished back, which it times, counts and
// passes to the endpoint's RequestEvents. Endpoints (the socket today, an HTTP front later; the
// batch and generate commands) only translate their input into submit/cancel/disconnect and the
// events back into their output.
//
// Request ids are the caller's (unique among active requests). `client` groups the requests of
// one connection for disconnect(); 0 when there is no such thing.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/replicas/replica_set.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/step_runner.h"

namespace llama2 {

class RequestOwner final : private SchedulerEvents {
 public:
  using Clock = std::chrono::steady_clock;

  // `metrics` (may be null) receives the finished-request counters and latency histograms.
  RequestOwner(Admission& admission, StepRunner& local, RequestEvents& events,
               ServeMetrics* metrics = nullptr);
  // The same over several replicas (data parallelism, replica_set.h): the queue's head goes to
  // the replica ReplicaSet picks and stays there.
  RequestOwner(Admission& admission, ReplicaSet& replicas, RequestEvents& events,
               ServeMetrics* metrics = nullptr);

  // Queues a request in the place `place` (Admission::reserve(), consumed here). When the
  // prompt-length check refuses it, returns why (counted; the place is given back) and keeps
  // nothing.
  std::optional<Refusal> submit(SubmitRequest req, Reservation place,
                                Clock::time_point deadline = Clock::time_point::max(),
                                uint64_t client = 0);
  // Ends request `id` (queued or running) at once with `reason`, freeing its KV blocks; false if
  // no such request is active.
  bool cancel(int64_t id, FinishReason reason);
  // Cancels every active request of `client` (its connection went away); returns how many.
  int disconnect(uint64_t client);
  // Ends every active request with `reason` (server shutdown).
  void cancel_all(FinishReason reason);
  // Ends requests whose deadline is at or before `now` with kTimeout, queued ones first (in queue
  // order), then running ones (in admission order); returns how many.
  int expire(Clock::time_point now);
  // One round: expire against the clock, admit the queue's head while a replica takes it
  // (FIFO: nothing overtakes a head that does not fit yet), one step of the in-process replica
  // and the remote replicas' events (ReplicaSet::step). Returns the number of tokens generated.
  // Cheap when idle; with remote replicas call it while idle too (it reads their heartbeats).
  int step();

  bool idle() const { return queue_.empty() && replicas_.idle(); }
  size_t queued() const { return queue_.size(); }
  size_t running() const { return static_cast<size_t>(replicas_.running()); }
  size_t active() const { return records_.size(); }

 private:
  struct Record {
    uint64_t client = 0;
    Clock::time_point deadline, added, last_token;
    bool admitted = false;
    double queue_s = 0, ttft_s = 0;
  };
  void dispatch();
  void refresh_gauges();
  // A request that ended before reaching the scheduler.
  void finish_queued(SubmitRequest&& req, FinishReason reason);
  void on_token(const TokenEvent& ev) override;
  void on_finished(Finished&& done) override;

  Admission& admission_;
  std::unique_ptr<ReplicaSet> own_replicas_;  // the one-scheduler constructor's
  ReplicaSet& replicas_;
  RequestEvents& events_;
  ServeMetrics* metrics_;
  std::deque<SubmitRequest> queue_;
  std::unordered_map<int64_t, Record> records_;  // every active request, queued or running
  std::vector<int64_t> running_order_;           // admitted ids, in admission order
  // No active request's deadline is earlier: expire() skips its scan until then.
  Clock::time_point earliest_deadline_ = Clock::time_point::max();
};

// The whole path as `batch` and `generate` use it: this process's engine as replica 0 (KV
// blocks, its scheduler), the remote replicas' leaders reached over `link` when there are any
// (data parallelism, replica_set.h), admission without queue or per-client limits, and the owner.
// `observer` (may be null) watches this process's engine steps (the step log).
struct LocalServing {
  LocalServing(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config, int num_blocks,
               int block_size, SchedulerOptions opts, RequestEvents& events,
               ReplicaLink* link = nullptr, std::vector<RemoteReplica> remotes = {},
               StepObserver* observer = nullptr);
  // Reserves a place and submits; the refusal of the prompt-length check, if any.
  std::optional<Refusal> submit(SubmitRequest req);

  BlockAllocator blocks;
  Admission admission;
  BatchScheduler scheduler;
  StepRunner runner;
  ReplicaSet replicas;
  RequestOwner owner;
};

}  // namespace llama2
