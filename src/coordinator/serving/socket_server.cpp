#include "coordinator/serving/socket_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/check.h"
#include "common/frame.h"
#include "coordinator/serving/protocol.h"
#include "coordinator/serving/socket_generation.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
// A client that stops reading is cut off rather than growing rank 0's memory without bound.
constexpr size_t kMaxOutboxBytes = 64u << 20;

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

sockaddr_un make_addr(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    throw Error("--socket path must be 1.." + std::to_string(sizeof(addr.sun_path) - 1) +
                " bytes (got " + std::to_string(path.size()) + ")");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}
}  // namespace

// What the I/O thread knows of a generation it handed to the engine, enough to answer it alone.
struct InFlight {
  uint64_t serial = 0;
  Clock::time_point arrival, deadline;
  bool stream = true;
  size_t prompt_tokens = 0;
  int tokens_sent = 0;  // token events queued for the client
  std::optional<uint64_t> seed;
};

struct SocketServer::Conn {
  uint64_t id = 0;
  int fd = -1;
  FrameDecoder decoder;
  std::string outbox;
  std::map<std::string, InFlight> inflight;  // by request id: generations not finished yet
  // Of those, the ids whose prompt a tokenizer worker holds, and whether a cancel came meanwhile
  // (it is passed on once the engine knows the generation).
  std::map<std::string, bool> tokenizing;
  bool close_after_flush = false;
};

SocketServer::SocketServer(ServerOptions opts, EngineInbox& inbox, Admission& admission,
                           const Tokenizer& tok, ConstraintCompiler& constraints,
                           const ModelConfig& config, SamplingParams defaults,
                           std::function<json()> health, std::function<std::string()> stats)
    : opts_(std::move(opts)),
      inbox_(inbox),
      admission_(admission),
      tok_(tok),
      constraints_(constraints),
      config_(config),
      defaults_(std::move(defaults)),
      health_(std::move(health)),
      stats_(std::move(stats)) {
  // Draining stops accepting at once; a stall accepts again (for health).
  inbox_.on_state_change([this] { wake(); });
}

SocketServer::~SocketServer() {
  stop(0);
}

void SocketServer::start() {
  const sockaddr_un addr = make_addr(opts_.socket_path);
  struct stat st {};
  if (::lstat(opts_.socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw Error("--socket " + opts_.socket_path +
                  " exists and is not a socket; refusing to replace it");
    }
    // A socket file nobody listens on is what a killed server leaves behind: reuse the path.
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(probe);
    if (live) throw Error("--socket " + opts_.socket_path + ": another server is listening there");
    ::unlink(opts_.socket_path.c_str());
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw Error(std::string("socket(): ") + std::strerror(errno));
  // umask makes the file 0600 from the moment it exists: no window where others could connect.
  const mode_t old_mask = ::umask(0177);
  const int rc = ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old_mask);
  if (rc != 0) {
    throw Error("--socket " + opts_.socket_path + ": bind failed: " + std::strerror(bind_errno));
  }
  // SOMAXCONN (the kernel caps it at net.core.somaxconn): a burst of clients connecting at once
  // queues in the backlog instead of being refused.
  if (::listen(listen_fd_, SOMAXCONN) != 0)
    throw Error(std::string("listen(): ") + std::strerror(errno));
  set_nonblocking(listen_fd_);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw Error(std::string("eventfd(): ") + std::strerror(errno));
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (spare_fd_ < 0) throw Error(std::string("open(/dev/null): ") + std::strerror(errno));
  tokenizers_.start(opts_.tokenizer_threads);
  io_ = std::thread([this] { io_loop(); });
}

void SocketServer::wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void SocketServer::stop(int flush_ms) {
  if (!io_.joinable()) return;
  // Give the I/O thread a moment to deliver the last events (done / shutting_down).
  const auto until = Clock::now() + std::chrono::milliseconds(flush_ms);
  while (Clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool pending = false;
      for (const auto& kv : conns_) pending = pending || !kv.second->outbox.empty();
      if (!pending) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop_ = true;
  wake();
  io_.join();
  tokenizers_.stop();
  for (auto& kv : conns_) ::close(kv.second->fd);
  conns_.clear();
  ::close(listen_fd_);
  ::close(wake_fd_);
  ::close(spare_fd_);
  listen_fd_ = wake_fd_ = spare_fd_ = -1;
  ::unlink(opts_.socket_path.c_str());
}

void SocketServer::flush(std::vector<std::shared_ptr<EventSink>>& touched) {
  touched.clear();
  wake();
}

void SocketServer::send(uint64_t conn, const json& event, const std::string& id, uint64_t serial,
                        bool final) {
  send_quiet(conn, event.dump(-1, ' ', false, json::error_handler_t::replace), id, serial, final);
  wake();
}

void SocketServer::send_quiet(uint64_t conn, std::string payload, const std::string& id,
                              uint64_t serial, bool final) {
  const std::string frame = event_frame(payload, id);  // never throws; an oversized event
                                                       // becomes an internal error for `id`
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;  // the client left; its generations are being cancelled
  Conn& c = *it->second;
  // Already answered by the I/O thread (deadline, fail_all): the client may even have reused the
  // id for a new generation, which the serial tells apart.
  const auto f = c.inflight.find(id);
  if (f == c.inflight.end() || f->second.serial != serial) return;
  if (final) {
    c.inflight.erase(f);
  } else {
    ++f->second.tokens_sent;
  }
  if (c.outbox.size() + frame.size() > kMaxOutboxBytes) {
    c.close_after_flush = true;  // a client that does not read: stop feeding it
    return;
  }
  c.outbox += frame;
}

std::string SocketServer::token_event(const std::string& id_json, int index, int token,
                                      const std::string& piece, const TokenEvent* logprobs) {
  // Keys in the order nlohmann's (sorted) objects dump them; the piece escaped by the library.
  std::string out = "{\"event\":\"token\",\"id\":";
  out += id_json;
  out += ",\"index\":";
  out += std::to_string(index);
  if (logprobs != nullptr) {  // rare: built by the library, the same bytes as the dumped object
    out += ",\"logprob\":";
    out += float_as_json(logprobs->logprob).dump();
  }
  out += ",\"text\":";
  out += json(piece).dump(-1, ' ', false, json::error_handler_t::replace);
  out += ",\"token_id\":";
  out += std::to_string(token);
  if (logprobs != nullptr) {
    out += ",\"top_logprobs\":";
    out += top_logprobs_json(logprobs->top_logprobs).dump();
  }
  out += '}';
  return out;
}

void SocketServer::fail_all(ErrorCode code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.set_stalled();
    for (auto& [cid, c] : conns_) {
      for (const auto& [id, f] : c->inflight) error(*c, id, code, message);
      c->inflight.clear();
      c->tokenizing.clear();  // their jobs find no generation when they come back
    }
  }
  wake();
}

void SocketServer::remove_socket_file() {
  ::unlink(opts_.socket_path.c_str());
}

uint64_t SocketServer::track(Conn& c, const FrameRequest& r, Clock::time_point arrival) {
  InFlight f;
  f.serial = inbox_.new_ticket();
  f.arrival = arrival;
  f.deadline = arrival + std::chrono::milliseconds(r.timeout_ms);
  f.stream = r.stream;
  f.prompt_tokens = r.request.prompt.size();  // a text prompt: set once it is tokenized
  f.seed = r.request.params.seed;
  next_expiry_ = std::min(next_expiry_, f.deadline + kDeadlineGrace);
  c.inflight[r.id] = f;
  return f.serial;
}

void SocketServer::expire_overdue(Clock::time_point now) {
  if (now < next_expiry_) return;
  next_expiry_ = Clock::time_point::max();
  for (auto& [cid, c] : conns_) {
    for (auto it = c->inflight.begin(); it != c->inflight.end();) {
      const InFlight& f = it->second;
      if (f.deadline + kDeadlineGrace > now) {
        next_expiry_ = std::min(next_expiry_, f.deadline + kDeadlineGrace);
        ++it;
        continue;
      }
      // What the client has seen is all this thread can report: the tokens it sent, and (for a
      // non-streamed generation, whose text is with the engine) no text.
      json done{
          {"event", "done"},
          {"id", it->first},
          {"finish_reason", to_string(FinishReason::kTimeout)},
          {"usage", {{"prompt_tokens", f.prompt_tokens}, {"completion_tokens", f.tokens_sent}}},
          {"timings", {{"total_s", std::chrono::duration<double>(now - f.arrival).count()}}}};
      if (f.seed) done["seed"] = *f.seed;
      if (!f.stream) {
        done["text"] = "";
        done["token_ids"] = json::array();
      }
      reply(*c, done);
      if (c->tokenizing.erase(it->first) == 0) {  // else the engine has not heard of it yet
        EngineCommand cmd;
        cmd.kind = EngineCommand::Kind::kExpired;
        cmd.ticket = f.serial;
        inbox_.post(std::move(cmd));
      }
      it = c->inflight.erase(it);
    }
  }
}

int SocketServer::poll_timeout_ms(Clock::time_point now) const {
  if (next_expiry_ == Clock::time_point::max()) return 1000;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_expiry_ - now).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

void SocketServer::reply(Conn& c, const json& event) {
  c.outbox += event_frame(event);
}

void SocketServer::error(Conn& c, const json& id, ErrorCode code, const std::string& msg) {
  reply(c, error_event(id, code, msg));
}

ServeLimits SocketServer::limits() const {
  ServeLimits l;
  l.prompt = admission_.options().limits;
  l.request_timeout_ms = opts_.request_timeout_ms;
  l.max_piece_bytes = opts_.max_piece_bytes;
  return l;
}

bool SocketServer::refuse_one_connection(int accept_errno) {
  // Without a free descriptor a pending connection can be neither accepted nor refused: it would
  // wait in the backlog while poll() reports the listening socket readable again at once (a
  // spin). The spare descriptor makes room to accept it, say why, and close it.
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    const int accept_error = errno;
    if (fd >= 0) {
      const std::string frame =
          event_frame(error_event(nullptr, ErrorCode::kTooManyConnections,
                                  std::string("the server cannot take another connection now (") +
                                      std::strerror(accept_errno) + "); retry later"));
      [[maybe_unused]] ssize_t n =
          ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (spare_fd_ >= 0 && fd >= 0) return true;  // refused one; there may be more
    if (spare_fd_ >= 0 && (accept_error == EAGAIN || accept_error == EWOULDBLOCK)) return false;
  }
  // No spare (the descriptor went elsewhere) or the accept failed: stop polling the listening
  // socket for a moment instead of spinning on it.
  accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
  return false;
}

void SocketServer::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if ((e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) && refuse_one_connection(e))
        continue;
      return;  // EAGAIN: no more pending connections
    }
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    std::lock_guard<std::mutex> lock(mu_);
    c->id = inbox_.new_client();
    conns_[c->id] = std::move(c);
  }
}

void SocketServer::close_conn(uint64_t id) {
  // mu_ held by the caller. The engine cancels whatever this connection still had running.
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  ::close(it->second->fd);
  if (!it->second->inflight.empty()) {
    EngineCommand cmd;
    cmd.kind = EngineCommand::Kind::kDisconnect;
    cmd.client = id;
    inbox_.post(std::move(cmd));
  }
  conns_.erase(it);
}

void SocketServer::handle_frame(Conn& c, const std::string& payload) {
  try {
    FrameRequest r = decode_request(payload, defaults_, config_, limits());
    switch (r.op) {
      case FrameRequest::Op::kError:
        admission_.count_refusal(r.error_code);
        return reply(c, r.error);
      case FrameRequest::Op::kGenerate:
        return handle_generate(c, std::move(r));
      case FrameRequest::Op::kCancel:
        return handle_cancel(c, r.id);
      case FrameRequest::Op::kHealth:
        return reply(c, health_());
      case FrameRequest::Op::kStats:
        return reply(c, json{{"event", "stats"}, {"text", stats_()}});
    }
  } catch (const std::exception& e) {
    // Unexpected (out of memory, say): this connection ends, the server and its other clients
    // go on.
    error(c, nullptr, ErrorCode::kInternal,
          std::string("the request could not be handled: ") + e.what());
    c.close_after_flush = true;
  }
}

void SocketServer::handle_cancel(Conn& c, const std::string& id) {
  if (!c.inflight.count(id)) {
    return error(c, id, ErrorCode::kInvalidRequest,
                 "cancel: no generation in flight with this \"id\" on this connection");
  }
  if (auto t = c.tokenizing.find(id); t != c.tokenizing.end()) {
    t->second = true;  // passed on when the prompt is tokenized: the engine does not know it yet
    return;
  }
  EngineCommand cmd;
  cmd.kind = EngineCommand::Kind::kCancel;
  cmd.ticket = c.inflight.at(id).serial;
  inbox_.post(std::move(cmd));
}

void SocketServer::handle_generate(Conn& c, FrameRequest r) {
  if (c.inflight.count(r.id)) {
    admission_.count_refusal(ErrorCode::kInvalidRequest);
    return error(c, r.id, ErrorCode::kInvalidRequest,
                 "\"id\" " + quote(r.id) + " is already in flight on this connection");
  }
  if (inbox_.draining()) {
    admission_.count_refusal(ErrorCode::kShuttingDown);
    return error(c, r.id, ErrorCode::kShuttingDown,
                 "the server is shutting down and accepts no new generations");
  }
  // The request owner's admission, here on the I/O thread so that a full queue is answered at
  // once: the per-connection limit, then a place in the queue.
  Reservation place = admission_.reserve(static_cast<int>(c.inflight.size()));
  if (!place) return error(c, r.id, place.refusal()->code, place.refusal()->message);
  const Clock::time_point arrival = Clock::now();
  const uint64_t serial = track(c, r, arrival);
  TokenizeJob job{c.id, std::move(r), arrival, serial, std::move(place)};
  // A constraint's first compilation takes about a millisecond (docs/structured-output.md): off
  // the I/O thread, like a long prompt (a cached one is quick, but the cache is not asked here).
  if (job.request.request.pending_bytes() <= kInlineTokenizeBytes &&
      job.request.request.constraint == nullptr) {
    std::optional<Refusal> refusal = prepare(job);
    return enqueue_generate(c, std::move(job), std::move(refusal));
  }
  c.tokenizing[job.request.id] = false;
  // Shared, because a task is a std::function (copyable): the job and its place are dropped with
  // the task, also when the pool stops before running it.
  auto shared = std::make_shared<TokenizeJob>(std::move(job));
  tokenizers_.post([this, shared] { tokenize(std::move(*shared)); });
}

std::optional<Refusal> SocketServer::prepare(TokenizeJob& job) const {
  return prepare_prompt(job.request.request, tok_, config_, admission_.options().limits,
                        constraints_);
}

void SocketServer::enqueue_generate(Conn& c, TokenizeJob job, std::optional<Refusal> refusal) {
  const std::string id = job.request.id;
  // Answered meanwhile by this thread (deadline, fail_all): the engine never hears of it (its
  // place goes back with `job`), and the id may already belong to a newer generation, which the
  // serial tells apart.
  const auto f = c.inflight.find(id);
  if (f == c.inflight.end() || f->second.serial != job.serial) return;
  bool cancelled = false;
  if (auto t = c.tokenizing.find(id); t != c.tokenizing.end()) {
    cancelled = t->second;
    c.tokenizing.erase(t);
  }
  if (refusal || inbox_.draining()) {
    c.inflight.erase(f);
    if (!refusal) {
      refusal = Refusal{ErrorCode::kShuttingDown,
                        "the server began shutting down while this prompt was being tokenized"};
    }
    admission_.count_refusal(refusal->code);
    return error(c, id, refusal->code, refusal->message);
  }
  f->second.prompt_tokens = job.request.request.prompt.size();
  EngineCommand cmd;
  cmd.kind = EngineCommand::Kind::kGenerate;
  cmd.client = c.id;
  cmd.ticket = job.serial;
  cmd.sink = std::make_shared<SocketGeneration>(*this, c.id, job.serial, id, job.request.stream,
                                                job.request.request.params.logprobs,
                                                job.request.request.tools != nullptr);
  cmd.request = std::move(job.request.request);
  cmd.place = std::move(job.place);
  cmd.deadline = f->second.deadline;
  inbox_.post(std::move(cmd));
  if (cancelled) {
    EngineCommand cancel;
    cancel.kind = EngineCommand::Kind::kCancel;
    cancel.ticket = job.serial;
    inbox_.post(std::move(cancel));
  }
}

void SocketServer::tokenize(TokenizeJob job) {
  std::optional<Refusal> refusal = prepare(job);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(job.conn);
  if (it == conns_.end()) return;  // the client left meanwhile: nothing to answer
  enqueue_generate(*it->second, std::move(job), std::move(refusal));
  wake();  // a refusal may wait in the outbox
}

bool SocketServer::serve_connection(Conn& c, short revents, char* buf, size_t buf_size) {
  bool closed = (revents & (POLLERR | POLLNVAL)) != 0;
  if (!closed && (revents & (POLLIN | POLLHUP))) {
    const ssize_t n = ::read(c.fd, buf, buf_size);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      closed = true;
    } else if (n > 0 && !c.close_after_flush) {
      c.decoder.feed(buf, static_cast<size_t>(n));
      std::string payload, why;
      for (;;) {
        const auto st = c.decoder.next(&payload, &why);
        if (st == FrameDecoder::Status::kNeedMore) break;
        if (st == FrameDecoder::Status::kError) {
          // The stream cannot be resynchronised: say why, then hang up.
          error(c, nullptr, ErrorCode::kInvalidRequest, why + "; closing the connection");
          c.close_after_flush = true;
          break;
        }
        handle_frame(c, payload);
      }
    }
  }
  if (!closed && !c.outbox.empty()) {
    const ssize_t n = ::send(c.fd, c.outbox.data(), c.outbox.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) c.outbox.erase(0, static_cast<size_t>(n));
    if (n < 0 && errno != EAGAIN && errno != EINTR) closed = true;
  }
  return !closed && !(c.close_after_flush && c.outbox.empty());
}

int SocketServer::poll_set(std::vector<pollfd>* fds, std::vector<uint64_t>* ids, bool accepting) {
  fds->clear();
  ids->clear();
  fds->push_back({wake_fd_, POLLIN, 0});
  fds->push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, c] : conns_) {
    short ev = POLLIN;
    if (!c->outbox.empty()) ev |= POLLOUT;
    fds->push_back({c->fd, ev, 0});
    ids->push_back(id);
  }
  return std::min(accepting ? 1000 : 100, poll_timeout_ms(Clock::now()));
}

void SocketServer::io_loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  char buf[65536];
  while (!stop_) {
    const bool accepting = accepts_connections() && Clock::now() >= accept_paused_until_;
    const int timeout_ms = poll_set(&fds, &ids, accepting);
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t drained;
      while (::read(wake_fd_, &drained, sizeof(drained)) > 0) {
      }
    }
    if (accepting && accepts_connections() && (fds[1].revents & POLLIN)) accept_all();
    std::lock_guard<std::mutex> lock(mu_);
    expire_overdue(Clock::now());
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = conns_.find(ids[i]);
      if (it == conns_.end()) continue;
      if (!serve_connection(*it->second, fds[i + 2].revents, buf, sizeof(buf))) close_conn(ids[i]);
    }
  }
}

}  // namespace llama2
