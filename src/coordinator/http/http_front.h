// `llama2 serve --http HOST:PORT`: the OpenAI-compatible HTTP front on rank 0 (docs/PROTOCOL.md,
// "HTTP"), an endpoint beside the Unix socket on the same request owner. It applies the same
// admission (Admission::reserve, prepare_prompt: tokenizing and the prompt-length check) on its
// own connection threads and posts its generations into the engine inbox (engine_inbox.h), which
// neither endpoint owns; each generation's events come back to its HttpExchange (an EventSink).
// No HTTP library type appears here: the front is built only where cpp-httplib was found at
// configure time (http_front_available()), and `--http` is refused clearly otherwise.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/sampling_params.h"
#include "coordinator/http/access_log.h"
#include "coordinator/http/http_ops.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/requests/admission.h"
#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

class Tokenizer;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;              // 0: any free port (reported by port())
  std::string api_key;       // "": no authentication (loopback only unless allowed)
  std::string api_key_file;  // --api-key-file: more keys, re-read on SIGUSR2 ("" none)
  AccessLogFormat access_log = AccessLogFormat::kOff;  // --access-log
  CorsPolicy cors;                                     // --allowed-origins (default: no CORS)
  size_t max_body_bytes = 4u << 20;                    // a larger body gets 413
  // cpp-httplib keeps a thread per connection for the connection's whole life (keep-alive
  // included), so the pool bounds the concurrent clients: 1024 holds the 512 concurrent streams
  // the issue asks for with room for short requests and idle keep-alive connections.
  int threads = 1024;
  // Accepted connections waiting for a free thread; beyond this they are answered 503
  // server_busy at once by a refusal thread instead of waiting without bound.
  int queued_connections = 256;
  int thread_nice = 0;  // the connection threads' niceness (LLAMA2_HTTP_THREAD_NICE); 0: unchanged
};

// The limits an HTTP generation is checked against (the socket endpoint's too).
struct HttpLimits {
  PromptLimits prompt;                  // prompt + max_new_tokens (the request owner's limits)
  int64_t request_timeout_ms = 600000;  // every HTTP generation's timeout
};

// What the front shares with the rest of serve.
struct HttpDeps {
  EngineInbox& inbox;  // the one inbox; its drain and stall state
  Admission& admission;
  const Tokenizer& tokenizer;
  ApiContext api;
  HttpLimits limits;
  std::function<std::string()> metrics;    // Prometheus text for GET /metrics
  std::function<nlohmann::json()> health;  // the `health` event (docs/PROTOCOL.md)
  // Compiles output constraints (response_format, guided_*) on the connection's thread.
  ConstraintCompiler& constraints;
};

// False when this binary was built without cpp-httplib.
bool http_front_available();

class HttpFront {
 public:
  explicit HttpFront(HttpOptions opts);
  ~HttpFront();
  // Binds HOST:PORT and starts serving; Error naming the address and the reason on failure.
  // Until attach(), every route answers 503: GET /health {"status": "starting"}, the rest the
  // error code "starting". serve binds before the model loads, so that probes see "starting"
  // instead of a refused connection, and a port in use is reported before a long load.
  void start();
  // The engine is up: the routes serve from now on (once; `deps` must outlive stop()).
  void attach(HttpDeps deps);
  int port() const;
  // The write end of the key reload's self-pipe: serve's SIGUSR2 handler writes one byte there
  // (http_ops.h); -1 before start().
  int reload_fd() const;
  // Lets streams write their last events for up to `flush_ms` (the drain has ended every
  // generation), then stops accepting and ends every connection.
  void stop(int flush_ms);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// "127.0.0.1", "::1", "localhost" and the rest of 127.0.0.0/8.
bool is_loopback_host(const std::string& host);
// Constant-time comparison of a presented secret with the configured one: the time depends only
// on the configured key's length, never on where the first difference is.
bool same_secret(const std::string& presented, const std::string& key);

}  // namespace llama2
