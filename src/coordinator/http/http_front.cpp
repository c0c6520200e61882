// The HTTP front on cpp-httplib (compiled only where its header was found; see http_front.h):
// routes, generation, streams, start and stop. The operations hooks: http_front_ops.cpp.
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include "common/check.h"
#include "coordinator/http/connection_probe.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/http_front_impl.h"
#include "coordinator/http/tool_api.h"

namespace llama2 {

using nlohmann::json;

namespace {

// How long a request of several sequences waits on one of them before looking at the others.
constexpr std::chrono::milliseconds kSamplesPoll{5};

// A chunk made for one choice (tool_api.h's) given the index of choice `index`.
json with_index(json chunk, int index) {
  for (json& c : chunk["choices"]) c["index"] = index;
  return chunk;
}

}  // namespace

thread_local CurrentRequest t_current;

bool http_front_available() {
  return true;
}

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
  post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    send_answer(
        res, api_tokenize(req.body, deps->tokenizer, deps->api, deps->limits.prompt.max_tokens()));
  });
  svr.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(api_tokenizer_info(deps->tokenizer, deps->limits.prompt.max_tokens())),
                    "application/json");
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
  ignored_log.note(parsed.request.ignored, t_current.rec.request_id);
  t_current.rec.model = parsed.request.model;
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
  record_samples(&t_current.rec, samples);
  std::vector<ApiResult> choices;
  for (const HttpSample& s : samples) choices.push_back(sample_result(s, head, deps->tokenizer));
  res.set_content(dump(api_response(head, choices, samples_usage(samples))), "application/json");
}

// One stream's progress, shared by the content provider's calls and its releaser.
struct HttpFront::Impl::StreamState {
  std::vector<HttpSample> samples;
  ApiResponseHead head;
  bool include_usage = false;
  bool started = false;         // the role chunks (chat) and echoed prompts went out
  bool ended = false;           // [DONE] went out: nothing to cancel
  AccessRecord* rec = nullptr;  // the connection thread's t_current.rec
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
  record_samples(st.rec, st.samples);
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
  st->rec = &t_current.rec;
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
