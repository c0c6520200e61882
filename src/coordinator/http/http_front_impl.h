// The HTTP front's insides on cpp-httplib, shared by http_front.cpp (routes, generation,
// streams, start and stop) and http_front_ops.cpp (the operations hooks: request ids, keys,
// CORS, the access log). Private: only those two files include it (and so httplib.h).
#pragma once

// A header line may hold 16 KB (cpp-httplib's default: 8 KB), so that an X-Request-Id of 10 KB
// reaches the front and gets its 400 naming the header (http_ops.h) rather than the library's
// unexplained one. (Debian's compiled libcpp-httplib keeps its own limit.) Every file that
// includes httplib.h includes it through here, so that they all see the same value.
#define CPPHTTPLIB_HEADER_MAX_LENGTH 16384
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/http/connection_pool.h"  // includes httplib.h: after the #define above
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/http_front.h"
#include "coordinator/http/http_samples.h"
#include "coordinator/http/server_api.h"

namespace llama2 {

using Clock = std::chrono::steady_clock;

// How often a waiting connection thread looks at its client and the server's state.
inline constexpr std::chrono::milliseconds kPollInterval{100};

inline std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(api_error_body(e)), "application/json");
}

inline std::string sse(const nlohmann::json& j) {
  return "data: " + dump(j) + "\n\n";
}

// The request a connection thread is answering, as its access line will report it. cpp-httplib
// runs a request's pre-routing, handler, content provider (a stream), post-routing and logger
// hooks on one thread, one request at a time: the record lives there from the first hook that
// sees the request to the logger, which hands it to the access log.
struct CurrentRequest {
  const httplib::Request* req = nullptr;
  Clock::time_point start;
  AccessRecord rec;
  std::optional<ApiError> id_error;  // an X-Request-Id too large to be an id: 400
  // A refusal decided before routing for a POST with a body, answered by the route once
  // cpp-httplib has read the body (Impl::refuse_early).
  std::optional<ApiError> refusal;
};
extern thread_local CurrentRequest t_current;

// Ends a generation's line: its samples' tokens (each prompt's once, as usage counts them) and
// the first time to a first token.
inline void record_samples(AccessRecord* rec, const std::vector<HttpSample>& samples) {
  rec->prompt_tokens = rec->completion_tokens = rec->cached_tokens = 0;
  for (const HttpSample& s : samples) {
    if (!s.end || s.end->error_code) continue;
    const Finished& f = s.end->finished;
    rec->completion_tokens += static_cast<int>(f.tokens.size());
    const double ttft = s.end->timings.ttft_s;
    if (!f.tokens.empty() && (rec->ttft_s < 0 || ttft < rec->ttft_s)) rec->ttft_s = ttft;
    if (s.leader_at != s.index) continue;
    rec->prompt_tokens += f.prompt_tokens;
    rec->cached_tokens += f.cached_tokens;
  }
}

struct HttpFront::Impl {
  HttpOptions opts;
  // Set once by attach(), before `ready`; the routes past before_routing() only run once ready.
  std::optional<HttpDeps> deps;
  // Wakes the connection threads of the exchanges that got tokens in a step (the exchanges'
  // SinkFlusher); made by attach().
  std::unique_ptr<ExchangeNotifier> notifier;
  std::atomic<bool> ready{false};
  httplib::Server svr;
  std::thread listener;
  int listen_fd = -1;
  int bound_port = 0;
  // stop() has begun: a generation posted after the engine loop's last look at the inbox would
  // never be answered, so its waiting thread gives up with shutting_down.
  std::atomic<bool> closing{false};
  // Streams whose last event has not been written yet: stop() lets them finish first (cpp-httplib
  // cuts a chunked response short once the server stops).
  std::atomic<int> open_streams{0};
  int64_t started = 0;           // unix seconds, GET /v1/models' `created`
  IgnoredFieldLog ignored_log;   // each ignored request field's name, once per process
  std::unique_ptr<HttpOps> ops;  // request ids, keys, CORS, access log (made by start())

  explicit Impl(HttpOptions o) : opts(std::move(o)) {}

  void routes();
  // GET /v1/models/{id}, /health, /ready, POST /tokenize, /detokenize: beside generation.
  void info_routes();
  void send_answer(httplib::Response& res, const ApiAnswer& a) {
    ignored_log.note(a.ignored, t_current.rec.request_id);
    if (a.error) return send_error(res, *a.error);
    res.set_content(dump(a.body), "application/json");
  }
  httplib::Server::HandlerResponse before_routing(const httplib::Request& req,
                                                  httplib::Response& res);
  // The operations hooks (http_ops.h): the request's record and id from its first hook on; a
  // CORS preflight; every response's X-Request-Id and CORS headers; its access line.
  CurrentRequest& begin(const httplib::Request& req);
  // Answers `e` now, or, for a POST with a body, once the body is read: pre-routing runs before
  // cpp-httplib reads it, and a body left unread would be taken for the connection's next request.
  httplib::Server::HandlerResponse refuse_early(const httplib::Request& req, httplib::Response& res,
                                                const ApiError& e);
  // svr.Post, answering a refusal of refuse_early first.
  void post(const char* pattern,
            std::function<void(const httplib::Request&, httplib::Response&)> f);
  bool preflight(const httplib::Request& req, httplib::Response& res);
  void after_routing(const httplib::Request& req, httplib::Response& res);
  void log_response(const httplib::Request& req, const httplib::Response& res);
  void generate(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  ApiResponseHead response_head(const ApiRequest& r) const;
  void answer_whole(const httplib::Request& req, httplib::Response& res,
                    std::vector<HttpSample> samples, const ApiResponseHead& head,
                    Clock::time_point deadline);
  void answer_stream(httplib::Response& res, std::vector<HttpSample> samples,
                     const ApiResponseHead& head, bool include_usage, Clock::time_point deadline);
  // A stream's content provider, in named parts: one call writes what arrived (SSE chunks), or
  // its end ([DONE]); false ends the stream early.
  struct StreamState;
  bool stream_once(StreamState& st, httplib::DataSink& sink);
  std::string token_chunks(StreamState& st, HttpSample& s,
                           const std::vector<HttpExchange::Token>& tokens) const;
  // The end a stream gets without the engine's: its deadline passed, or the server's trouble.
  std::optional<HttpExchange::End> interruption(StreamState& st);
  std::string closing_chunks(const StreamState& st, const HttpExchange::End& end) const;
  std::string finish_chunks(const StreamState& st, const HttpSample& s, FinishReason reason) const;
  // Ends the posted, unfinished samples' generations (kExpired or kDisconnect).
  void end_all(EngineCommand::Kind kind, const std::vector<HttpSample>& samples) {
    for (const HttpSample& s : samples)
      if (s.posted() && !s.end) command(kind, s.ex);
  }
  // kExpired (the exchange's generation) or kDisconnect (its connection).
  void command(EngineCommand::Kind kind, const std::shared_ptr<HttpExchange>& ex) {
    EngineCommand cmd;
    cmd.kind = kind;
    cmd.client = ex->client();
    cmd.ticket = ex->ticket();
    deps->inbox.post(std::move(cmd));
  }
  // The error an unfinished generation gets from the server's state, if any.
  std::optional<ApiError> server_trouble() const {
    if (deps->inbox.stalled()) {
      return api_error(ErrorCode::kStalled,
                       "the engine stalled; the server is ending (see its log)");
    }
    if (closing) {
      return api_error(ErrorCode::kShuttingDown,
                       "the server shut down before this generation finished");
    }
    return std::nullopt;
  }
};

}  // namespace llama2
