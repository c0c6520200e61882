// Rank 0's Unix-socket endpoint (docs/PROTOCOL.md). One I/O thread polls the listening socket and
// every connection, decodes frames and applies the request owner's admission policy (Admission:
// bad requests, prompt length, per-connection in-flight limit, queue-full) at once, answers health
// and stats itself, and posts generate/cancel/disconnect/expired commands into the engine inbox
// (engine_inbox.h); each generation's events come back through its SocketGeneration sink
// (socket_generation.h) into send(). The engine thread never blocks on a socket, and the I/O
// thread never waits for the engine: deadlines and disconnects hold even while a step is stuck.
// Text prompts longer than kInlineTokenizeBytes go to a TokenizerPool.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/model_config.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request.h"
#include "coordinator/serving/engine_inbox.h"
#include "coordinator/serving/protocol.h"
#include "coordinator/serving/tokenizer_pool.h"

namespace llama2 {

class Tokenizer;

// The endpoint's own settings; the admission limits (queue, prompt length, in flight per
// connection) are the request owner's (AdmissionOptions).
struct ServerOptions {
  std::string socket_path;
  int64_t request_timeout_ms = 600000;  // default and cap of a request's timeout_ms
  int max_piece_bytes = 0;              // token_bound.h: 0, no byte-length refusal of prompts
  int tokenizer_threads = 2;            // workers tokenizing long text prompts
};

// Text prompts up to this size are tokenized on the I/O thread itself (well under a millisecond,
// and their order of arrival is kept); longer ones go to the tokenizer workers.
constexpr size_t kInlineTokenizeBytes = 4096;

// Also its generations' SinkFlusher: after a step the engine thread wakes the I/O thread once.
class SocketServer final : public SinkFlusher {
 public:
  // `inbox` takes its commands and holds the serve state (draining, stalled); `admission` decides
  // what is taken and counts it; `health` and `stats` build those events.
  // `constraints` compiles requests' output constraints (on the tokenizer pool's threads).
  SocketServer(ServerOptions opts, EngineInbox& inbox, Admission& admission, const Tokenizer& tok,
               ConstraintCompiler& constraints, const ModelConfig& config, SamplingParams defaults,
               std::function<nlohmann::json()> health, std::function<std::string()> stats);
  ~SocketServer() override;

  // Creates the socket (mode 0600; refuses a path that exists and is not a stale socket) and
  // starts the I/O thread. Error with the path and the reason on failure.
  void start();
  bool draining() const { return inbox_.draining(); }
  // Flushes pending events (up to `flush_ms`), closes every connection, removes the socket file.
  void stop(int flush_ms);

  // Engine thread (SocketGeneration): queue an event of generation `serial` (client id `id`) for a
  // connection; dropped if the connection has gone or the generation was already answered here
  // (deadline, fail_all). `final` ends it.
  void send(uint64_t conn, const nlohmann::json& event, const std::string& id, uint64_t serial,
            bool final);
  // Engine thread: queue an already serialized event without waking the I/O thread; the engine
  // calls wake() once after a step (one eventfd write per step instead of one per token).
  void send_quiet(uint64_t conn, std::string payload, const std::string& id, uint64_t serial,
                  bool final);
  // The `token` event's JSON, the same bytes as dumping the object, built without one: at
  // saturation rank 0 emits ~10k of them per second between engine steps (GPUs idle meanwhile).
  // `id_json` is the request id already serialized as a JSON string. `logprobs` (a request that
  // asked for them): its logprob and top_logprobs are added as "logprob" and "top_logprobs".
  static std::string token_event(const std::string& id_json, int index, int token,
                                 const std::string& piece, const TokenEvent* logprobs = nullptr);
  // Engine thread, after a step: the token events of `touched` (this server's generations) went
  // out quietly; one wake-up of the I/O thread sends them all.
  void flush(std::vector<std::shared_ptr<EventSink>>& touched) override;
  // Any thread (the step watchdog): ends every generation in flight with an error event (`code`,
  // `message`) and marks the server stalled (EngineInbox::set_stalled): `health` can report it
  // (connections are still accepted for that), new generations get shutting_down. A generation
  // whose deadline passed more than kDeadlineGrace ago is answered the same way by the I/O thread
  // (`done`, "timeout").
  void fail_all(ErrorCode code, const std::string& message);
  bool stalled() const { return inbox_.stalled(); }
  // Removes the socket file now (the watchdog ends the process without stop()).
  void remove_socket_file();
  // Wakes the I/O thread (also called from the signal handler path through wake_fd()).
  void wake();
  int wake_fd() const { return wake_fd_; }

 private:
  struct Conn;
  // A generation waiting for its prompt to be tokenized.
  struct TokenizeJob {
    uint64_t conn = 0;
    FrameRequest request;
    std::chrono::steady_clock::time_point arrival;
    uint64_t serial = 0;  // the generation's entry in Conn::inflight
    Reservation place;    // its place in the queue, until the engine gets it
  };
  void io_loop();
  // The poll set: the wake-up fd, the listening socket (polled when `accepting`) and every
  // connection, whose ids go to `ids` in the same order. Returns the poll timeout.
  int poll_set(std::vector<pollfd>* fds, std::vector<uint64_t>* ids, bool accepting);
  // mu_ held. Reads and handles what `c` sent, writes what its outbox holds; false when the
  // connection is to be closed.
  bool serve_connection(Conn& c, short revents, char* buf, size_t buf_size);
  void accept_all();
  // At the fd limit: accepts one pending connection on the spare descriptor, answers it with an
  // error and closes it; false when there is nothing more to accept now (or accepting paused).
  bool refuse_one_connection(int accept_errno);
  void handle_frame(Conn& c, const std::string& payload);
  void handle_generate(Conn& c, FrameRequest r);
  void handle_cancel(Conn& c, const std::string& id);
  // mu_ held: a tokenized generation (or its refusal) goes on to the engine.
  void enqueue_generate(Conn& c, TokenizeJob job, std::optional<Refusal> refusal);
  // Any thread: the prompt tokenized and checked (prepare_prompt, the HTTP front's too).
  std::optional<Refusal> prepare(TokenizeJob& job) const;
  // A tokenizer worker: tokenizes `job`'s prompt, then hands it on under mu_.
  void tokenize(TokenizeJob job);
  void reply(Conn& c, const nlohmann::json& event);  // from the I/O thread, mu_ held
  void error(Conn& c, const nlohmann::json& id, ErrorCode code, const std::string& msg);
  void close_conn(uint64_t id);
  ServeLimits limits() const;
  // mu_ held. Records a generation admitted at `arrival`; returns its serial.
  uint64_t track(Conn& c, const FrameRequest& r, std::chrono::steady_clock::time_point arrival);
  // mu_ held. Answers the generations past deadline + kDeadlineGrace and tells the engine.
  void expire_overdue(std::chrono::steady_clock::time_point now);
  // mu_ held. How long poll() may sleep: until the next deadline to enforce, at most 1 s.
  int poll_timeout_ms(std::chrono::steady_clock::time_point now) const;
  bool accepts_connections() const { return !inbox_.draining() || inbox_.stalled(); }

  ServerOptions opts_;
  EngineInbox& inbox_;
  Admission& admission_;
  const Tokenizer& tok_;
  ConstraintCompiler& constraints_;
  ModelConfig config_;
  SamplingParams defaults_;
  std::function<nlohmann::json()> health_;
  std::function<std::string()> stats_;

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int spare_fd_ = -1;  // held in reserve: at the fd limit it is freed to accept-and-refuse
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::thread io_;
  std::atomic<bool> stop_{false};

  // Guards conns_ (outboxes, in-flight ids); taken before the pool's and the inbox's, so the
  // commands of one connection reach the inbox in the order they were made.
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  // No tracked generation must be answered by the I/O thread before this (deadline + grace).
  std::chrono::steady_clock::time_point next_expiry_ = std::chrono::steady_clock::time_point::max();

  TokenizerPool tokenizers_;
};

}  // namespace llama2
