// The two closed sets a request's life ends in, as types: why a generation finished and why a
// request was refused or failed. Inside the coordinator they travel as these enums; their names
// (docs/PROTOCOL.md) appear only at the edges: the socket protocol's events, batch lines, the HTTP
// front's JSON (which also maps each error to an HTTP status, coordinator/http/openai_api.h), the
// metrics' labels. One name table per enum, in codes.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace llama2 {

// How a generation ended (Finished::finish_reason).
enum class FinishReason : uint8_t {
  kStop,          // EOS or a stop string
  kLength,        // max_new_tokens reached
  kCancelled,     // a cancel, or the client went away
  kTimeout,       // its deadline passed
  kShuttingDown,  // the server's drain ended it (the socket: an error, not a `done`)
};
constexpr int kFinishReasonCount = 5;

// Why a request was refused, or a generation failed: the `code` of an error event.
enum class ErrorCode : uint8_t {
  kInvalidRequest,      // bad frame or body, unknown key, value out of range, duplicate id
  kPromptTooLong,       // prompt + max_new_tokens beyond a limit
  kQueueFull,           // --max-queue generations already waiting
  kTooManyInFlight,     // the connection's --max-inflight-per-connection
  kTooManyConnections,  // rank 0 is out of file descriptors
  kShuttingDown,        // draining
  kInternal,            // an unexpected failure (also a stalled step, on the socket)
  // The HTTP front's own (docs/PROTOCOL.md, "HTTP").
  kUnsupportedParameter,
  kModelNotFound,
  kNotFound,
  kBodyTooLarge,
  kInvalidApiKey,
  kStarting,
  kStalled,
  kServerBusy,
  // Batch lines' own (docs/cli.md).
  kInvalidJson,
  kDuplicateCustomId,
};
constexpr int kErrorCodeCount = 17;

// What speculative decoding did for a request (docs/speculative.md), reported with its end.
enum class SpecUse : uint8_t {
  kNone,         // the server has none and the request did not ask: nothing is reported
  kOn,           // its decode steps verified proposals
  kOptedOut,     // "speculative": false
  kUnavailable,  // "speculative": true, but the server runs without --speculative
  kConstrained,  // off for this request: a constrained row's mask depends on the tokens before it
};

// The protocol names: "stop", "queue_full", ...
const char* to_string(FinishReason r);
const char* to_string(ErrorCode c);
const char* to_string(SpecUse u);  // "none", "on", "opted_out", "unavailable", "off_constrained"
// The enum of a protocol name; nullopt for any other string (a message from another version).
std::optional<FinishReason> parse_finish_reason(std::string_view name);
std::optional<ErrorCode> parse_error_code(std::string_view name);

// Why a request was not taken: a code and one message naming the limit or the key.
struct Refusal {
  ErrorCode code = ErrorCode::kInvalidRequest;
  std::string message;
};

}  // namespace llama2
