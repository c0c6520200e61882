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
      if (head.tools) r.tool_calls = parse_tool_calls(f.text);  // else the text is content
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
  bool started = false;                   // the role chunk (chat) went out
  bool ended = false;                     // [DONE] went out: nothing to cancel
  int text_bytes = 0;                     // text sent so far (completions' logprobs text_offset)
  std::unique_ptr<ToolCallReader> tools;  // a request with tools: its text read for calls
  AccessRecord* rec = nullptr;            // the connection thread's t_current.rec
  Clock::time_point give_up;
};

std::string HttpFront::Impl::token_chunks(StreamState& st,
                                          const std::vector<HttpExchange::Token>& tokens) const {
  std::string out;
  const bool usage_null = st.include_usage;
  for (const HttpExchange::Token& t : tokens) {
    if (st.tools) {
      const json lp = st.ex->logprobs() ? api_logprobs(st.head.kind, {{t.token, t.logprob, t.top}},
                                                       deps->tokenizer, st.text_bytes)
                                        : json();
      for (const json& c : api_tool_chunks(st.head, st.tools->feed(t.text), usage_null, lp))
        out += sse(c);
    } else if (st.ex->logprobs()) {  // every token, even one whose text is not complete yet
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
    if (st.tools) {
      for (const json& c : api_tool_chunks(st.head, st.tools->finish(), st.include_usage))
        out += sse(c);
      out += sse(api_tool_last_chunk(st.head, *st.tools, f.finish_reason, st.include_usage));
    } else {
      out += sse(api_chunk(st.head, "", false, &f.finish_reason, st.include_usage));
    }
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
  if (head.tools) st->tools = std::make_unique<ToolCallReader>();
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
