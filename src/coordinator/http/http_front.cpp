// The HTTP front on cpp-httplib (compiled only where its header was found; see http_front.h).
#include "coordinator/http/http_front.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include "common/check.h"
#include "coordinator/http/connection_pool.h"
#include "coordinator/http/connection_probe.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/http_samples.h"
#include "coordinator/http/server_api.h"
#include "coordinator/http/tool_api.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How often a waiting connection thread looks at its client and the server's state.
constexpr std::chrono::milliseconds kPollInterval{100};
// How long a request of several sequences waits on one of them before looking at the others.
constexpr std::chrono::milliseconds kSamplesPoll{5};

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(api_error_body(e)), "application/json");
}

// A chunk made for one choice (tool_api.h's) given the index of choice `index`.
json with_index(json chunk, int index) {
  for (json& c : chunk["choices"]) c["index"] = index;
  return chunk;
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

std::string random_hex() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 gen(std::random_device{}());
  char b[40];
  std::snprintf(b, sizeof(b), "%016llx%08llx", static_cast<unsigned long long>(gen()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffffffu));
  return b;
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
  int64_t started = 0;          // unix seconds, GET /v1/models' `created`
  IgnoredFieldLog ignored_log;  // each ignored request field's name, once per process

  explicit Impl(HttpOptions o) : opts(std::move(o)) {}

  void routes();
  // GET /v1/models/{id}, /health, /ready, POST /tokenize, /detokenize: beside generation.
  void info_routes();
  void send_answer(httplib::Response& res, const ApiAnswer& a) {
    ignored_log.note(a.ignored);
    if (a.error) return send_error(res, *a.error);
    res.set_content(dump(a.body), "application/json");
  }
  httplib::Server::HandlerResponse before_routing(const httplib::Request& req,
                                                  httplib::Response& res);
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

httplib::Server::HandlerResponse HttpFront::Impl::before_routing(const httplib::Request& req,
                                                                 httplib::Response& res) {
  if (ConnectionPool::refusing()) {  // no thread free and the waiting list full
    res.set_header("Connection", "close");
    send_error(res, api_error(ErrorCode::kServerBusy,
                              "every connection thread is busy (--http-threads " +
                                  std::to_string(opts.threads) + "); retry later"));
    return httplib::Server::HandlerResponse::Handled;
  }
  if (!ready.load(std::memory_order_acquire)) {  // the model is still loading
    if (req.path == "/health" || req.path == "/ready") {
      res.status =
          probe_status(req.path == "/health" ? Probe::kLiveness : Probe::kReadiness, "starting");
      res.set_content(dump(json{{"status", "starting"}}), "application/json");
    } else if (req.path == "/version") {
      return httplib::Server::HandlerResponse::Unhandled;  // needs nothing of the engine
    } else {
      send_error(res, api_error(ErrorCode::kStarting,
                                "the server is starting (the model is loading); retry when GET "
                                "/ready answers 200"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }
  // /health, /ready, /version and /metrics stay open (load balancers and Prometheus carry no
  // key), as vLLM does; /tokenize and /detokenize read client text, so they need the key.
  const bool keyed =
      req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
  if (!opts.api_key.empty() && keyed) {
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool ok =
        auth.rfind(prefix, 0) == 0 && same_secret(auth.substr(prefix.size()), opts.api_key);
    if (!ok) {
      send_error(res, api_error(ErrorCode::kInvalidApiKey,
                                auth.empty() ? "missing \"Authorization: Bearer <key>\" header"
                                             : "invalid API key"));
      return httplib::Server::HandlerResponse::Handled;
    }
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

void HttpFront::Impl::routes() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return before_routing(req, res);
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, ApiKind::kCompletion);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, ApiKind::kChat);
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(api_models(deps->api.served_models, started)), "application/json");
  });
  info_routes();
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(deps->metrics(), "text/plain; version=0.0.4");
  });
  // Every other error (unknown path 404, wrong method, body over the limit 413, unreadable
  // request 400) in OpenAI's shape; the handlers' own errors already have a body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    if (res.status == 404) {
      e = api_error(ErrorCode::kNotFound, "");
      e.message = "no route " + req.method + " " + quote(req.path) +
                  " (routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                  "GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /tokenizer_info, "
                  "GET /version, "
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
  svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_answer(
        res, api_tokenize(req.body, deps->tokenizer, deps->api, deps->limits.prompt.max_tokens()));
  });
  svr.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(api_tokenizer_info(deps->tokenizer, deps->limits.prompt.max_tokens())),
                    "application/json");
  });
  svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_answer(res, api_detokenize(req.body, deps->tokenizer, deps->api));
  });
}

ApiResponseHead HttpFront::Impl::response_head(const ApiRequest& r) const {
  ApiResponseHead head;
  head.kind = r.kind;
  head.id = (r.kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex();
  head.created = static_cast<int64_t>(std::time(nullptr));
  head.model = r.model;  // the alias the client gave
  head.system_fingerprint = deps->api.system_fingerprint;
  head.tools = r.request.tools != nullptr;
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
  ignored_log.note(parsed.request.ignored);
  if (parsed.error) return refuse(*parsed.error);
  // The request owner's admission, as the socket endpoint applies it: a place in the queue for
  // every sequence (prompts x n), or none (an HTTP/1.1 connection has one request in flight, so
  // no per-connection limit applies).
  ApiRequest& api = parsed.request;
  const size_t total = (1 + api.more_prompts.size()) * static_cast<size_t>(api.n);
  std::vector<Reservation> places;
  for (size_t i = 0; i < total; ++i) {
    places.push_back(admission.reserve(0));
    const Reservation& place = places.back();
    if (!place) return send_error(res, api_error(place.refusal()->code, place.refusal()->message));
  }
  const ApiResponseHead head = response_head(api);
  std::vector<HttpSample> samples;
  if (auto e = make_samples(api, places, *deps, *notifier, &samples)) return refuse(*e);
  post_ready(samples, deps->inbox);  // the leaders; each follower once its leader has news
  // Past the deadline the owner ends the generation itself ("timeout", with its text); only when
  // the engine is inside a stuck step does this thread answer alone, after the same grace as the
  // socket endpoint.
  const Clock::time_point give_up =
      Clock::now() + std::chrono::milliseconds(deps->limits.request_timeout_ms) + kDeadlineGrace;
  if (api.stream) {
    answer_stream(res, std::move(samples), head, api.include_usage, give_up);
  } else {
    answer_whole(req, res, std::move(samples), head, give_up);
  }
}

void HttpFront::Impl::answer_whole(const httplib::Request& req, httplib::Response& res,
                                   std::vector<HttpSample> samples, const ApiResponseHead& head,
                                   Clock::time_point give_up) {
  const int fd = connection_fd(req.remote_addr, req.remote_port, req.local_port);
  // One sample waits on its own mailbox; several poll theirs in turn.
  const auto wait = samples.size() == 1 ? kPollInterval : kSamplesPoll;
  for (;;) {
    take_news(samples, wait, [](HttpSample&, const HttpExchange::News&) {});
    post_ready(samples, deps->inbox);
    if (all_ended(samples)) break;
    if (auto trouble = server_trouble()) return send_error(res, *trouble);
    if (Clock::now() >= give_up) {
      end_all(EngineCommand::Kind::kExpired, samples);
      std::vector<ApiResult> timed_out;
      for (const HttpSample& s : samples) {
        timed_out.push_back(ApiResult{FinishReason::kTimeout, 0, 0, "", nullptr});
        timed_out.back().index = s.index;
      }
      return res.set_content(dump(api_response(head, timed_out, api_usage(0, 0, 0))),
                             "application/json");
    }
    if (!client_alive(fd)) return end_all(EngineCommand::Kind::kDisconnect, samples);
  }
  if (const HttpSample* f = failed_sample(samples))
    return send_error(res, api_error(*f->end->error_code, f->end->error_message));
  std::vector<ApiResult> choices;
  for (const HttpSample& s : samples) choices.push_back(sample_result(s, head, deps->tokenizer));
  res.set_content(dump(api_response(head, choices, samples_usage(samples))), "application/json");
}

// One stream's progress, shared by the content provider's calls and its releaser.
struct HttpFront::Impl::StreamState {
  std::vector<HttpSample> samples;
  ApiResponseHead head;
  bool include_usage = false;
  bool started = false;  // the role chunks (chat) and echoed prompts went out
  bool ended = false;    // [DONE] went out: nothing to cancel
  Clock::time_point give_up;
};

std::string HttpFront::Impl::token_chunks(StreamState& st, HttpSample& s,
                                          const std::vector<HttpExchange::Token>& tokens) const {
  std::string out;
  const bool usage_null = st.include_usage;
  for (const HttpExchange::Token& t : tokens) {
    if (s.tools) {
      const json lp = s.ex->logprobs() ? api_logprobs(st.head.kind, {{t.token, t.logprob, t.top}},
                                                      deps->tokenizer, s.text_bytes)
                                       : json();
      for (json c : api_tool_chunks(st.head, s.tools->feed(t.text), usage_null, lp))
        out += sse(with_index(std::move(c), s.index));
    } else if (s.ex->logprobs()) {  // every token, even one whose text is not complete yet
      const json lp =
          api_logprobs(st.head.kind, {{t.token, t.logprob, t.top}}, deps->tokenizer, s.text_bytes);
      out += sse(api_chunk(st.head, t.text, false, nullptr, usage_null, lp, s.index));
    } else if (!t.text.empty()) {
      out += sse(api_chunk(st.head, t.text, false, nullptr, usage_null, nullptr, s.index));
    }
    s.text_bytes += static_cast<int>(t.text.size());
  }
  return out;
}

std::optional<HttpExchange::End> HttpFront::Impl::interruption(StreamState& st) {
  HttpExchange::End end;
  if (Clock::now() >= st.give_up) {
    end_all(EngineCommand::Kind::kExpired, st.samples);
    end.finished.finish_reason = FinishReason::kTimeout;
    return end;
  }
  const std::optional<ApiError> trouble = server_trouble();
  if (!trouble) return std::nullopt;
  end.error_code = trouble->code;
  end.error_message = trouble->message;
  return end;
}

// A choice's last chunk(s): its finish_reason (with tools: the calls' last parts first).
std::string HttpFront::Impl::finish_chunks(const StreamState& st, const HttpSample& s,
                                           FinishReason reason) const {
  if (!s.tools) {
    return sse(api_chunk(st.head, "", false, &reason, st.include_usage, nullptr, s.index));
  }
  std::string out;
  for (json c : api_tool_chunks(st.head, s.tools->finish(), st.include_usage))
    out += sse(with_index(std::move(c), s.index));
  return out +
         sse(with_index(api_tool_last_chunk(st.head, *s.tools, reason, st.include_usage), s.index));
}

// The stream's end: an error event, or each unfinished choice's finish chunk (a timeout) and the
// usage chunk; then [DONE].
std::string HttpFront::Impl::closing_chunks(const StreamState& st,
                                            const HttpExchange::End& end) const {
  std::string out;
  if (end.error_code) {
    // Headers (200) are out: the error travels as an event, as OpenAI's streams do.
    out += sse(api_error_body(api_error(*end.error_code, end.error_message)));
    return out + "data: [DONE]\n\n";
  }
  for (const HttpSample& s : st.samples) {
    if (!s.end) out += finish_chunks(st, s, end.finished.finish_reason);  // the others' went out
  }
  if (st.include_usage) {
    json chunk = api_usage_chunk(st.head, 0, 0, 0);
    chunk["usage"] = samples_usage(st.samples);
    out += sse(chunk);
  }
  return out + "data: [DONE]\n\n";
}

bool HttpFront::Impl::stream_once(StreamState& st, httplib::DataSink& sink) {
  std::string out;
  if (!st.started) {
    for (HttpSample& s : st.samples) {
      if (st.head.kind == ApiKind::kChat)
        out += sse(api_chunk(st.head, "", true, nullptr, st.include_usage, nullptr, s.index));
      if (!s.scoring.echo) continue;
      out += sse(api_chunk(st.head, s.scoring.echo_text, false, nullptr, st.include_usage, nullptr,
                           s.index));
      s.text_bytes += static_cast<int>(s.scoring.echo_text.size());
    }
  }
  st.started = true;
  bool overflowed = false;
  std::optional<HttpExchange::End> failure;
  const auto wait = !out.empty()             ? std::chrono::milliseconds(0)
                    : st.samples.size() == 1 ? kPollInterval
                                             : kSamplesPoll;
  take_news(st.samples, wait, [&](HttpSample& s, const HttpExchange::News& news) {
    out += token_chunks(st, s, news.tokens);
    overflowed = overflowed || news.overflowed;
    if (!news.end) return;
    if (news.end->error_code) {
      if (!failure) failure = news.end;
      return;
    }
    out += finish_chunks(st, s, news.end->finished.finish_reason);
  });
  if (overflowed) return false;  // the releaser cancels the generations
  post_ready(st.samples, deps->inbox);
  std::optional<HttpExchange::End> end = failure;
  if (!end && all_ended(st.samples)) end = HttpExchange::End{};
  if (!end) end = interruption(st);
  if (end) {
    if (end->error_code) end_all(EngineCommand::Kind::kDisconnect, st.samples);
    out += closing_chunks(st, *end);
    st.ended = true;
    if (!sink.write(out.data(), out.size())) return false;
    sink.done();
    return true;
  }
  if (!out.empty()) return sink.write(out.data(), out.size());
  return sink.is_writable();  // idle: a client that hung up ends the stream
}

void HttpFront::Impl::answer_stream(httplib::Response& res, std::vector<HttpSample> samples,
                                    const ApiResponseHead& head, bool include_usage,
                                    Clock::time_point give_up) {
  auto st = std::make_shared<StreamState>();
  st->samples = std::move(samples);
  st->head = head;
  st->include_usage = include_usage;
  st->give_up = give_up;
  if (head.tools) {
    for (HttpSample& s : st->samples) s.tools = std::make_shared<ToolCallReader>();
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  ++open_streams;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) { return stream_once(*st, sink); },
      [this, st](bool) {
        if (!st->ended) end_all(EngineCommand::Kind::kDisconnect, st->samples);
        --open_streams;
      });
}

void HttpFront::start() {
  Impl& m = *impl_;
  m.started = static_cast<int64_t>(std::time(nullptr));
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
