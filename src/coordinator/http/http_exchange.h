// One HTTP generation's mailbox between the engine thread and the HTTP connection thread that
// answers it. The engine thread (SocketBridge) only appends to memory and, once per step, wakes
// the waiting thread: it never touches a socket, so a client that stops reading slows nobody but
// itself (its thread blocks in a write until the write timeout, then the request is cancelled).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

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
    std::string error_code;  // "" when finished
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
  void fail(const std::string& code, const std::string& message);
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

}  // namespace llama2
