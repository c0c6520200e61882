// `llama2 serve`'s engine thread on rank 0, between the socket endpoint and the request owner:
// SocketBridge turns the socket server's commands into the owner's calls (submit, cancel,
// disconnect) and the owner's events into protocol events (token, done, error) for the right
// connection; serve_loop() runs the engine until a drain ends. See docs/ARCHITECTURE.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/engine_config.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/serving/socket_server.h"

namespace llama2 {

// Where each of the owner's request ids sends its events: a socket connection, or the mailbox of an
// HTTP generation (coordinator/http/http_exchange.h); both endpoints share the one inbox.
class SocketBridge final : public RequestEvents {
 public:
  // `seed` starts the generator of the seeds of requests that give none.
  SocketBridge(SocketServer& server, uint64_t seed);

  // One command of the socket server, as calls on the owner.
  void handle(ServeCommand& cmd, RequestOwner& owner);
  size_t in_flight() const { return routes_.size(); }
  // After a step: has the HTTP threads whose generations got tokens woken (ExchangeNotifier).
  void flush();

  void on_token(const TokenEvent& ev) override;
  void on_finished(const Finished& done, const Timings& timings) override;

 private:
  struct Route {
    uint64_t conn = 0;
    uint64_t serial = 0;  // the socket server's number for this generation
    std::string id;
    std::string id_json;  // id serialized once for the token events
    bool stream = true;
    bool logprobs = false;  // the request asked for logprobs
    uint64_t seed = 0;
    std::shared_ptr<HttpExchange> http;  // an HTTP generation: events go here
  };
  void submit(ServeCommand& cmd, RequestOwner& owner);

  SocketServer& server_;
  std::map<int64_t, Route> routes_;
  std::vector<std::shared_ptr<HttpExchange>> touched_;  // got tokens this step
  std::unique_ptr<ExchangeNotifier> notifier_;          // started by the first HTTP tokens
  int64_t next_id_ = 0;
  std::mt19937_64 seeder_;
};

// What `health` says besides the status and the counters (fixed for the server's life).
struct HealthInfo {
  int ranks = 1;
  Backend backend = Backend::kCpu;
  ComputeDType dtype = ComputeDType::kFp32;
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  std::string model;
  int max_batch_size = 0, max_queue = 0, max_seq_len = 0;
};

// The `health` event: status from the server (ready, draining, stalled; ready before it exists),
// every counter from the one Admission::gauges() snapshot that `stats` reports too.
nlohmann::json health_event(const SocketServer* server, const Admission& admission,
                            const HealthInfo& info);

// Runs the engine until a drain ends: takes commands, steps the owner while it has work, and when
// `stop_requested` turns true stops taking generations and lets in-flight ones finish for up to
// `shutdown_timeout` (then ends them with shutting_down).
void serve_loop(SocketServer& server, SocketBridge& bridge, RequestOwner& owner,
                const std::atomic<bool>& stop_requested,
                std::chrono::milliseconds shutdown_timeout);

}  // namespace llama2
