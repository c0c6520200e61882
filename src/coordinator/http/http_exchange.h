// One HTTP generation's mailbox between the engine thread and the HTTP connection thread that
// answers it: the generation's EventSink (serving/engine_inbox.h). The engine thread
// (EngineDispatch) only appends to memory and, once per step, has the waiting threads woken: it
// never touches a socket, so a client that stops reading slows nobody but itself (its thread
// blocks in a write until the write timeout, then the request is cancelled).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/requests/codes.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

class HttpExchange final : public EventSink {
 public:
  struct Token {
    int index = 0;
    int token = 0;
    std::string text;
    float logprob = 0;              // when the request asked for logprobs
    std::vector<TopLogprob> top{};  // its top_logprobs alternatives
  };
  // How the generation ended: a finished result, or an error code of docs/PROTOCOL.md.
  struct End {
    std::optional<ErrorCode> error_code;  // unset when finished
    std::string error_message;
    Finished finished;
    Timings timings;
  };
  struct News {
    std::vector<Token> tokens;
    std::optional<End> end;
    bool overflowed = false;  // tokens were dropped: the client read too slowly for too long
  };

  // `client` and `ticket`: the engine inbox's numbers for its connection and its generation
  // (EngineInbox::new_client/new_ticket). `flusher` wakes it after a step (ExchangeNotifier).
  HttpExchange(uint64_t client, uint64_t ticket, bool logprobs, bool stream, SinkFlusher& flusher)
      : client_(client), ticket_(ticket), logprobs_(logprobs), stream_(stream), flusher_(flusher) {}
  uint64_t client() const { return client_; }
  uint64_t ticket() const { return ticket_; }
  bool logprobs() const { return logprobs_; }  // the request asked for logprobs
  // A token was generated: the prompt is computed (and its full blocks are in the prefix cache).
  bool started() const { return started_.load(std::memory_order_acquire); }

  // EventSink, engine thread. Tokens are queued without waking the reader (the flusher wakes it
  // once per step; a non-streamed answer takes none); the end wakes it at once.
  void on_token(const TokenEvent& ev) override;
  void on_finished(const Finished& done, const Timings& timings) override;
  void on_error(ErrorCode code, const std::string& message) override;
  void on_shut_down(const Finished& done, const Timings& timings) override {
    on_finished(done, timings);  // finish_reason "length" (api_finish_reason)
  }
  void wake() override { cv_.notify_all(); }
  SinkFlusher& flusher() override { return flusher_; }

  // The mailbox's writes (also for tests).
  void push_token(const TokenEvent& ev);
  void finish(const Finished& done, const Timings& timings);
  void fail(ErrorCode code, const std::string& message);

  // HTTP thread: what arrived, waiting up to `wait` when nothing has.
  News take(std::chrono::milliseconds wait);

  // Text queued and not yet taken beyond which tokens are dropped (and the request ended by the
  // reader): a client that does not read cannot grow rank 0's memory without bound.
  static constexpr size_t kMaxQueuedBytes = 16u << 20;

 private:
  const uint64_t client_, ticket_;
  const bool logprobs_, stream_;
  SinkFlusher& flusher_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Token> tokens_;
  size_t bytes_ = 0;
  bool overflowed_ = false;
  std::optional<End> end_;
  std::atomic<bool> started_{false};
};

// Wakes, on its own thread, the connection threads of the HTTP generations that got tokens in a
// step. On the engine thread each wake-up of a waiting thread is a system call: measured on an
// H200 at saturation (1,024 streams, 7B), rank 0's host time between steps was 3.2-3.5 ms with
// the wake-ups there against 1.2 ms for the same load on the Unix socket, about 6% of the step
// (benchmarks/logs/2026-12-01-h200-http-notify/ in the git history). The HTTP exchanges'
// SinkFlusher.
class ExchangeNotifier final : public SinkFlusher {
 public:
  ExchangeNotifier();
  ~ExchangeNotifier() override;  // wakes what was posted, then joins
  // Engine thread: one lock and at most one wake-up, whatever the number of exchanges.
  void flush(std::vector<std::shared_ptr<EventSink>>& touched) override;

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<EventSink>> pending_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace llama2
