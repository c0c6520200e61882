#include "coordinator/requests/admission.h"

#include "common/check.h"

namespace llama2 {

Admission::Admission(AdmissionOptions opts, ServeMetrics* metrics)
    : opts_(opts), metrics_(metrics) {}

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    admission_ = std::exchange(o.admission_, nullptr);
    refusal_ = std::move(o.refusal_);
  }
  return *this;
}

void Reservation::release() {
  if (admission_ != nullptr) admission_->waiting_.fetch_sub(1, std::memory_order_relaxed);
  admission_ = nullptr;
}

void Admission::consume(Reservation&& place) {
  LLAMA2_CHECK(place.admission_ == this);
  place.admission_ = nullptr;  // the queue count now belongs to the queued request
}

Reservation Admission::reserve(int client_inflight) {
  // Checked before the queue: one client must not take every batch slot and queue place while
  // others wait behind it (admission itself stays FIFO across clients).
  if (client_inflight >= opts_.max_inflight_per_client) {
    const std::string n = std::to_string(opts_.max_inflight_per_client);
    count_refusal(ErrorCode::kTooManyInFlight);
    return Reservation(Refusal{ErrorCode::kTooManyInFlight,
                               "this connection already has " + n +
                                   " generations in flight (--max-inflight-per-connection " + n +
                                   "); wait for one to finish or use another connection"});
  }
  int now = waiting_.load(std::memory_order_relaxed);
  do {
    if (now >= opts_.max_queue) {
      count_refusal(ErrorCode::kQueueFull);
      return Reservation(Refusal{ErrorCode::kQueueFull, "queue is full (" +
                                                            std::to_string(opts_.max_queue) +
                                                            " waiting, --max-queue); retry later"});
    }
  } while (!waiting_.compare_exchange_weak(now, now + 1, std::memory_order_relaxed));
  return Reservation(this);
}

void Admission::count_refusal(ErrorCode code) {
  if (metrics_ != nullptr) metrics_->request_rejected(code);
}

std::optional<Refusal> Admission::check_prompt(int64_t prompt_tokens,
                                               int64_t max_new_tokens) const {
  if (prompt_tokens < 1) {
    return Refusal{ErrorCode::kInvalidRequest,
                   "prompt must have >= 1 token (got " + std::to_string(prompt_tokens) + ")"};
  }
  std::string too_long = prompt_length_error(opts_.limits, prompt_tokens, false, max_new_tokens);
  if (too_long.empty()) return std::nullopt;
  return Refusal{ErrorCode::kPromptTooLong, std::move(too_long)};
}

Gauges Admission::gauges() const {
  Gauges g;
  g.waiting = waiting_.load(std::memory_order_relaxed);
  g.running = running_.load(std::memory_order_relaxed);
  g.kv_blocks_used = kv_used_.load(std::memory_order_relaxed);
  g.kv_blocks_total = kv_total_.load(std::memory_order_relaxed);
  g.kv_blocks_cached = kv_cached_.load(std::memory_order_relaxed);
  g.prefix_queried_tokens = prefix_queried_.load(std::memory_order_relaxed);
  g.prefix_hit_tokens = prefix_hits_.load(std::memory_order_relaxed);
  g.prefix_evicted_blocks = prefix_evicted_.load(std::memory_order_relaxed);
  g.preemptions = preemptions_.load(std::memory_order_relaxed);
  g.spec.verify_steps = spec_verify_steps_.load(std::memory_order_relaxed);
  g.spec.proposed = spec_proposed_.load(std::memory_order_relaxed);
  g.spec.accepted = spec_accepted_.load(std::memory_order_relaxed);
  g.spec.emitted = spec_emitted_.load(std::memory_order_relaxed);
  return g;
}

void Admission::set_spec_counters(const SpecCounters& c) {
  spec_verify_steps_.store(c.verify_steps, std::memory_order_relaxed);
  spec_proposed_.store(c.proposed, std::memory_order_relaxed);
  spec_accepted_.store(c.accepted, std::memory_order_relaxed);
  spec_emitted_.store(c.emitted, std::memory_order_relaxed);
}

void Admission::set_engine_gauges(int running, int kv_used, int kv_total) {
  running_.store(running, std::memory_order_relaxed);
  kv_used_.store(kv_used, std::memory_order_relaxed);
  kv_total_.store(kv_total, std::memory_order_relaxed);
}

void Admission::set_prefix_cache_gauges(int cached_blocks, int64_t queried_tokens,
                                        int64_t hit_tokens, int64_t evicted_blocks) {
  kv_cached_.store(cached_blocks, std::memory_order_relaxed);
  prefix_queried_.store(queried_tokens, std::memory_order_relaxed);
  prefix_hits_.store(hit_tokens, std::memory_order_relaxed);
  prefix_evicted_.store(evicted_blocks, std::memory_order_relaxed);
}

}  // namespace llama2
