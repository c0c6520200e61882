#include "coordinator/cli/serve_config.h"

#include <algorithm>
#include <string>

#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/serving/token_bound.h"

namespace llama2 {
namespace {

template <typename T>
std::string shown(T v) {
  return std::to_string(v);
}

void add_serve_flags(cxxopts::Options& opts) {
  const ServeConfig d;
  opts.add_options()("socket", "Unix socket path (created 0600)", cxxopts::value<std::string>())(
      "max-batch-size", "Sequences decoded together per step",
      cxxopts::value<int>()->default_value(shown(kServeSteps.max_batch)))(
      "max-queue", "Generations waiting for admission before queue_full",
      cxxopts::value<int>()->default_value(shown(d.max_queue)))(
      "max-inflight-per-connection",
      "Unfinished generations one connection may have before too_many_in_flight (default: half "
      "of --max-batch-size, at least 1)",
      cxxopts::value<int>())(
      "max-seq-len", "Prompt + max_new_tokens limit (default: the model's max_position_embeddings)",
      cxxopts::value<int>())("kv-cache-blocks",
                             "KV blocks (default: cuda, what --gpu-memory-fraction leaves; cpu, "
                             "max-batch-size full-length sequences)",
                             cxxopts::value<int>())(
      "prefill-chunk", "Prompt tokens per step across sequences",
      cxxopts::value<int>()->default_value(shown(kServeSteps.prefill_chunk)))(
      "request-timeout-ms", "Default and maximum per-request timeout",
      cxxopts::value<int64_t>()->default_value(shown(d.server.request_timeout_ms)))(
      "shutdown-timeout-ms", "How long in-flight requests may finish after SIGTERM",
      cxxopts::value<int64_t>()->default_value(shown(d.shutdown_timeout_ms)))(
      "step-timeout-ms",
      "A step running longer than this is stalled: every client gets an internal error and the "
      "job exits with code 3 (0: never)",
      cxxopts::value<int64_t>()->default_value(shown(d.step_timeout.count())))(
      "dedicated-front",
      "World rank 0 runs only the front (socket, queue, dispatch), no engine: the replicas "
      "(--tp) are made of ranks 1..N-1. For large data-parallel jobs");
}

void at_least(int64_t v, int64_t lo, const char* flag) {
  if (v < lo) {
    throw Error(std::string(flag) + " must be >= " + std::to_string(lo) + " (got " +
                std::to_string(v) + ")");
  }
}

// --max-seq-len, or the model's max_position_embeddings; Error outside [2, that].
int max_seq_len_of(const cxxopts::ParseResult& args, const ModelConfig& config) {
  const int n =
      args.count("max-seq-len") ? args["max-seq-len"].as<int>() : config.max_position_embeddings;
  if (n < 2 || n > config.max_position_embeddings) {
    throw Error("--max-seq-len must be in [2, " + std::to_string(config.max_position_embeddings) +
                "] (max_position_embeddings) (got " + std::to_string(n) + ")");
  }
  return n;
}

}  // namespace

cxxopts::Options serve_options() {
  cxxopts::Options opts("llama2 serve",
                        "Serve generations on a Unix socket (protocol: docs/PROTOCOL.md) with "
                        "continuous batching. SIGTERM/SIGINT drain in-flight requests and exit 0.");
  add_serve_flags(opts);
  add_engine_options(opts);
  add_prefix_caching_options(opts);
  add_deterministic_option(opts);
  add_replica_options(opts);
  add_sampling_options(opts);
  add_speculative_options(opts);
  add_generation_config_option(opts);
  add_http_options(opts);
  return opts;
}

ServeConfig serve_config(const cxxopts::ParseResult& args, SessionStart& start) {
  ServeConfig c;
  c.server.socket_path = args["socket"].as<std::string>();
  c.server.request_timeout_ms = args["request-timeout-ms"].as<int64_t>();
  c.max_queue = args["max-queue"].as<int>();
  c.max_inflight = args.count("max-inflight-per-connection")
                       ? args["max-inflight-per-connection"].as<int>()
                       : std::max(1, start.cfg.max_batch / 2);
  c.shutdown_timeout_ms = args["shutdown-timeout-ms"].as<int64_t>();
  c.step_timeout = std::chrono::milliseconds(args["step-timeout-ms"].as<int64_t>());
  c.defaults = sampling_from_options(args);
  c.quiet = args.count("quiet") > 0;
  c.http = http_settings_from(args);
  at_least(c.max_queue, 0, "--max-queue");
  at_least(c.max_inflight, 1, "--max-inflight-per-connection");
  at_least(c.server.request_timeout_ms, 1, "--request-timeout-ms");
  at_least(c.shutdown_timeout_ms, 0, "--shutdown-timeout-ms");
  at_least(c.step_timeout.count(), 0, "--step-timeout-ms");
  validate_http_settings(c.http);
  apply_generation_config(args, &start, &c.defaults);
  check_sampling_defaults(c.defaults, start.model);
  c.max_seq_len = max_seq_len_of(args, start.model);
  // The byte-length bound of text prompts (token_bound.h) comes from the tokenizer, loaded now.
  LLAMA2_CHECK(start.tokenizer != nullptr);
  c.server.max_piece_bytes =
      max_piece_bytes_for_bound(start.cfg.model_dir + "/tokenizer.model", *start.tokenizer);
  return c;
}

}  // namespace llama2
