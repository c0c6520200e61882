// One Unix-socket generation's EventSink (engine_inbox.h): its events become protocol events
// (docs/PROTOCOL.md: token, done, error) queued on its connection's outbox, which the socket
// server's I/O thread writes. Dropped there if the connection has gone or the I/O thread already
// answered the generation (its deadline passed, the engine stalled).
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

class SocketServer;

class SocketGeneration final : public EventSink {
 public:
  // `ticket`: the generation's number (the server's in-flight entry for `id` on `conn`).
  SocketGeneration(SocketServer& server, uint64_t conn, uint64_t ticket, std::string id,
                   bool stream, bool logprobs, bool tools = false);

  void on_token(const TokenEvent& ev) override;
  void on_finished(const Finished& done, const Timings& timings) override;
  void on_error(ErrorCode code, const std::string& message) override;
  SinkFlusher& flusher() override;

 private:
  SocketServer& server_;
  const uint64_t conn_, ticket_;
  const std::string id_;
  const std::string id_json_;  // id serialized once for the token events
  const bool stream_, logprobs_;
  const bool tools_;  // the request has callable tools: `done` carries the calls it made
};

}  // namespace llama2
