#include "client/client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "common/frame.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxIdBytes = 128;  // docs/PROTOCOL.md: ids are 1-128 bytes

// A server that stops reading would block a writer forever and, with it, every thread waiting for
// the write mutex. A partial frame cannot be taken back, so a send that times out closes the
// connection (every request then fails with server_unavailable instead of hanging).
constexpr int kSendTimeoutS = 30;

// One generation in flight. cb_mu is held while one of its callbacks runs: whoever sets `silenced`
// under it knows no callback is running and none will run afterwards (generate()'s timeout relies
// on that to return while the caller's on_token may reference its stack).
struct Pending {
  std::mutex cb_mu;
  bool silenced = false;
  GenerateEvents ev;
};

// A health/stats call waiting for its untagged answer. The server answers one connection's
// requests in order, so answers are matched first-in first-out. A waiter that timed out stays in
// the queue (abandoned) so that its late answer is consumed by it, not by the next caller.
struct Waiter {
  bool done = false;
  json result;
};

std::string errno_text(int e) {
  return std::strerror(e);
}

const std::string* string_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get_ptr<const std::string*>() : nullptr;
}

}  // namespace

json client_error_event(const json& id, const std::string& code, const std::string& message) {
  return json{{"event", "error"}, {"id", id}, {"code", code}, {"message", message}};
}

struct ClientConnection {
  ClientConnection(int fd_in, std::string path_in) : fd(fd_in), path(std::move(path_in)) {}
  // The descriptor is closed only here, when neither the Client nor the reader holds the
  // connection any more: shutdown() (not close) wakes the reader, so the number is never reused
  // while a thread may still pass it to recv/send.
  ~ClientConnection() { ::close(fd); }

  const int fd;
  const std::string path;
  std::mutex write_mu;  // one frame at a time on the socket

  std::mutex mu;               // guards everything below
  std::condition_variable cv;  // signalled when a Waiter is done
  bool closed = false;         // the reader has stopped: new requests fail at once
  bool closing = false;        // ~Client asked for the close
  std::string close_reason;    // first cause recorded (write failure) wins
  // The last id-less error nobody waited for: the server's reason when it then hangs up (e.g.
  // too_many_connections at its fd limit, or a framing error).
  std::string server_notice;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending;
  std::deque<std::shared_ptr<Waiter>> waiters;

  std::string unavailable_message() const {
    return "connection to llama2 server at '" + path + "' lost: " + close_reason;
  }
};

namespace {

// Runs one callback of a generation unless it was silenced; `final` silences it afterwards so that
// exactly one final callback ever runs.
void deliver(Pending& p, const std::function<void(const json&)>& fn, const json& event,
             bool final) {
  std::lock_guard<std::mutex> lock(p.cb_mu);
  if (p.silenced) return;
  if (final) p.silenced = true;
  if (!fn) return;
  try {
    fn(event);
  } catch (const std::exception& e) {
    // The reader thread has no caller to report to; unwinding it would terminate the process
    // (the JVM's included), so the callback's failure is printed and the stream goes on.
    std::fprintf(stderr, "llama2 client: exception in a callback: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "llama2 client: unknown exception in a callback\n");
  }
}

// Writes one whole frame. On failure the socket is shut down so that the reader fails every
// request in flight: a half-written frame leaves the stream unusable.
bool write_frame(ClientConnection& c, const std::string& frame) {
  std::lock_guard<std::mutex> lock(c.write_mu);
  size_t off = 0;
  while (off < frame.size()) {
    // MSG_NOSIGNAL: a server that went away must give EPIPE, not kill the process with SIGPIPE
    // (installing a handler would change the behaviour of the whole program, e.g. the JVM).
    const ssize_t n = ::send(c.fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const std::string why = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                                ? "server stopped reading (send timed out after " +
                                      std::to_string(kSendTimeoutS) + " s)"
                                : "write failed: " + errno_text(errno);
    {
      std::lock_guard<std::mutex> state(c.mu);
      if (c.close_reason.empty()) c.close_reason = why;
    }
    ::shutdown(c.fd, SHUT_RDWR);
    return false;
  }
  return true;
}

std::string dump_request(const json& request) {
  try {
    return request.dump();
  } catch (const json::exception& e) {
    // The protocol carries UTF-8 only; replacing bytes would silently change the prompt.
    throw Error(std::string("request cannot be encoded as JSON (invalid UTF-8?): ") + e.what());
  }
}

void check_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdBytes) {
    throw Error("request id must be 1-" + std::to_string(kMaxIdBytes) + " bytes (got " +
                std::to_string(id.size()) + ")");
  }
}

// Routes one decoded event from the server.
void dispatch(ClientConnection& c, const json& event) {
  const std::string* type = string_field(event, "event");
  if (!type) return;  // not an event this client understands; newer servers may add fields
  const std::string* id = string_field(event, "id");
  if (id) {
    const bool final = *type == "done" || *type == "error";
    if (!final && *type != "token") return;
    std::shared_ptr<Pending> p;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.pending.find(*id);
      // Unknown ids: late events of a generation that timed out on the client side, or the
      // server's answer to cancelling a generation that had already finished.
      if (it == c.pending.end()) return;
      p = it->second;
      if (final) c.pending.erase(it);
    }
    const auto& fn =
        *type == "token" ? p->ev.on_token : (*type == "done" ? p->ev.on_done : p->ev.on_error);
    deliver(*p, fn, event, final);
    return;
  }
  if (*type != "health" && *type != "stats" && *type != "error") return;
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.waiters.empty()) {
    // e.g. an id-less error nobody waits for; kept as the likely reason of a close that follows
    const std::string* code = string_field(event, "code");
    const std::string* message = string_field(event, "message");
    if (*type == "error") c.server_notice = (code ? *code : "?") + ": " + (message ? *message : "");
    return;
  }
  c.waiters.front()->result = event;
  c.waiters.front()->done = true;
  c.waiters.pop_front();
  c.cv.notify_all();
}

// The connection is gone: release every waiter and give every generation its final error.
void fail_all(ClientConnection& c, const std::string& reason) {
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending;
  json error;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.closed = true;
    if (c.close_reason.empty()) c.close_reason = c.closing ? "closed by the client" : reason;
    // Whatever was noticed first (often a write into the closed socket), the server's own word
    // says why.
    if (!c.closing && !c.server_notice.empty()) c.close_reason += " (" + c.server_notice + ")";
    error = client_error_event(nullptr, "server_unavailable", c.unavailable_message());
    for (auto& w : c.waiters) {
      w->result = error;
      w->done = true;
    }
    c.waiters.clear();
    pending.swap(c.pending);
    c.cv.notify_all();
  }
  for (auto& [id, p] : pending) {
    error["id"] = id;
    deliver(*p, p->ev.on_error, error, true);
  }
}

void reader_loop(const std::shared_ptr<ClientConnection>& c) {
  FrameDecoder decoder(kMaxEventFrameBytes);  // events may be longer than requests
  std::vector<char> buf(64 * 1024);
  std::string reason;
  for (;;) {
    const ssize_t n = ::recv(c->fd, buf.data(), buf.size(), 0);
    if (n == 0) {
      reason = "connection closed by the server";
      break;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      reason = "read failed: " + errno_text(errno);
      break;
    }
    decoder.feed(buf.data(), static_cast<size_t>(n));
    std::string payload, error;
    FrameDecoder::Status st;
    while ((st = decoder.next(&payload, &error)) == FrameDecoder::Status::kFrame) {
      json event = json_nesting_exceeds(payload, kMaxJsonDepth)
                       ? json(json::value_t::discarded)
                       : json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (event.is_discarded() || !event.is_object()) {
        // The server only ever sends objects: anything else means the stream is not the
        // protocol (wrong socket, corrupted stream), and nothing after it can be trusted.
        st = FrameDecoder::Status::kError;
        error = "server sent a frame that is not a JSON object (or nests deeper than " +
                std::to_string(kMaxJsonDepth) + ")";
        break;
      }
      dispatch(*c, event);
    }
    if (st == FrameDecoder::Status::kError) {
      reason = "bad frame from the server: " + error;
      break;
    }
  }
  ::shutdown(c->fd, SHUT_RDWR);  // writers fail fast from now on
  fail_all(*c, reason);
}

// Registers and sends a generation. Returns null when the connection was already gone (on_error
// has then run on this thread).
std::shared_ptr<Pending> start_generate(ClientConnection& c, const json& request,
                                        GenerateEvents ev) {
  if (!request.is_object()) throw Error("generate request must be a JSON object");
  json req = request;
  auto op = req.find("op");
  if (op == req.end()) {
    req["op"] = "generate";
  } else if (!op->is_string() || *op != "generate") {
    throw Error("generate_async: request op must be \"generate\" (got " + op->dump() + ")");
  }
  const std::string* id = string_field(req, "id");
  if (!id) throw Error("generate request needs a string \"id\"");
  check_id(*id);
  const std::string frame = encode_frame(dump_request(req));  // Error above 1 MiB

  auto p = std::make_shared<Pending>();
  p->ev = std::move(ev);
  std::string unavailable;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.closed) {
      unavailable = c.unavailable_message();
    } else if (!c.pending.emplace(*id, p).second) {
      throw Error("generate id '" + *id + "' is already in flight on this connection");
    }
  }
  if (!unavailable.empty()) {
    deliver(*p, p->ev.on_error, client_error_event(*id, "server_unavailable", unavailable), true);
    return nullptr;
  }
  write_frame(c, frame);  // a failure reaches on_error through the reader
  return p;
}

}  // namespace

std::unique_ptr<Client> Client::connect(const std::string& socket_path, int timeout_ms) {
  const std::string where = "llama2 server at '" + socket_path + "'";
  if (timeout_ms <= 0)
    throw Error("connect timeout must be > 0 ms (got " + std::to_string(timeout_ms) + ")");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    throw Error("cannot connect to " + where + ": a socket path must be 1-" +
                std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  // Non-blocking so that a server whose backlog is full cannot stall connect() past the timeout.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw Error("cannot create a socket for " + where + ": " + errno_text(errno));
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw Error("cannot connect to " + where + ": " + why);
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto ms_left = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
  };
  const std::string timed_out = "no answer within " + std::to_string(timeout_ms) + " ms";
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN) {
      // Linux answers EAGAIN (not EINPROGRESS) for a Unix socket whose listen backlog is full:
      // the server is alive but busy, so retry until the deadline.
      if (ms_left() == 0) fail(timed_out);
      ::poll(nullptr, 0, std::min(10, ms_left()));
      continue;
    }
    if (e == EINPROGRESS) {
      pollfd pfd{fd, POLLOUT, 0};
      int rc;
      while ((rc = ::poll(&pfd, 1, ms_left())) < 0 && errno == EINTR) {
      }
      if (rc == 0) fail(timed_out);
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error == 0) break;
      fail(errno_text(so_error));
    }
    if (e == ENOENT || e == ECONNREFUSED) {
      fail(errno_text(e) +
           " (server not running? start it with `mpirun -np N llama2 serve "
           "--model DIR --socket " +
           socket_path + "`)");
    }
    fail(errno_text(e));
  }
  // Blocking from here on: the reader thread sleeps in recv(), writers are bounded by SO_SNDTIMEO.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{kSendTimeoutS, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return std::unique_ptr<Client>(new Client(fd, socket_path));
}

Client::Client(int fd, std::string socket_path)
    : conn_(std::make_shared<ClientConnection>(fd, std::move(socket_path))) {
  // The thread owns a reference so that the connection outlives a Client destroyed from inside
  // one of its own callbacks.
  reader_ = std::thread([c = conn_] { reader_loop(c); });
}

Client::~Client() {
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    conn_->closing = true;
  }
  ::shutdown(conn_->fd, SHUT_RDWR);  // wakes the reader's recv() with end-of-stream
  if (reader_.get_id() == std::this_thread::get_id()) {
    reader_.detach();  // destroyed from a callback: the reader finishes on its own reference
  } else {
    reader_.join();
  }
}

void Client::generate_async(const json& request, GenerateEvents ev) {
  start_generate(*conn_, request, std::move(ev));
}

json Client::generate(const json& request, int timeout_ms,
                      const std::function<void(const json&)>& on_token) {
  json req = request;
  if (req.is_object() && !req.contains("id")) req["id"] = next_id();

  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    json event;
  };
  auto out = std::make_shared<Outcome>();
  auto finish = [out](const json& e) {
    std::lock_guard<std::mutex> lock(out->mu);
    out->event = e;
    out->done = true;
    out->cv.notify_all();
  };
  std::shared_ptr<Pending> p =
      start_generate(*conn_, req, GenerateEvents{on_token, finish, finish});
  {
    std::unique_lock<std::mutex> lock(out->mu);
    if (timeout_ms <= 0) {
      out->cv.wait(lock, [&] { return out->done; });
    } else {
      out->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return out->done; });
    }
    if (out->done) return out->event;
  }
  // Timed out. Silence the generation first: once silenced no callback runs any more, so the
  // caller's on_token may go out of scope; a final event that won the race is still returned.
  const std::string id = req["id"].get<std::string>();
  {
    std::lock_guard<std::mutex> lock(p->cb_mu);
    p->silenced = true;
  }
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    auto it = conn_->pending.find(id);
    if (it != conn_->pending.end() && it->second == p) conn_->pending.erase(it);
  }
  {
    std::lock_guard<std::mutex> lock(out->mu);
    if (out->done) return out->event;
  }
  cancel(id);  // the server frees the sequence's KV blocks; its done/cancelled is dropped
  return client_error_event(
      id, "timeout",
      "no done event within " + std::to_string(timeout_ms) + " ms; the generation was cancelled");
}

void Client::cancel(const std::string& id) {
  check_id(id);
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    if (conn_->closed) return;
  }
  write_frame(*conn_, encode_frame(dump_request(json{{"op", "cancel"}, {"id", id}})));
}

json Client::untagged_request(const std::string& op, const std::string& expect, int timeout_ms) {
  auto w = std::make_shared<Waiter>();
  {
    std::lock_guard<std::mutex> lock(conn_->mu);
    if (conn_->closed) {
      return client_error_event(nullptr, "server_unavailable", conn_->unavailable_message());
    }
    conn_->waiters.push_back(w);
  }
  // Registered before writing: the answer may arrive before write_frame returns.
  write_frame(*conn_, encode_frame(json{{"op", op}}.dump()));
  std::unique_lock<std::mutex> lock(conn_->mu);
  if (timeout_ms <= 0) {
    conn_->cv.wait(lock, [&] { return w->done; });
  } else {
    conn_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return w->done; });
  }
  if (w->done) return w->result;
  return client_error_event(
      nullptr, "timeout", "no " + expect + " answer within " + std::to_string(timeout_ms) + " ms");
}

json Client::health(int timeout_ms) {
  return untagged_request("health", "health", timeout_ms);
}

std::string Client::stats(int timeout_ms) {
  const json r = untagged_request("stats", "stats", timeout_ms);
  const std::string* event = string_field(r, "event");
  const std::string* text = string_field(r, "text");
  if (event && *event == "stats" && text) return *text;
  const std::string* code = string_field(r, "code");
  const std::string* message = string_field(r, "message");
  throw Error((code ? *code : std::string("invalid_response")) + ": " +
              (message ? *message : "unexpected answer to stats: " + r.dump()));
}

std::string Client::next_id() {
  // Process-wide, so that ids stay unique across Clients sharing a server-side log.
  static std::atomic<uint64_t> counter{0};
  return "c" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

bool Client::connected() const {
  std::lock_guard<std::mutex> lock(conn_->mu);
  return !conn_->closed;
}

}  // namespace llama2
