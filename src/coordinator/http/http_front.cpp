// The HTTP front on cpp-httplib (compiled only where its header was found; see http_front.h).
#include "coordinator/http/http_front.h"

// A header line may hold 16 KB (cpp-httplib's default: 8 KB), so that an X-Request-Id of 10 KB
// reaches the front and gets its 400 naming the header (http_ops.h) rather than the library's
// unexplained one. (Debian's compiled libcpp-httplib keeps its own limit.)
#define CPPHTTPLIB_HEADER_MAX_LENGTH 16384
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "common/check.h"
#include "coordinator/http/connection_pool.h"
#include "coordinator/http/connection_probe.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/server_api.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How often a waiting connection thread looks at its client and the server's state.
constexpr std::chrono::milliseconds kPollInterval{100};

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(api_error_body(e)), "application/json");
}

std::string sse(const json& j) {
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
thread_local CurrentRequest t_current;

// Ends a generation's line: its tokens and time to the first token.
void record_end(AccessRecord* rec, const Finished& f, const Timings& t) {
  rec->prompt_tokens = f.prompt_tokens;
  rec->completion_tokens = static_cast<int>(f.tokens.size());
  rec->cached_tokens = f.cached_tokens;
  if (!f.tokens.empty()) rec->ttft_s = t.ttft_s;
}

}  // namespace

bool http_front_available() {
  return true;
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
                    const std::shared_ptr<HttpExchange>& ex, const ApiResponseHead& head,
                    Clock::time_point deadline);
  void answer_stream(httplib::Response& res, const std::shared_ptr<HttpExchange>& ex,
                     const ApiResponseHead& head, bool include_usage, Clock::time_point deadline);
  // A stream's content provider, in named parts: one call writes what arrived (SSE chunks), or
  // its end ([DONE]); false ends the stream early.
  struct StreamState;
  bool stream_once(StreamState& st, httplib::DataSink& sink);
  std::string token_chunks(StreamState& st, const std::vector<HttpExchange::Token>& tokens) const;
  // The end a stream gets without the engine's: its deadline passed, or the server's trouble.
  std::optional<HttpExchange::End> interruption(const StreamState& st);
  std::string closing_chunks(const StreamState& st, const HttpExchange::End& end) const;
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

HttpFront::HttpFront(HttpOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

void HttpFront::attach(HttpDeps deps) {
  LLAMA2_CHECK(!impl_->deps);
  impl_->notifier = std::make_unique<ExchangeNotifier>();
  impl_->deps.emplace(std::move(deps));
  impl_->ready.store(true, std::memory_order_release);
}

HttpFront::~HttpFront() {
  stop(0);
}

int HttpFront::port() const {
  return impl_->bound_port;
}

int HttpFront::reload_fd() const {
  return impl_->ops ? impl_->ops->reload_fd() : -1;
}

CurrentRequest& HttpFront::Impl::begin(const httplib::Request& req) {
  CurrentRequest& c = t_current;
  if (c.req == &req) return c;
  c.req = &req;
  c.start = Clock::now();
  c.rec = AccessRecord{};
  c.rec.time = std::chrono::system_clock::now();
  c.rec.method = req.method;
  c.rec.route = req.path;
  // Unknown for a request the library could not read.
  c.rec.client =
      req.remote_addr.empty() ? "-" : req.remote_addr + ":" + std::to_string(req.remote_port);
  const auto it = req.headers.find("X-Request-Id");
  RequestIdChoice id = choose_request_id(it == req.headers.end() ? nullptr : &it->second);
  c.rec.request_id = std::move(id.id);
  c.id_error = std::move(id.error);
  c.refusal.reset();
  if (!id.replaced_because.empty()) {
    ops->note(c.rec.request_id, id.replaced_because + ": replaced by a generated id");
  }
  return c;
}

bool HttpFront::Impl::preflight(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "OPTIONS" || !opts.cors.enabled()) return false;
  const std::string origin = req.get_header_value("Origin");
  if (!cors_allow_origin(opts.cors, origin)) {
    send_error(res,
               api_error(ErrorCode::kInvalidRequest,
                         "CORS: the origin " + quote(origin) + " is not one of --allowed-origins",
                         "Origin"));
    return true;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? "Authorization, Content-Type, X-Request-Id" : asked);
  res.set_header("Access-Control-Max-Age", "600");
  return true;  // Allow-Origin and Vary: after_routing, as on every response
}

void HttpFront::Impl::after_routing(const httplib::Request& req, httplib::Response& res) {
  const CurrentRequest& c = begin(req);  // a request refused before routing (413) starts here
  res.set_header("X-Request-Id", c.rec.request_id);
  if (!opts.cors.enabled()) return;
  res.set_header("Vary", "Origin");
  if (const auto allow = cors_allow_origin(opts.cors, req.get_header_value("Origin"))) {
    res.set_header("Access-Control-Allow-Origin", *allow);
    res.set_header("Access-Control-Expose-Headers", "X-Request-Id");
  }
}

void HttpFront::Impl::log_response(const httplib::Request& req, const httplib::Response& res) {
  CurrentRequest& c = begin(req);
  c.rec.status = res.status;
  c.rec.total_s = std::chrono::duration<double>(Clock::now() - c.start).count();
  ops->finished(std::move(c.rec));
  c.req = nullptr;  // the next request on this thread may reuse the address
}

httplib::Server::HandlerResponse HttpFront::Impl::refuse_early(const httplib::Request& req,
                                                               httplib::Response& res,
                                                               const ApiError& e) {
  const bool body =
      std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > 0 ||
      req.has_header("Transfer-Encoding");
  if (req.method == "POST" && body) {
    t_current.refusal = e;
    return httplib::Server::HandlerResponse::Unhandled;
  }
  send_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpFront::Impl::post(const char* pattern,
                           std::function<void(const httplib::Request&, httplib::Response&)> f) {
  svr.Post(pattern, [f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
    if (t_current.refusal) return send_error(res, *t_current.refusal);
    f(req, res);
  });
}

httplib::Server::HandlerResponse HttpFront::Impl::before_routing(const httplib::Request& req,
                                                                 httplib::Response& res) {
  if (const CurrentRequest& c = begin(req); c.id_error) return refuse_early(req, res, *c.id_error);
  if (ConnectionPool::refusing()) {  // no thread free and the waiting list full
    res.set_header("Connection", "close");
    send_error(res, api_error(ErrorCode::kServerBusy,
                              "every connection thread is busy (--http-threads " +
                                  std::to_string(opts.threads) + "); retry later"));
    return httplib::Server::HandlerResponse::Handled;
  }
  // A browser's preflight carries no key and may come while the model loads.
  if (preflight(req, res)) return httplib::Server::HandlerResponse::Handled;
  if (!ready.load(std::memory_order_acquire)) {  // the model is still loading
    if (req.path == "/health" || req.path == "/ready") {
      res.status =
          probe_status(req.path == "/health" ? Probe::kLiveness : Probe::kReadiness, "starting");
      res.set_content(dump(json{{"status", "starting"}}), "application/json");
    } else if (req.path == "/version") {
      return httplib::Server::HandlerResponse::Unhandled;  // needs nothing of the engine
    } else {
      return refuse_early(req, res,
                          api_error(ErrorCode::kStarting,
                                    "the server is starting (the model is loading); retry when "
                                    "GET /ready answers 200"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }
  // /health, /ready, /version and /metrics stay open (load balancers and Prometheus carry no
  // key), as vLLM does; /tokenize and /detokenize read client text, so they need the key.
  const bool keyed =
      req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
  if (keyed) {
    if (auto refused = ops->check_key(req.get_header_value("Authorization")))
      return refuse_early(req, res, *refused);
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

void HttpFront::Impl::routes() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return before_routing(req, res);
  });
  svr.set_post_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { after_routing(req, res); });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    log_response(req, res);
  });
  post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, ApiKind::kCompletion);
  });
  post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, ApiKind::kChat);
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(api_models(deps->api.served_models, started)), "application/json");
  });
  info_routes();
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(deps->metrics() + ops->status_metrics(), "text/plain; version=0.0.4");
  });
  // Every other error (unknown path 404, wrong method, body over the limit 413, unreadable
  // request 400) in OpenAI's shape; the handlers' own errors already have a body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (t_current.req == &req && t_current.refusal && res.status == 404) {
      send_error(res, *t_current.refusal);  // refuse_early's, on a route that does not exist
      return httplib::Server::HandlerResponse::Handled;
    }
    ApiError e;
    if (res.status == 404) {
      e = api_error(ErrorCode::kNotFound, "");
      e.message = "no route " + req.method + " " + quote(req.path) +
                  " (routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                  "GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /version, "
                  "GET /health, GET /ready, GET /metrics)";
    } else if (res.status == 413) {
      e = api_error(ErrorCode::kBodyTooLarge, "the request body exceeds --http-max-body-bytes (" +
                                                  std::to_string(opts.max_body_bytes) + ")");
    } else {
      // The library's own status (400, 405, ...) stays: the code is the generic one.
      e = api_error(ErrorCode::kInvalidRequest,
                    "the request could not be read (HTTP " + std::to_string(res.status) + ")");
      e.status = res.status;
    }
    res.set_content(dump(api_error_body(e)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
}

void HttpFront::Impl::info_routes() {
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (serves_model(deps->api, id)) {
      return res.set_content(dump(api_model(id, started)), "application/json");
    }
    send_error(res, api_error(ErrorCode::kModelNotFound,
                              "the model " + quote(id) + " does not exist", "model"));
  });
  // Liveness and readiness read the same health state (one owner: serve's health()).
  const auto probe = [this](Probe kind, httplib::Response& res) {
    json h = deps->health();
    h.erase("event");
    res.status = probe_status(kind, h.value("status", "ready"));
    res.set_content(dump(h), "application/json");
  };
  svr.Get("/health", [probe](const httplib::Request&, httplib::Response& res) {
    probe(Probe::kLiveness, res);
  });
  svr.Get("/ready", [probe](const httplib::Request&, httplib::Response& res) {
    probe(Probe::kReadiness, res);
  });
  svr.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(json{{"version", llama2_version()}}), "application/json");
  });
  // On this connection's thread, with rank 0's tokenizer: never the engine thread's work.
  post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_answer(
        res, api_tokenize(req.body, deps->tokenizer, deps->api, deps->limits.prompt.max_tokens()));
  });
  post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_answer(res, api_detokenize(req.body, deps->tokenizer, deps->api));
  });
}

ApiResponseHead HttpFront::Impl::response_head(const ApiRequest& r) const {
  ApiResponseHead head;
  head.kind = r.kind;
  // The request id (X-Request-Id, or generated) as the suffix, as vLLM does: a client's id finds
  // its completion in the access log and the completion's id finds the request.
  head.id = (r.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + t_current.rec.request_id;
  head.created = static_cast<int64_t>(std::time(nullptr));
  head.model = r.model;  // the alias the client gave
  head.system_fingerprint = deps->api.system_fingerprint;
  return head;
}

void HttpFront::Impl::generate(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  Admission& admission = deps->admission;
  const auto refuse = [&](const ApiError& e) {
    admission.count_refusal(e.code);
    send_error(res, e);
  };
  if (auto trouble = server_trouble()) return refuse(*trouble);
  if (deps->inbox.draining()) {
    return refuse(api_error(ErrorCode::kShuttingDown,
                            "the server is shutting down and accepts no new generations"));
  }
  ApiParse parsed = parse_api_request(req.body, kind, deps->api);
  ignored_log.note(parsed.request.ignored, t_current.rec.request_id);
  t_current.rec.model = parsed.request.model;
  if (parsed.error) return refuse(*parsed.error);
  // The request owner's admission, as the socket endpoint applies it: a place in the queue
  // (an HTTP/1.1 connection has one request in flight, so no per-connection limit applies).
  Reservation place = admission.reserve(0);
  if (!place) {
    return send_error(res, api_error(place.refusal()->code, place.refusal()->message));  // counted
  }
  const ApiResponseHead head = response_head(parsed.request);
  // Tokenized here, on this connection's own thread, then the one prompt-length check.
  ParsedRequest& request = parsed.request.request;
  std::optional<Refusal> refusal = prepare_prompt(request, deps->tokenizer, deps->api.config,
                                                  deps->limits.prompt, deps->constraints);
  if (refusal || deps->inbox.draining()) {  // `place` goes back as it is dropped
    if (!refusal) refusal = Refusal{ErrorCode::kShuttingDown, "the server began shutting down"};
    return refuse(api_refusal(*refusal, parsed.request));
  }
  if (parsed.request.max_tokens_key.empty()) {  // no max_tokens: the rest of the context
    request.params.max_new_tokens = api_default_max_tokens(
        static_cast<int>(request.prompt.size()), deps->limits.prompt, deps->api.max_tokens_cap);
  }
  // An HTTP/1.1 connection has one request in flight: the exchange is its own client.
  const auto ex =
      std::make_shared<HttpExchange>(deps->inbox.new_client(), deps->inbox.new_ticket(),
                                     request.params.logprobs, parsed.request.stream, *notifier);
  const Clock::time_point now = Clock::now();
  EngineCommand cmd;
  cmd.kind = EngineCommand::Kind::kGenerate;
  cmd.client = ex->client();
  cmd.ticket = ex->ticket();
  cmd.request = std::move(request);
  cmd.place = std::move(place);
  cmd.deadline = now + std::chrono::milliseconds(deps->limits.request_timeout_ms);
  cmd.sink = ex;
  deps->inbox.post(std::move(cmd));
  // Past the deadline the owner ends the generation itself ("timeout", with its text); only when
  // the engine is inside a stuck step does this thread answer alone, after the same grace as the
  // socket endpoint.
  const Clock::time_point give_up =
      now + std::chrono::milliseconds(deps->limits.request_timeout_ms) + kDeadlineGrace;
  if (parsed.request.stream) {
    answer_stream(res, ex, head, parsed.request.include_usage, give_up);
  } else {
    answer_whole(req, res, ex, head, give_up);
  }
}

void HttpFront::Impl::answer_whole(const httplib::Request& req, httplib::Response& res,
                                   const std::shared_ptr<HttpExchange>& ex,
                                   const ApiResponseHead& head, Clock::time_point give_up) {
  const int fd = connection_fd(req.remote_addr, req.remote_port, req.local_port);
  for (;;) {
    HttpExchange::News news = ex->take(kPollInterval);
    if (news.end) {
      const HttpExchange::End& end = *news.end;
      if (end.error_code) return send_error(res, api_error(*end.error_code, end.error_message));
      const Finished& f = end.finished;
      record_end(&t_current.rec, f, end.timings);
      ApiResult r{f.finish_reason, f.prompt_tokens, static_cast<int>(f.tokens.size()), f.text};
      r.cached_tokens = f.cached_tokens;
      if (ex->logprobs()) {
        std::vector<ApiTokenLogprobs> lp;
        for (size_t i = 0; i < f.logprobs.size() && i < f.tokens.size(); ++i) {
          lp.push_back({f.tokens[i], f.logprobs[i],
                        i < f.top_logprobs.size() ? f.top_logprobs[i] : std::vector<TopLogprob>{}});
        }
        r.logprobs = api_logprobs(head.kind, lp, deps->tokenizer);
      }
      return res.set_content(dump(api_response(head, r)), "application/json");
    }
    if (auto trouble = server_trouble()) return send_error(res, *trouble);
    if (Clock::now() >= give_up) {
      command(EngineCommand::Kind::kExpired, ex);
      return res.set_content(
          dump(api_response(head, ApiResult{FinishReason::kTimeout, 0, 0, "", nullptr})),
          "application/json");
    }
    if (!client_alive(fd)) return command(EngineCommand::Kind::kDisconnect, ex);
  }
}

// One stream's progress, shared by the content provider's calls and its releaser.
struct HttpFront::Impl::StreamState {
  std::shared_ptr<HttpExchange> ex;
  ApiResponseHead head;
  bool include_usage = false;
  bool started = false;         // the role chunk (chat) went out
  AccessRecord* rec = nullptr;  // the connection thread's t_current.rec
  bool ended = false;           // [DONE] went out: nothing to cancel
  int text_bytes = 0;           // text sent so far (completions' logprobs text_offset)
  Clock::time_point give_up;
};

std::string HttpFront::Impl::token_chunks(StreamState& st,
                                          const std::vector<HttpExchange::Token>& tokens) const {
  std::string out;
  const bool usage_null = st.include_usage;
  for (const HttpExchange::Token& t : tokens) {
    if (st.ex->logprobs()) {  // every token, even one whose text is not complete yet
      const json lp =
          api_logprobs(st.head.kind, {{t.token, t.logprob, t.top}}, deps->tokenizer, st.text_bytes);
      out += sse(api_chunk(st.head, t.text, false, nullptr, usage_null, lp));
    } else if (!t.text.empty()) {
      out += sse(api_chunk(st.head, t.text, false, nullptr, usage_null));
    }
    st.text_bytes += static_cast<int>(t.text.size());
  }
  return out;
}

std::optional<HttpExchange::End> HttpFront::Impl::interruption(const StreamState& st) {
  HttpExchange::End end;
  if (Clock::now() >= st.give_up) {
    command(EngineCommand::Kind::kExpired, st.ex);
    end.finished.finish_reason = FinishReason::kTimeout;
    return end;
  }
  const std::optional<ApiError> trouble = server_trouble();
  if (!trouble) return std::nullopt;
  end.error_code = trouble->code;
  end.error_message = trouble->message;
  return end;
}

std::string HttpFront::Impl::closing_chunks(const StreamState& st,
                                            const HttpExchange::End& end) const {
  std::string out;
  if (end.error_code) {
    // Headers (200) are out: the error travels as an event, as OpenAI's streams do.
    out += sse(api_error_body(api_error(*end.error_code, end.error_message)));
  } else {
    const Finished& f = end.finished;
    record_end(st.rec, f, end.timings);
    out += sse(api_chunk(st.head, "", false, &f.finish_reason, st.include_usage));
    if (st.include_usage) {
      out += sse(api_usage_chunk(st.head, f.prompt_tokens, static_cast<int>(f.tokens.size()),
                                 f.cached_tokens));
    }
  }
  return out + "data: [DONE]\n\n";
}

bool HttpFront::Impl::stream_once(StreamState& st, httplib::DataSink& sink) {
  std::string out;
  if (!st.started && st.head.kind == ApiKind::kChat)
    out += sse(api_chunk(st.head, "", true, nullptr, st.include_usage));
  st.started = true;
  HttpExchange::News news = st.ex->take(out.empty() ? kPollInterval : std::chrono::milliseconds(0));
  out += token_chunks(st, news.tokens);
  if (news.overflowed) return false;  // the releaser cancels the generation
  if (!news.end) news.end = interruption(st);
  if (news.end) {
    out += closing_chunks(st, *news.end);
    st.ended = true;
    if (!sink.write(out.data(), out.size())) return false;
    sink.done();
    return true;
  }
  if (!out.empty()) return sink.write(out.data(), out.size());
  return sink.is_writable();  // idle: a client that hung up ends the stream
}

void HttpFront::Impl::answer_stream(httplib::Response& res, const std::shared_ptr<HttpExchange>& ex,
                                    const ApiResponseHead& head, bool include_usage,
                                    Clock::time_point give_up) {
  auto st = std::make_shared<StreamState>();
  st->ex = ex;
  st->head = head;
  st->include_usage = include_usage;
  st->give_up = give_up;
  st->rec = &t_current.rec;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  ++open_streams;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) { return stream_once(*st, sink); },
      [this, st](bool) {
        if (!st->ended) command(EngineCommand::Kind::kDisconnect, st->ex);
        --open_streams;
      });
}

void HttpFront::start() {
  Impl& m = *impl_;
  m.started = static_cast<int64_t>(std::time(nullptr));
  m.ops = std::make_unique<HttpOps>(
      HttpOpsOptions{m.opts.api_key, m.opts.api_key_file, m.opts.access_log, m.opts.cors});
  m.routes();
  m.svr.set_payload_max_length(m.opts.max_body_bytes);
  m.svr.set_tcp_nodelay(true);  // one small write per token: Nagle would hold them back
  const int threads = m.opts.threads, queued = m.opts.queued_connections, nice = m.opts.thread_nice;
  m.svr.new_task_queue = [threads, queued, nice] {
    return new ConnectionPool(threads, queued, nice);
  };
  // The listening socket: SO_REUSEADDR only (cpp-httplib's default adds SO_REUSEPORT, which would
  // let a second server bind the same port silently); its descriptor is kept to raise the backlog.
  m.svr.set_socket_options([&m](socket_t fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    m.listen_fd = fd;
  });
  std::string host = m.opts.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  const bool bound = m.opts.port == 0 ? (m.bound_port = m.svr.bind_to_any_port(host)) > 0
                                      : m.svr.bind_to_port(host, m.opts.port);
  if (!bound) {
    throw Error("--http " + m.opts.host + ":" + std::to_string(m.opts.port) +
                ": cannot listen there (" + std::strerror(errno) +
                "; is the port in use or the host not an address of this machine?)");
  }
  if (m.opts.port != 0) m.bound_port = m.opts.port;
  // cpp-httplib listens with a backlog of 5: a burst of clients connecting at once would see
  // refused or retried SYNs. listen() again on the bound socket only raises the backlog.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, SOMAXCONN);
  m.listener = std::thread([&m] { m.svr.listen_after_bind(); });
}

void HttpFront::stop(int flush_ms) {
  Impl& m = *impl_;
  if (!m.listener.joinable()) return;
  // The drain has ended every generation; their streams may still be writing the last events.
  const auto until = Clock::now() + std::chrono::milliseconds(flush_ms);
  while (m.open_streams > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  m.closing = true;
  m.svr.stop();
  m.listener.join();  // returns once every connection thread has finished
}

}  // namespace llama2
