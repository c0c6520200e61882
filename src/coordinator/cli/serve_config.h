// `serve`'s configuration as one typed value (everything but the engine, which is EngineConfig):
// its flags, every default in one place (ServeConfig's members, which the flags' help shows), read,
// checked and resolved once on rank 0 before the engine opens (a bad value stops the job before
// any weight is loaded).
#pragma once

#include <chrono>
#include <cstdint>
#include <cxxopts.hpp>

#include "common/sampling_params.h"
#include "coordinator/cli/serve_http.h"
#include "coordinator/cli/session.h"
#include "coordinator/serving/socket_server.h"

namespace llama2 {

struct ServeConfig {
  ServerOptions server;  // socket path, request timeout, the prompts' byte bound, tokenizer threads
  int max_queue = 256;   // generations waiting for admission before queue_full
  // Unfinished generations per connection before too_many_in_flight; 0 until resolved: half the
  // batch slots (at least 1), so a connection that pipelines without reading leaves the rest.
  int max_inflight = 0;
  int max_seq_len = 0;  // --max-seq-len, resolved: the model's max_position_embeddings by default
  int64_t shutdown_timeout_ms = 30000;  // how long in-flight requests may finish after SIGTERM
  std::chrono::milliseconds step_timeout{60000};  // a longer step is stalled (0: never)
  SamplingParams defaults;                        // the sampling flags
  bool quiet = false;
  HttpSettings http;  // --http and its companions (serve_http.h)
};

// The command's flags, with ServeConfig's defaults.
cxxopts::Options serve_options();

// Rank 0, before the engine opens (the model config and tokenizer loaded): every serve flag read,
// checked (Error naming the flag and its allowed values) and resolved. The engine's flags are in
// start.cfg.
ServeConfig serve_config(const cxxopts::ParseResult& args, SessionStart& start);

}  // namespace llama2
