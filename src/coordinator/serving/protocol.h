// What rank 0 makes of one request frame and how it answers (docs/PROTOCOL.md), apart from the
// socket loop so that the fuzz target (tests/fuzz/fuzz_requests.cpp) runs exactly this code.
// Rules every answer follows:
//  - client input appears in a message only as a bounded excerpt (quote(), request.h), and every
//    message is cut to kMaxMessageBytes as a last guard, so an error reply is a few KB at most;
//  - an `id` is echoed only when it is a string of at most kMaxEchoedIdBytes or an integer;
//  - building a frame never throws: an event too large for a server frame becomes an `internal`
//    error of its own request, so a reply can fail only for that request, never for the process.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/requests/codes.h"
#include "coordinator/requests/request.h"

namespace llama2 {

constexpr size_t kMaxMessageBytes = 2048;
constexpr size_t kMaxEchoedIdBytes = 128;  // also the longest id a generate may have

// The limits a request is checked against on the socket thread.
struct ServeLimits {
  PromptLimits prompt;                  // prompt + max_new_tokens (the request owner's limits)
  int64_t request_timeout_ms = 600000;  // default and cap of timeout_ms
  int max_piece_bytes = 0;              // token_bound.h; 0: text prompts have no byte bound
};

// One request frame, decoded and validated as far as can be done without connection state and
// without tokenizing.
struct FrameRequest {
  enum class Op { kError, kGenerate, kCancel, kHealth, kStats } op = Op::kError;
  nlohmann::json error;                               // kError: the error event to send back
  ErrorCode error_code = ErrorCode::kInvalidRequest;  // kError: its code, for the counters
  std::string id;         // kGenerate (1..kMaxEchoedIdBytes bytes) and kCancel (any string)
  ParsedRequest request;  // kGenerate: validated; text_pending until prepare_prompt()
  bool stream = true;
  int64_t timeout_ms = 0;
};

FrameRequest decode_request(const std::string& payload, const SamplingParams& defaults,
                            const ModelConfig& config, const ServeLimits& limits);

// The id an error event carries: `id` itself when it is a string of at most kMaxEchoedIdBytes or
// an integer, else null.
nlohmann::json echo_id(const nlohmann::json& id);
// {"event": "error", "id": echo_id(id), "code": code, "message": message (cut to
// kMaxMessageBytes)}.
nlohmann::json error_event(const nlohmann::json& id, ErrorCode code, const std::string& message);

// The frame of a server event (length prefix + JSON), within kMaxEventFrameBytes. Never throws.
std::string event_frame(const nlohmann::json& event);
// The same for an event already serialized; `id` is the request it belongs to (for the
// replacement error when it does not fit).
std::string event_frame(const std::string& payload, const std::string& id);

}  // namespace llama2
