// The OpenAI-compatible HTTP front's request and response bodies (docs/PROTOCOL.md, "HTTP"), apart
// from the HTTP library so that unit tests (and the fuzz target, later) run exactly this code.
//
// A request body is translated into the project's own request object (request.h's keys:
// max_tokens -> max_new_tokens, a token-id prompt -> prompt_tokens, ...) and validated by
// parse_request_fields, the same code the socket protocol and `batch` use: every sampling range,
// the chat order rule and the token-id checks have one place. What OpenAI defines and this server
// does not do (tools, echo, best_of, n > 1) is refused here by
// name.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/requests/codes.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

// How an error code reaches an HTTP client: its status and OpenAI's error type
// ("invalid_request_error", "rate_limit_error", "server_error").
struct HttpErrorClass {
  int status;
  const char* type;
};
// The one table (openai_api.cpp) of every ErrorCode's status and type: 400 for a bad request
// (invalid_request, prompt_too_long, unsupported_parameter), 401 invalid_api_key, 404
// model_not_found / not_found, 413 body_too_large, 429 queue_full / too_many_in_flight, 503 for
// a server that cannot take it now (shutting_down, starting, stalled, server_busy), 500 internal.
HttpErrorClass http_error_class(ErrorCode code);

// An error answered with OpenAI's shape {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  ErrorCode code = ErrorCode::kInvalidRequest;
  std::string message;
  std::string param;  // the offending request key; "" -> null
  // http_error_class(code).status, unless the HTTP library answered another status itself
  // (an unreadable request: 400, 405, ...).
  int status = 400;
};
ApiError api_error(ErrorCode code, std::string message, std::string param = "");
nlohmann::json api_error_body(const ApiError& e);

enum class ApiKind { kCompletion, kChat };

// What the front needs to judge a body.
struct ApiContext {
  std::string served_model;  // the only model name accepted
  SamplingParams defaults;   // serve's sampling defaults
  ModelConfig config;
};

struct ApiRequest {
  ApiKind kind = ApiKind::kCompletion;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;
  ParsedRequest request;  // validated, text_pending until tokenized (tokenize_request)
};

// Parses and validates one body; the request, or the error to answer with.
struct ApiParse {
  std::optional<ApiError> error;
  ApiRequest request;
};
ApiParse parse_api_request(const std::string& body, ApiKind kind, const ApiContext& ctx);

// OpenAI's finish_reason for the project's ("stop", "length"; "timeout" and "cancelled" are
// passed through: clients do not check the value, and calling a timeout "length" would lie).
const char* api_finish_reason(FinishReason finish_reason);

// One finished generation, as the engine reported it.
struct ApiResult {
  FinishReason finish_reason = FinishReason::kStop;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::string text;
  nlohmann::json logprobs = nullptr;  // api_logprobs(...) when the request asked, else null
};

// One generated token's log-probabilities (TokenEvent::logprob / top_logprobs).
struct ApiTokenLogprobs {
  int token = 0;
  float logprob = 0;
  std::vector<TopLogprob> top;
};
// The choice's "logprobs" object for `tokens`, in OpenAI's shape: chat {"content": [{"token",
// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}; completions {"tokens",
// "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}. A token's string is its
// SentencePiece piece with U+2581 as a space; a byte-fallback piece <0xNN> above 0x7F keeps that
// name as its string (a lone byte is not UTF-8) and gives the byte in "bytes".
nlohmann::json api_logprobs(ApiKind kind, const std::vector<ApiTokenLogprobs>& tokens,
                            const Tokenizer& tokenizer, int text_offset = 0);

// The identifiers and time stamp of one response (every chunk of a stream repeats them).
struct ApiResponseHead {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
};

nlohmann::json api_usage(int prompt_tokens, int completion_tokens);
// The non-streamed response object (text_completion / chat.completion).
nlohmann::json api_response(const ApiResponseHead& h, const ApiResult& r);
// One streamed chunk carrying `text` (for chat, `first` adds role "assistant" to the delta), or,
// with `finish_reason` set, the last choice chunk. `with_usage_null`: stream_options.include_usage
// asks that every chunk carry "usage": null.
nlohmann::json api_chunk(const ApiResponseHead& h, const std::string& text, bool first,
                         const FinishReason* finish_reason, bool with_usage_null,
                         const nlohmann::json& logprobs = nullptr);
// The usage chunk that ends a stream when include_usage is set (empty choices).
nlohmann::json api_usage_chunk(const ApiResponseHead& h, int prompt_tokens, int completion_tokens);
// GET /v1/models.
nlohmann::json api_models(const std::string& served_model, int64_t created);

}  // namespace llama2
