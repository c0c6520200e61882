// One HTTP generation's mailbox between the engine thread and the HTTP connection thread that
// answers it. The engine thread (SocketBridge) only appends to memory and, once per step, wakes
// the waiting thread: it never touches a socket, so a client that stops reading slows nobody but
// itself (its thread blocks in a write until the write timeout, then the request is cancelled).
#pragma once

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

namespace llama2 {

// HTTP generations use client ids (RequestOwner's `client`, the bridge's `conn`) and serials with
// this bit set: one per generation, never equal to a Unix-socket connection's or serial.
constexpr uint64_t kHttpClientBit = uint64_t{1} << 63;

class HttpExchange {
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

  HttpExchange(uint64_t client, bool logprobs) : client_(client), logprobs_(logprobs) {}
  uint64_t client() const { return client_; }
  bool logprobs() const { return logprobs_; }  // the request asked for logprobs

  // Engine thread: queue without waking the reader (notify() once per step).
  void push_token(const TokenEvent& ev);
  void finish(const Finished& done, const Timings& timings);
  void fail(ErrorCode code, const std::string& message);
  void notify() { cv_.notify_all(); }

  // HTTP thread: what arrived, waiting up to `wait` when nothing has.
  News take(std::chrono::milliseconds wait);

  // Text queued and not yet taken beyond which tokens are dropped (and the request ended by the
  // reader): a client that does not read cannot grow rank 0's memory without bound.
  static constexpr size_t kMaxQueuedBytes = 16u << 20;

 private:
  const uint64_t client_;
  const bool logprobs_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Token> tokens_;
  size_t bytes_ = 0;
  bool overflowed_ = false;
  std::optional<End> end_;
};

// Wakes, on its own thread, the connection threads of the HTTP generations that got tokens in a
// step. On the engine thread each wake-up of a waiting thread is a system call: measured on an
// H200 at saturation (1,024 streams, 7B), rank 0's host time between steps was 3.2-3.5 ms with
// the wake-ups there against 1.2 ms for the same load on the Unix socket, about 6% of the step
// (benchmarks/logs/2026-12-01-h200-http-notify/).
class ExchangeNotifier {
 public:
  ExchangeNotifier();
  ~ExchangeNotifier();  // wakes what was posted, then joins
  // Engine thread: one lock and at most one wake-up, whatever the number of exchanges.
  void post(std::vector<std::shared_ptr<HttpExchange>>& touched);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<HttpExchange>> pending_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace llama2
