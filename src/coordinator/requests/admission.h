// The request owner's thread-safe half (request_owner.h has the engine-thread half): the admission
// policy an endpoint applies on its own I/O thread, so that a full queue or an over-long prompt is
// answered at once even while the engine is inside a long step, and the counters `health` and
// `stats` both report. Every number either reports comes from gauges(): one owner per counter.
//
// Thread safety: every method may be called from any thread (atomics; rejection counts go to
// ServeMetrics under its own lock). The engine thread's RequestOwner is the only writer of the
// running / KV gauges and the only one that takes requests out of the queue count.
//
// A place in the queue is a value (Reservation): reserve() hands it out, RequestOwner::submit()
// consumes it, and a Reservation dropped anywhere else (a refusal after tokenizing, a client gone,
// a command never delivered) gives the place back, on whatever thread drops it.
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/sampling_params.h"
#include "coordinator/requests/codes.h"
#include "coordinator/serving/metrics.h"

namespace llama2 {

struct AdmissionOptions {
  PromptLimits limits;                    // the one prompt-length check (prompt_length_error)
  int max_queue = INT_MAX;                // requests reserved and not yet admitted
  int max_inflight_per_client = INT_MAX;  // unfinished requests one client (connection) may have
};

class Admission;

// A place in the admission queue, or why there is none. Move-only.
class Reservation {
 public:
  Reservation() = default;
  Reservation(Reservation&& o) noexcept
      : admission_(std::exchange(o.admission_, nullptr)), refusal_(std::move(o.refusal_)) {}
  Reservation& operator=(Reservation&& o) noexcept;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  ~Reservation() { release(); }

  // True while it holds a place.
  explicit operator bool() const { return admission_ != nullptr; }
  // Why reserve() refused (set only then).
  const std::optional<Refusal>& refusal() const { return refusal_; }

 private:
  friend class Admission;
  explicit Reservation(Admission* a) : admission_(a) {}
  explicit Reservation(Refusal why) : refusal_(std::move(why)) {}
  void release();

  Admission* admission_ = nullptr;
  std::optional<Refusal> refusal_;
};

class Admission {
 public:
  // `metrics` (may be null: batch, generate) receives the rejection counts.
  explicit Admission(AdmissionOptions opts, ServeMetrics* metrics = nullptr);

  // A place in the queue for a request about to be submitted by a client that has
  // `client_inflight` unfinished requests; or an empty Reservation saying why not
  // (too_many_in_flight, queue_full; the refusal is counted).
  Reservation reserve(int client_inflight);
  // Engine thread (RequestOwner::submit): the request is queued; `place` is spent and the queue
  // count stays until the request leaves the queue (left_queue()). Error for an empty place or
  // another Admission's.
  void consume(Reservation&& place);
  // Counts a refusal the endpoint answered itself (malformed frame, draining, ...).
  void count_refusal(ErrorCode code);
  // The prompt-length check: nullopt when `prompt_tokens` + `max_new_tokens` fit, else
  // prompt_too_long (invalid_request for an empty prompt) with prompt_length_error's message.
  std::optional<Refusal> check_prompt(int64_t prompt_tokens, int64_t max_new_tokens) const;

  const AdmissionOptions& options() const { return opts_; }
  // What health and stats report: requests waiting for admission (reserved, being tokenized,
  // on their way to the engine thread or in the owner's queue), running, KV blocks.
  Gauges gauges() const;

  // Engine thread (RequestOwner).
  void left_queue() { waiting_.fetch_sub(1, std::memory_order_relaxed); }
  void set_engine_gauges(int running, int kv_used, int kv_total);
  // The prefix cache's numbers (Gauges' kv_blocks_cached and prefix_* fields).
  void set_prefix_cache_gauges(int cached_blocks, int64_t queried_tokens, int64_t hit_tokens,
                               int64_t evicted_blocks);
  void set_preemptions(int64_t preemptions) {
    preemptions_.store(preemptions, std::memory_order_relaxed);
  }
  void set_spec_counters(const SpecCounters& c);

 private:
  friend class Reservation;  // release() gives its place back
  AdmissionOptions opts_;
  ServeMetrics* metrics_;
  std::atomic<int> waiting_{0};
  std::atomic<int> running_{0}, kv_used_{0}, kv_total_{0}, kv_cached_{0};
  std::atomic<int64_t> prefix_queried_{0}, prefix_hits_{0}, prefix_evicted_{0};
  std::atomic<int64_t> preemptions_{0};
  std::atomic<int64_t> spec_verify_steps_{0}, spec_proposed_{0}, spec_accepted_{0},
      spec_emitted_{0};
};

}  // namespace llama2
