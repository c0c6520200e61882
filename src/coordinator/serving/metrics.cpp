#include "coordinator/serving/metrics.h"

#include <cstdio>

namespace llama2 {
namespace {
std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.9g", v);
  return b;
}
// Latency buckets spanning sub-millisecond CPU decode steps to multi-second GPU prefills.
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
// Tokens per request, 1-2-5 steps as vLLM's request_prompt_tokens (which stops at the model's
// context; these cover any).
const std::vector<double> kTokenBuckets = {1,   2,    5,    10,   20,    50,    100,   200,
                                           500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out,
                       const std::string& labels) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string lead = labels.empty() ? "" : labels + ",";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += name + "_bucket{" + lead + "le=\"" + fmt(bounds_[i]) + "\"} " +
            std::to_string(cumulative) + "\n";
  }
  *out += name + "_bucket{" + lead + "le=\"+Inf\"} " + std::to_string(count_) + "\n";
  *out += name + "_sum" + own + " " + fmt(sum_) + "\n" + name + "_count" + own + " " +
          std::to_string(count_) + "\n";
}

ServeMetrics::ServeMetrics()
    : ttft_(kLatencyBuckets),
      itl_(kLatencyBuckets),
      e2e_(kLatencyBuckets),
      queue_(kLatencyBuckets),
      prompt_len_(kTokenBuckets),
      generation_len_(kTokenBuckets) {
  for (ErrorCode c : {ErrorCode::kInvalidRequest, ErrorCode::kPromptTooLong, ErrorCode::kQueueFull,
                      ErrorCode::kTooManyInFlight, ErrorCode::kShuttingDown})
    rejected_shown_[static_cast<size_t>(c)] = true;
}

void ServeMetrics::request_finished(FinishReason reason, double queue_s, double ttft_s,
                                    double e2e_s, int prompt_tokens, int completion_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[static_cast<size_t>(reason)];
  queue_.observe(queue_s);
  if (completion_tokens > 0) ttft_.observe(ttft_s);
  e2e_.observe(e2e_s);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  generation_tokens_ += static_cast<uint64_t>(completion_tokens);
  prompt_len_.observe(prompt_tokens);
  generation_len_.observe(completion_tokens);
}

void ServeMetrics::request_rejected(ErrorCode code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[static_cast<size_t>(code)];
  rejected_shown_[static_cast<size_t>(code)] = true;
}

void ServeMetrics::inter_token(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.observe(seconds);
}

namespace {
// One unlabelled sample with its HELP and TYPE lines.
void sample(std::string* out, const char* name, const char* type, const char* help,
            const std::string& value) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
          name + " " + value + "\n";
}
}  // namespace

std::string ServeMetrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out =
      "# HELP llama2_requests_total Finished generations by finish reason.\n"
      "# TYPE llama2_requests_total counter\n";
  for (int r = 0; r < kFinishReasonCount; ++r) {
    out += std::string("llama2_requests_total{finish_reason=\"") +
           to_string(static_cast<FinishReason>(r)) + "\"} " + std::to_string(finished_[r]) + "\n";
  }
  out +=
      "# HELP llama2_requests_rejected_total Requests refused before running, by error code.\n"
      "# TYPE llama2_requests_rejected_total counter\n";
  for (int c = 0; c < kErrorCodeCount; ++c) {
    if (!rejected_shown_[c]) continue;
    out += std::string("llama2_requests_rejected_total{code=\"") +
           to_string(static_cast<ErrorCode>(c)) + "\"} " + std::to_string(rejected_[c]) + "\n";
  }
  sample(&out, "llama2_prompt_tokens_total", "counter", "Prompt tokens of finished generations.",
         std::to_string(prompt_tokens_));
  sample(&out, "llama2_generation_tokens_total", "counter",
         "Generated tokens of finished generations.", std::to_string(generation_tokens_));
  sample(&out, "llama2_requests_running", "gauge", "Generations in the running batch.",
         std::to_string(g.running));
  sample(&out, "llama2_requests_waiting", "gauge", "Generations queued for admission.",
         std::to_string(g.waiting));
  sample(
      &out, "llama2_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks in use.",
      fmt(g.kv_blocks_total > 0 ? static_cast<double>(g.kv_blocks_used) / g.kv_blocks_total : 0.0));
  // vLLM's names, counted the same way (tokens): prefix_cache_queries / prefix_cache_hits.
  sample(&out, "llama2_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.", std::to_string(g.prefix_queried_tokens));
  sample(&out, "llama2_prefix_cache_hits_total", "counter",
         "Prompt tokens whose KV was found in the prefix cache.",
         std::to_string(g.prefix_hit_tokens));
  sample(&out, "llama2_prefix_cache_hit_rate", "gauge",
         "Prefix cache hits over queries since start (tokens).", fmt(g.prefix_hit_rate()));
  sample(&out, "llama2_prefix_cache_evictions_total", "counter",
         "Cached KV blocks taken back for other use.", std::to_string(g.prefix_evicted_blocks));
  sample(&out, "llama2_preemptions_total", "counter",
         "Running generations preempted (KV blocks freed, recomputed later) since start.",
         std::to_string(g.preemptions));
  // Speculative decoding (docs/speculative.md): 0 on a server without --speculative.
  sample(&out, "llama2_spec_decode_verify_steps_total", "counter",
         "Sequence-steps that verified proposed tokens.", std::to_string(g.spec.verify_steps));
  sample(&out, "llama2_spec_decode_proposed_tokens_total", "counter",
         "Tokens proposed for verification.", std::to_string(g.spec.proposed));
  sample(&out, "llama2_spec_decode_accepted_tokens_total", "counter",
         "Proposed tokens the target accepted.", std::to_string(g.spec.accepted));
  sample(&out, "llama2_spec_decode_emitted_tokens_total", "counter",
         "Tokens emitted by verify steps (accepted ones and the token after them).",
         std::to_string(g.spec.emitted));
  sample(&out, "llama2_spec_decode_acceptance_rate", "gauge",
         "Accepted over proposed tokens since start.", fmt(g.spec_acceptance_rate()));
  sample(&out, "llama2_spec_decode_tokens_per_verify_step", "gauge",
         "Mean tokens a sequence's verify step emitted since start.",
         fmt(g.spec_tokens_per_verify_step()));
  sample(&out, "llama2_kv_cache_cached_blocks", "gauge",
         "KV blocks holding a cached prefix, in use or evictable.",
         std::to_string(g.kv_blocks_cached));
  ttft_.render("llama2_time_to_first_token_seconds", "Time from arrival to the first token.", &out);
  itl_.render("llama2_inter_token_latency_seconds",
              "Time between consecutive tokens of a generation.", &out);
  e2e_.render("llama2_e2e_request_latency_seconds", "Time from arrival to the end of a generation.",
              &out);
  queue_.render("llama2_request_queue_time_seconds", "Time from arrival to admission.", &out);
  return out;
}

std::string ServeMetrics::render_vllm(const Gauges& g, const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string m = model;  // a label value: backslash, quote and newline escaped
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] == '\\' || m[i] == '"' || m[i] == '\n') {
      m.replace(i, 1, m[i] == '\n' ? "\\n" : std::string("\\") + m[i]);
      ++i;
    }
  }
  const std::string label = "model_name=\"" + m + "\"";
  std::string out;
  const auto one = [&](const char* name, const char* type, const char* help, const std::string& v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + "{" + label + "} " + v + "\n";
  };
  one("vllm:num_requests_running", "gauge", "Requests in the running batch.",
      std::to_string(g.running));
  one("vllm:num_requests_waiting", "gauge", "Requests waiting for admission.",
      std::to_string(g.waiting));
  const std::string kv_usage =
      fmt(g.kv_blocks_total > 0 ? static_cast<double>(g.kv_blocks_used) / g.kv_blocks_total : 0.0);
  // v0's name and v1's (vLLM renamed it when the V1 engine replaced V0): dashboards use either.
  one("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage, a fraction (1 = full).", kv_usage);
  one("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, a fraction (1 = full).", kv_usage);
  // Tokens, as vLLM v1 counts them: hits / queries is the prefix cache's hit rate.
  one("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
      std::to_string(g.prefix_queried_tokens));
  one("vllm:prefix_cache_hits_total", "counter",
      "Prompt tokens whose KV was found in the prefix cache.", std::to_string(g.prefix_hit_tokens));
  one("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions.",
      std::to_string(g.preemptions));
  one("vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
      std::to_string(prompt_tokens_));
  one("vllm:generation_tokens_total", "counter", "Generated tokens of finished requests.",
      std::to_string(generation_tokens_));
  out +=
      "# HELP vllm:request_success_total Finished requests by finish reason.\n"
      "# TYPE vllm:request_success_total counter\n";
  for (int r = 0; r < kFinishReasonCount; ++r) {
    out += "vllm:request_success_total{" + label + ",finished_reason=\"" +
           to_string(static_cast<FinishReason>(r)) + "\"} " + std::to_string(finished_[r]) + "\n";
  }
  ttft_.render("vllm:time_to_first_token_seconds", "Time to first token.", &out, label);
  itl_.render("vllm:time_per_output_token_seconds", "Time per output token.", &out, label);
  itl_.render("vllm:inter_token_latency_seconds", "Time between consecutive tokens.", &out, label);
  prompt_len_.render("vllm:request_prompt_tokens", "Prompt tokens per finished request.", &out,
                     label);
  generation_len_.render("vllm:request_generation_tokens", "Generated tokens per finished request.",
                         &out, label);
  e2e_.render("vllm:e2e_request_latency_seconds", "End-to-end request latency.", &out, label);
  queue_.render("vllm:request_queue_time_seconds", "Time in the queue.", &out, label);
  return out;
}

}  // namespace llama2
