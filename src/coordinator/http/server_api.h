// The HTTP front's routes beside generation (docs/serving.md, "OpenAI-compatible HTTP"), in vLLM's
// shapes, apart from the HTTP library so that unit tests run exactly this code:
//   POST /tokenize    {"prompt": "...", "add_special_tokens": true} or {"messages": [...]}
//                     -> {"count", "max_model_len", "tokens", "token_strs"}
//   POST /detokenize  {"tokens": [...]} -> {"prompt": "..."}
//   GET  /version     {"version": "0.1.0"}
//   GET  /health      liveness; GET /ready: readiness (probe_status)
// Tokenizing runs on the connection's own thread with rank 0's tokenizer (Tokenizer's methods
// are const and thread-safe), never on the engine thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/openai_api.h"

namespace llama2 {

class Tokenizer;

// The version /version reports and system_fingerprint hashes (CMake's project version).
const char* llama2_version();

// An answer of a route: the body, or the error to send.
struct ApiAnswer {
  std::optional<ApiError> error;
  nlohmann::json body;
  std::vector<std::string> ignored;  // fields ignored (IgnoredFieldLog), as for generations
};

// POST /tokenize. "model" is optional (when given it must be served). A prompt is encoded as
// /v1/completions would, <s> first unless "add_special_tokens" is false; messages exactly as
// /v1/chat/completions would (the Llama-2 format writes its own <s>, so "add_special_tokens"
// changes nothing there), so that "count" is the prompt_tokens a generation would report.
// `max_model_len`: the longest prompt + output one request may have.
ApiAnswer api_tokenize(const std::string& body, const Tokenizer& tok, const ApiContext& ctx,
                       int64_t max_model_len);
// POST /detokenize: "tokens", ids in [0, vocab); control tokens (<s>, </s>) decode to nothing.
ApiAnswer api_detokenize(const std::string& body, const Tokenizer& tok, const ApiContext& ctx);

// GET /tokenizer_info: vLLM's shape, the tokenizer's configuration as Hugging Face's
// tokenizer_config.json writes it for a Llama tokenizer ("tokenizer_class", "bos_token",
// "eos_token", "unk_token", "pad_token", "add_bos_token", "add_eos_token", "model_max_length",
// ...). lm-evaluation-harness's remote tokenizer reads it (with /tokenize and /detokenize). No
// "chat_template": the Llama-2 chat format is the server's own (chat_format.h), not a template.
nlohmann::json api_tokenizer_info(const Tokenizer& tok, int64_t max_model_len);

// What a probe route answers for the server's health status ("starting" while the model loads,
// "ready", "draining", "stalled").
enum class Probe {
  kLiveness,   // GET /health: 200 while the process serves, 503 once the engine stalled
  kReadiness,  // GET /ready: 200 only when "ready" (new requests are taken)
};
int probe_status(Probe probe, const std::string& status);

}  // namespace llama2
