// One generation request as the batch file and the socket protocol express it: a JSON object with
// a prompt (text or token ids) and sampling values overriding the defaults. Validation is split in
// two so that the socket thread can refuse bad requests at once and leave the one slow part,
// tokenizing a long text prompt, to another thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/requests/codes.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/text/chat_format.h"

namespace llama2 {

class Tokenizer;
class ConstraintCompiler;
struct RequestConstraint;
struct ToolRequest;

struct ParsedRequest {
  std::vector<int> prompt;  // token ids (BOS added to text prompts), once known
  std::string prompt_text;  // a text prompt parse_request_fields() left to tokenize_request()
  // `messages`: the dialog parse_request_fields() checked and left to tokenize_request(), which
  // encodes it in the Llama-2 chat format (text/chat_format.h).
  std::vector<ChatMessage> chat;
  bool is_chat = false;
  bool text_pending = false;  // prompt_text or chat still to tokenize
  // Bytes of text still to tokenize (the prompt, or every message's content).
  size_t pending_bytes() const;
  SamplingParams params;  // defaults overridden by the request's keys, validated
  // The output constraint its keys ask for (request_constraint.h); null: none. Compiled by
  // prepare_prompt.
  std::shared_ptr<RequestConstraint> constraint;
  // The callable tools (request_tools.h); null when none (then `constraint` is not the tool
  // calls'). Rendered into the dialog; the answer is read for calls by the endpoint.
  std::shared_ptr<const ToolRequest> tools;
  // Unset when valid; else kInvalidRequest | kPromptTooLong (batch lines: kInvalidJson,
  // kDuplicateCustomId) and a message naming the key or the limit.
  std::optional<ErrorCode> error_code;
  std::string error_message;
  bool ok() const { return !error_code.has_value(); }
};

// Keys every request may carry besides `extra_keys` (e.g. custom_id, id, stream); the constraint
// keys (kConstraintKeys) are among them.
extern const std::set<std::string> kRequestKeys;

// Client text quoted in an error message: at most this many bytes of it.
constexpr size_t kMaxQuoteBytes = 200;

// `text` in double quotes when it has at most kMaxQuoteBytes bytes; else its first bytes (cut at
// a character boundary) and the original length: "abc..." (1048576 bytes). Messages quote client
// input only through this (or quote_json), so an error reply stays small whatever was sent.
std::string quote(const std::string& text);
// A JSON value quoted the same way: a string as above, anything else dumped and then cut.
std::string quote_json(const nlohmann::json& value);

// Everything but tokenizing: unknown keys, sampling values, exactly one prompt, token ids inside
// the vocabulary and, for token ids, the length against max_position_embeddings. A text prompt is
// moved to prompt_text (text_pending) for tokenize_request(). Never throws for bad input: the
// problem is returned as error_code + a message naming the key and the allowed values.
ParsedRequest parse_request_fields(const nlohmann::json& obj, const SamplingParams& defaults,
                                   const ModelConfig& config,
                                   const std::set<std::string>& extra_keys);

// Tokenizes a pending text prompt (BOS first) and checks its length; a no-op when the request is
// not ok() or has no pending text. Safe to call from any thread (Tokenizer::encode is const).
void tokenize_request(ParsedRequest& r, const Tokenizer& tok, const ModelConfig& config);

// The one admission step both endpoints (the socket, the HTTP front) run on their own threads
// before a request reaches the engine: tokenizes a pending prompt (tokenize_request), then checks
// prompt + max_new_tokens against `limits` (the server's: --max-seq-len, the KV cache), then
// compiles its constraint, if any, through `constraints` (its errors are invalid_request). nullopt
// when the request can be queued, else why not: its own error, prompt_too_long, or internal when
// the tokenizer failed. Any thread.
std::optional<Refusal> prepare_prompt(ParsedRequest& r, const Tokenizer& tok,
                                      const ModelConfig& config, const PromptLimits& limits,
                                      ConstraintCompiler& constraints);

// Compiles the request's constraint, if any, when it is ok(); a compilation error becomes its
// error (invalid_request, the compiler's message naming the keyword or rule). Any thread.
void compile_request_constraint(ParsedRequest& r, ConstraintCompiler& constraints);

// Both steps (the batch command's path).
ParsedRequest parse_request(const nlohmann::json& obj, const SamplingParams& defaults,
                            const Tokenizer& tok, const ModelConfig& config,
                            const std::set<std::string>& extra_keys);

// The logprobs output shape shared by the socket protocol and batch lines (docs/PROTOCOL.md):
// one token's alternatives as [{"logprob": x, "token_id": id}, ...], most probable first.
nlohmann::json top_logprobs_json(const std::vector<TopLogprob>& top);
// A finished request's per-token arrays: (*out)["logprobs"] = [n] floats and
// (*out)["top_logprobs"] = [n] arrays of top_logprobs_json (a non-streamed `done`, a batch line).
void add_logprobs_json(const Finished& done, nlohmann::json* out);
// A request with prompt_logprobs: [null, {"token_id", "logprob", "rank", "top_logprobs"}, ...],
// one entry per prompt token (the first has no context: null).
nlohmann::json prompt_logprobs_json(const Finished& done);
// What speculative decoding did for the request (docs/speculative.md): null when the server has
// none and the request did not ask (SpecUse::kNone); else {"status": "on" | "opted_out" |
// "unavailable" | "off_constrained"}, with "proposed_tokens", "accepted_tokens" and
// "verify_steps" when on. A `done` event, a batch line, generate --json and an HTTP choice
// carry it as "speculative".
nlohmann::json speculative_json(const Finished& done);

}  // namespace llama2
