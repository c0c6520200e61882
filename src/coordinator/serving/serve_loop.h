// `llama2 serve`'s engine thread on rank 0, between the engine inbox (engine_inbox.h) and the
// request owner: EngineDispatch turns the inbox's commands into the owner's calls (submit, cancel,
// disconnect) and the owner's events into calls on each generation's EventSink, whichever endpoint
// made it; serve_loop() runs the engine until a drain ends. See docs/ARCHITECTURE.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/engine_config.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

class EngineDispatch final : public RequestEvents {
 public:
  // `seed` starts the generator of the seeds of requests that give none.
  explicit EngineDispatch(uint64_t seed) : seeder_(seed) {}

  // One command of the inbox, as calls on the owner.
  void handle(EngineCommand& cmd, RequestOwner& owner);
  size_t in_flight() const { return routes_.size(); }
  // After a step: each flusher wakes the readers of its sinks that got events, once.
  void flush();

  void on_token(const TokenEvent& ev) override;
  void on_finished(const Finished& done, const Timings& timings) override;

 private:
  struct Route {
    uint64_t ticket = 0;
    std::shared_ptr<EventSink> sink;
  };
  void submit(EngineCommand& cmd, RequestOwner& owner);

  std::map<int64_t, Route> routes_;                  // by the owner's request id
  std::unordered_map<uint64_t, int64_t> tickets_;    // generation ticket -> request id
  std::vector<std::shared_ptr<EventSink>> touched_;  // got events this step
  int64_t next_id_ = 0;
  std::mt19937_64 seeder_;
};

// What `health` says besides the status and the counters (fixed for the server's life).
struct HealthInfo {
  int ranks = 1;
  Backend backend = Backend::kCpu;
  ComputeDType dtype = ComputeDType::kFp32;
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  std::string model;
  int max_batch_size = 0, max_queue = 0, max_seq_len = 0;
};

// The `health` event: status from the inbox's state (ready, draining, stalled), every counter
// from the one Admission::gauges() snapshot that `stats` reports too.
nlohmann::json health_event(const EngineInbox& inbox, const Admission& admission,
                            const HealthInfo& info);

// Runs the engine until a drain ends: takes commands, steps the owner while it has work, and when
// `stop_requested` turns true stops taking generations (the inbox drains) and lets in-flight ones
// finish for up to `shutdown_timeout` (then ends them with shutting_down).
void serve_loop(EngineInbox& inbox, EngineDispatch& dispatch, RequestOwner& owner,
                const std::atomic<bool>& stop_requested,
                std::chrono::milliseconds shutdown_timeout);

}  // namespace llama2
