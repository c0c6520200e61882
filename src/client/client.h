// C++ client of the `llama2 serve` socket protocol (docs/PROTOCOL.md). Used by `llama2 client`,
// the tests, and the JVM shim (a C ABI over this class). Depends only on POSIX sockets, threads,
// nlohmann/json and src/common/{frame,check}: no MPI, SentencePiece or CUDA, so it links into a
// plain shared library.
//
// Threading: one Client may be used from many threads at once. A background reader thread decodes
// the server's frames and runs the callbacks; writes are serialised so each frame goes out whole.
// Callbacks run on that reader thread: they may call cancel() and generate_async(), but must not
// call the blocking generate(), health() or stats() (the reader would wait on itself).
//
// Client-side error codes (in addition to the server's codes of docs/PROTOCOL.md), delivered as
// ordinary `{"event":"error","id":...,"code":...,"message":...}` objects:
//   server_unavailable  the connection is gone (server killed or shut down, socket error, a frame
//                       the client cannot decode, or this Client was destroyed); every request in
//                       flight on the connection gets it, and so does every later request. When
//                       the server said why before hanging up (an id-less error such as
//                       too_many_connections), the message ends with that error.
//   timeout             the blocking call's own deadline passed; for generate() a `cancel` has been
//                       sent so the server frees the sequence (its late events are dropped).
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/frame.h"

namespace llama2 {

struct ClientConnection;  // shared by the Client and its reader thread (client.cpp)

// Callbacks of one generation, run on the reader thread. Exactly one of on_done / on_error is
// called, exactly once, and it is the last call for that generation. Empty functions are skipped.
struct GenerateEvents {
  std::function<void(const nlohmann::json& token_event)> on_token;
  std::function<void(const nlohmann::json& done_event)> on_done;
  std::function<void(const nlohmann::json& error_event)> on_error;
};

class Client {
 public:
  // Connects to the Unix socket at `socket_path`, waiting at most `timeout_ms` (> 0). Throws
  // llama2::Error naming the path and the errno text; when nobody listens there (ENOENT,
  // ECONNREFUSED) the message says the server is not running.
  static std::unique_ptr<Client> connect(const std::string& socket_path, int timeout_ms);

  // Closes the connection and joins the reader thread; generations still in flight get their
  // on_error(server_unavailable) before this returns. Safe to call from a callback.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends a generate request; `request` must hold "id" (a string of 1-128 bytes not already in
  // flight on this Client) and may omit "op". Events for that id go to `ev`. When the connection is
  // already gone, on_error(server_unavailable) runs on the calling thread before this returns.
  // Throws llama2::Error only for local misuse (missing/bad/duplicate id, op other than generate,
  // a request larger than a frame).
  void generate_async(const nlohmann::json& request, GenerateEvents ev);

  // Blocking generate: returns the `done` event, or the `error` event (the server's, or a
  // client-side server_unavailable / timeout); protocol failures are never thrown. An "id" is
  // added when the request has none. timeout_ms <= 0 waits without a client-side deadline (the
  // server's own request timeout still applies). on_token runs on the reader thread and is never
  // called after generate() has returned.
  nlohmann::json generate(const nlohmann::json& request, int timeout_ms,
                          const std::function<void(const nlohmann::json&)>& on_token = {});

  // Asks the server to end generation `id` (it then finishes with done / "cancelled"). A no-op when
  // the connection is gone.
  void cancel(const std::string& id);

  // The server's `health` event, or an error event (server_unavailable, timeout, or the server's).
  nlohmann::json health(int timeout_ms);
  // The Prometheus text of the `stats` event; throws llama2::Error "<code>: <message>" otherwise.
  std::string stats(int timeout_ms);

  // A request id unique within this process: "c<pid>-<counter>".
  std::string next_id();

  // False once the connection is gone (every later request fails with server_unavailable).
  bool connected() const;

 private:
  Client(int fd, std::string socket_path);
  // Sends {"op": op} and waits for the matching untagged event (`expect`).
  nlohmann::json untagged_request(const std::string& op, const std::string& expect, int timeout_ms);

  std::shared_ptr<ClientConnection> conn_;
  std::thread reader_;
};

// The synthesized client-side error event (codes above).
nlohmann::json client_error_event(const nlohmann::json& id, const std::string& code,
                                  const std::string& message);

}  // namespace llama2
