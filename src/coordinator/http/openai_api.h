// The OpenAI-compatible HTTP front's request and response bodies (docs/PROTOCOL.md, "HTTP"), apart
// from the HTTP library so that unit tests (and the fuzz target, later) run exactly this code.
//
// A request body is translated into the project's own request object (request.h's keys:
// max_tokens -> max_new_tokens, a token-id prompt -> prompt_tokens, ...) and validated by
// parse_request_fields, the same code the socket protocol and `batch` use: every sampling range,
// the chat order rule and the token-id checks have one place. Which fields are read, ignored or
// refused is api_fields.h's table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/http/api_fields.h"
#include "coordinator/requests/codes.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/requests/request_tools.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

// How an error code reaches an HTTP client: its status and OpenAI's error type
// ("invalid_request_error", "rate_limit_error", "server_error").
struct HttpErrorClass {
  int status;
  const char* type;
  // OpenAI's own "code" for the same error (prompt_too_long: "context_length_exceeded"); nullptr:
  // the project's name (codes.h).
  const char* openai_code;
};
// The one table (openai_api.cpp) of every ErrorCode's status and type: 400 for a bad request
// (invalid_request, prompt_too_long, unsupported_parameter), 401 invalid_api_key, 404
// model_not_found / not_found, 413 body_too_large, 429 queue_full / too_many_in_flight, 503 for
// a server that cannot take it now (shutting_down, starting, stalled, server_busy), 500 internal.
HttpErrorClass http_error_class(ErrorCode code);
// The error object's "code": the table's openai_code, else the project's name (codes.h).
const char* api_error_code_name(ErrorCode code);

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
// A body as a JSON object (valid UTF-8, nesting bounded, an object), or the 400 to answer.
std::optional<ApiError> parse_json_object(const std::string& body, nlohmann::json* j);

// What the front needs to judge a body.
struct ApiContext {
  // The names a request's "model" may give (--served-model-name's aliases; the first is the one
  // /metrics labels); /v1/models lists them all.
  std::vector<std::string> served_models;
  SamplingParams defaults;  // serve's sampling defaults
  ModelConfig config;
  bool strict = false;  // --strict-api: unknown fields are refused (400) instead of ignored
  // --max-new-tokens when given on the command line: it caps an absent max_tokens' rest of the
  // context; unset, nothing does.
  std::optional<int> max_tokens_cap;
  std::string system_fingerprint;  // api_system_fingerprint(...)
};

// True when `model` is one of ctx.served_models.
bool serves_model(const ApiContext& ctx, const std::string& model);
// The error for a body whose "model" is not a served name (404 model_not_found), or missing when
// `required` (400); nullopt when fine.
std::optional<ApiError> api_model_error(const nlohmann::json& body, const ApiContext& ctx,
                                        bool required);

// Scoring for evaluations (docs/serving.md): completions' echo puts the prompt before the
// completion, and with logprobs k its tokens' logprobs (echo_top = k; -1: no logprobs); vLLM's
// prompt_logprobs k adds its own field. The engine scores the prompt with the larger k
// (SamplingParams::prompt_logprobs); prompt_scoring.h writes the answer.
struct ApiScoring {
  bool echo = false;
  int echo_top = -1;
  std::optional<int> prompt_logprobs;
  std::string echo_text;    // a text prompt as the client wrote it (a token-id prompt: decoded)
  std::vector<int> prompt;  // the prompt's ids, once tokenized (only when scoring)
};

// The limits on batched prompts and choices (OpenAI's `n`): each choice is a sequence of its own.
constexpr int kMaxPrompts = 64;
constexpr int kMaxChoicesPerPrompt = 16;
constexpr int kMaxChoices = 256;  // prompts x n

// A prompt after the first of a batched /v1/completions request.
struct ApiPrompt {
  ParsedRequest request;  // the same fields as ApiRequest::request, its own prompt
  std::string echo_text;  // a text prompt as written (echo)
};

struct ApiRequest {
  ApiKind kind = ApiKind::kCompletion;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;
  // The client's max-tokens key (max_tokens, or chat's max_completion_tokens), "" when absent:
  // then request.params.max_new_tokens is 1 until the prompt is tokenized (the prompt must leave
  // room for one token) and api_default_max_tokens gives the rest of the context.
  std::string max_tokens_key;
  std::vector<std::string> ignored;  // fields ignored (api_fields.h), for the log
  ApiScoring scoring;
  int n = 1;  // choices per prompt, each a sequence (seeded: seed + its index within the prompt)
  std::vector<ApiPrompt> more_prompts;  // completions' batched prompts after the first
  ParsedRequest request;  // validated, text_pending until tokenized (tokenize_request)
};

// Parses and validates one body; the request, or the error to answer with.
struct ApiParse {
  std::optional<ApiError> error;
  ApiRequest request;
};
ApiParse parse_api_request(const std::string& body, ApiKind kind, const ApiContext& ctx);

// The error for an admission refusal (prepare_prompt's) of `request`: prompt_too_long names
// "prompt" / "messages" as its param, and messages use the client's key names.
ApiError api_refusal(const Refusal& refusal, const ApiRequest& request);

// max_new_tokens for a request without max_tokens, once its prompt is tokenized: the rest of the
// context (the smallest of `limits`, as vLLM does with its max_model_len), capped by `cap`
// (--max-new-tokens when given). At least 1: prepare_prompt refused a prompt that leaves no room.
int api_default_max_tokens(int prompt_tokens, const PromptLimits& limits, std::optional<int> cap);

// The request key a validation message is about, in the client's terms ("" when none): the
// shared validators begin every message with the key (sampling_params.h), e.g. "top_p must be in
// (0, 1] (got 1.5)" -> "top_p", "messages[1].role: ..." -> "messages"; max_new_tokens becomes
// `max_key` (the client's), prompt_tokens "prompt".
std::string api_error_param(const std::string& message, ApiKind kind, const std::string& max_key);

// OpenAI's finish_reason for the project's: OpenAI's clients know only "stop", "length" (and
// "tool_calls", "content_filter"), and some parse it into a closed enum. A timeout or the server's
// shutdown cut the output short as a length limit does: "length"; a cancel ends it at the
// client's wish: "stop". The project's own reason goes in kVendorFinishReason beside it.
const char* api_finish_reason(FinishReason finish_reason);
// The choice field that carries the project's finish reason (codes.h's names: stop, length,
// cancelled, timeout, shutting_down), wherever "finish_reason" is set.
constexpr const char* kVendorFinishReason = "llama2_finish_reason";

// "fp_" and 16 hex digits of a hash of `build` (the server's version) and `config` (what
// determines the output for given parameters: the model's config.json, the weights' and KV
// cache's dtypes, ...): stable across restarts of the same build on the same model.
std::string api_system_fingerprint(const std::string& build, const nlohmann::json& config);

// One finished generation, as the engine reported it.
struct ApiResult {
  FinishReason finish_reason = FinishReason::kStop;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::string text;
  nlohmann::json logprobs = nullptr;  // api_logprobs(...) when the request asked, else null
  int cached_tokens = 0;              // prompt tokens found in the prefix cache
  // The answer's tool calls (parse_tool_calls) when it made some: then the message has
  // "tool_calls", "content": null, and finish_reason is "tool_calls" (tool_api.h).
  std::optional<std::vector<ToolCall>> tool_calls = std::nullopt;
  nlohmann::json prompt_logprobs = nullptr;  // vLLM's field when the request asked (else null)
  int index = 0;                             // the choice's index (prompt x n + j)
  nlohmann::json speculative = nullptr;      // speculative_json (request.h); null: not reported
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
// A token's string in those objects.
std::string api_token_string(const Tokenizer& tokenizer, int id);

// The identifiers and time stamp of one response (every chunk of a stream repeats them).
struct ApiResponseHead {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;               // the name the request gave
  std::string system_fingerprint;  // ApiContext::system_fingerprint
  bool tools = false;              // the request has callable tools: its answer is read for calls
};

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details":
// {"cached_tokens"}}.
nlohmann::json api_usage(int prompt_tokens, int completion_tokens, int cached_tokens);
// The non-streamed response object (text_completion / chat.completion).
nlohmann::json api_response(const ApiResponseHead& h, const ApiResult& r);
// With several choices (n, batched prompts), in index order, and the request's usage.
nlohmann::json api_response(const ApiResponseHead& h, const std::vector<ApiResult>& choices,
                            const nlohmann::json& usage);
// One streamed chunk carrying `text` (for chat, `first` adds role "assistant" to the delta), or,
// with `finish_reason` set, the last choice chunk. `with_usage_null`: stream_options.include_usage
// asks that every chunk carry "usage": null.
nlohmann::json api_chunk(const ApiResponseHead& h, const std::string& text, bool first,
                         const FinishReason* finish_reason, bool with_usage_null,
                         const nlohmann::json& logprobs = nullptr, int index = 0);
// The usage chunk that ends a stream when include_usage is set (empty choices).
nlohmann::json api_usage_chunk(const ApiResponseHead& h, int prompt_tokens, int completion_tokens,
                               int cached_tokens);
// GET /v1/models: every served name.
nlohmann::json api_models(const std::vector<std::string>& served_models, int64_t created);
// GET /v1/models/{id}: one model object.
nlohmann::json api_model(const std::string& id, int64_t created);

}  // namespace llama2
