// The one engine inbox, owned by neither endpoint (llama.cpp's server task queue / response queue
// split): the Unix socket and the HTTP front each post their generations, cancels, disconnects
// and expiries here, on their own threads, and the engine thread takes them (EngineDispatch,
// serve_loop.h). Events go back the other way through each generation's EventSink, which its
// endpoint implements: a socket generation queues protocol events on its connection, an HTTP
// exchange fills its connection thread's mailbox. Nothing here knows either endpoint.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/requests/admission.h"
#include "coordinator/requests/codes.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_messages.h"

namespace llama2 {

// A generation whose deadline passed more than this long ago while the engine did not end it (it
// is inside a long or stalled step) is answered by its endpoint's own thread: `done` with
// finish_reason "timeout" (socket) or a timeout answer (HTTP). Before that the engine ends it at
// its next step, with its text.
constexpr std::chrono::milliseconds kDeadlineGrace{250};

class EventSink;

// Wakes the readers of the sinks that got events in a step, once per step for all of them (one
// eventfd write for the socket, one hand-off to the notifier thread for HTTP): a wake-up per
// token on the engine thread cost ~6% of a step at saturation (http_exchange.h).
class SinkFlusher {
 public:
  virtual ~SinkFlusher() = default;
  // Engine thread, after a step: `touched` got events (each once); taken or cleared here.
  virtual void flush(std::vector<std::shared_ptr<EventSink>>& touched) = 0;
};

// Where one generation's events go. Engine thread only (the flusher's thread calls wake()).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_token(const TokenEvent& ev) = 0;
  virtual void on_finished(const Finished& done, const Timings& timings) = 0;
  // The generation ends without a result: refused when submitted (a limit changed since the
  // endpoint checked it), or the server shut down before it finished.
  virtual void on_error(ErrorCode code, const std::string& message) = 0;
  // The server's drain ended the generation unfinished (FinishReason::kShuttingDown): the socket
  // answers an error (docs/PROTOCOL.md); HTTP ends the answer with what was generated and
  // finish_reason "length", as vLLM's clients expect of an answer cut short.
  virtual void on_shut_down(const Finished& done, const Timings& timings) {
    (void)done;
    (void)timings;
    on_error(ErrorCode::kShuttingDown, "the server shut down before this generation finished");
  }
  // Wakes whoever reads this sink's events (may be a no-op: the flusher wakes them all).
  virtual void wake() {}
  // Who flushes this sink after a step.
  virtual SinkFlusher& flusher() = 0;
};

struct EngineCommand {
  enum class Kind {
    kGenerate,    // run `request`; its events go to `sink`
    kCancel,      // end generation `ticket` (cancelled)
    kDisconnect,  // end every generation of `client` (cancelled): its connection went away
    kExpired,     // generation `ticket` was already answered at its deadline: end it (timeout)
  };
  Kind kind = Kind::kGenerate;
  uint64_t client = 0;    // kGenerate, kDisconnect: the connection (RequestOwner's client)
  uint64_t ticket = 0;    // kGenerate, kCancel, kExpired: the generation (EngineInbox::new_ticket)
  ParsedRequest request;  // kGenerate: tokenized, its prompt length checked (prepare_prompt)
  Reservation place;      // kGenerate: its place in the queue (Admission::reserve)
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<EventSink> sink;  // kGenerate
};

class EngineInbox {
 public:
  // Any thread.
  void post(EngineCommand cmd);
  // Engine thread: the commands that arrived, waiting up to `wait` for the first one.
  std::deque<EngineCommand> take(std::chrono::milliseconds wait);

  // Numbers unique across endpoints: a connection (client) and a generation (ticket).
  uint64_t new_client() { return next_client_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t new_ticket() { return next_ticket_.fetch_add(1, std::memory_order_relaxed); }

  // The server's state every endpoint answers by. Draining: no new generations (SIGTERM, or a
  // stall); stalled: the step watchdog fired, every generation in flight fails.
  bool draining() const { return draining_.load(std::memory_order_acquire); }
  bool stalled() const { return stalled_.load(std::memory_order_acquire); }
  void set_draining();
  void set_stalled();  // also draining
  // `wake` runs (on the setter's thread) whenever the state changes: an endpoint's I/O thread
  // that must notice at once. Before the endpoints start.
  void on_state_change(std::function<void()> wake) { wakers_.push_back(std::move(wake)); }

 private:
  void state_changed();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineCommand> commands_;
  std::atomic<uint64_t> next_client_{1}, next_ticket_{1};
  std::atomic<bool> draining_{false}, stalled_{false};
  std::vector<std::function<void()>> wakers_;
};

}  // namespace llama2
