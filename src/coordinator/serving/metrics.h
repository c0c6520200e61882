// Serving metrics in the Prometheus text exposition format, named after the conventions users of
// vLLM/TGI dashboards know (`..._time_to_first_token_seconds`, `..._e2e_request_latency_seconds`).
// Updated by the engine thread, rendered by the socket thread: every method takes the lock. The
// gauges (queue depth, running, KV blocks) are not kept here: render() is given the same
// Admission::gauges() snapshot that `health` reports.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/speculative_config.h"
#include "coordinator/requests/codes.h"

namespace llama2 {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines.
  // `labels` (e.g. model_name="x") is added to every line.
  void render(const std::string& name, const std::string& help, std::string* out,
              const std::string& labels = "") const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

struct Gauges {
  int running = 0;
  int waiting = 0;
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  // Prefix cache (block_allocator.h): registered blocks (in use or evictable) and the counters
  // since start; hit rate = prefix_hit_tokens / prefix_queried_tokens.
  int kv_blocks_cached = 0;
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t prefix_evicted_blocks = 0;
  // Running sequences whose KV blocks were taken back for others since start (batch_scheduler.h),
  // summed over the replicas.
  int64_t preemptions = 0;
  // Speculative decoding's counters (docs/speculative.md), summed over the replicas.
  SpecCounters spec{};
  double spec_acceptance_rate() const {
    return spec.proposed > 0
               ? static_cast<double>(spec.accepted) / static_cast<double>(spec.proposed)
               : 0.0;
  }
  double spec_tokens_per_verify_step() const {
    return spec.verify_steps > 0
               ? static_cast<double>(spec.emitted) / static_cast<double>(spec.verify_steps)
               : 0.0;
  }
  double prefix_hit_rate() const {
    return prefix_queried_tokens > 0
               ? static_cast<double>(prefix_hit_tokens) / static_cast<double>(prefix_queried_tokens)
               : 0.0;
  }
};

class ServeMetrics {
 public:
  ServeMetrics();
  void request_finished(FinishReason finish_reason, double queue_s, double ttft_s, double e2e_s,
                        int prompt_tokens, int completion_tokens);
  void request_rejected(ErrorCode code);
  void inter_token(double seconds);
  std::string render(const Gauges& g) const;
  // The same numbers under the vLLM names operators' dashboards already chart (the HTTP front's
  // GET /metrics adds them), labelled model_name="`model`": vllm:num_requests_running,
  // vllm:num_requests_waiting, vllm:gpu_cache_usage_perc and v1's vllm:kv_cache_usage_perc (a 0-1
  // fraction, as vLLM's), vllm:num_preemptions_total, vllm:prefix_cache_queries_total and
  // vllm:prefix_cache_hits_total (tokens, as v1), vllm:prompt_tokens_total,
  // vllm:generation_tokens_total, vllm:request_success_total{finished_reason}, and the histograms
  // vllm:time_to_first_token_seconds, vllm:time_per_output_token_seconds, v1's
  // vllm:inter_token_latency_seconds (the same observations), vllm:e2e_request_latency_seconds,
  // vllm:request_queue_time_seconds, vllm:request_prompt_tokens, vllm:request_generation_tokens.
  std::string render_vllm(const Gauges& g, const std::string& model) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kFinishReasonCount> finished_{};  // by finish reason, all rendered
  std::array<uint64_t, kErrorCodeCount> rejected_{};     // by error code
  // The codes `stats` lists even at 0 (docs/PROTOCOL.md), and every code counted since.
  std::array<bool, kErrorCodeCount> rejected_shown_{};
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, itl_, e2e_, queue_;
  Histogram prompt_len_, generation_len_;  // tokens per finished request
};

}  // namespace llama2
