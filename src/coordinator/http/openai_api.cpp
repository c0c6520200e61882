#include "coordinator/http/openai_api.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <set>

#include "common/frame.h"
#include "coordinator/http/structured_fields.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

using nlohmann::json;

namespace {

ApiError invalid(const std::string& message, const std::string& param,
                 ErrorCode code = ErrorCode::kInvalidRequest) {
  return api_error(code, message, param);
}

ApiError unsupported(const std::string& param, const std::string& what) {
  return invalid(what + " is not supported by this server", param,
                 ErrorCode::kUnsupportedParameter);
}

// Indexed by ErrorCode (the static_assert keeps it as long as the enum).
constexpr HttpErrorClass kHttpErrors[] = {
    {400, "invalid_request_error", nullptr},                    // invalid_request
    {400, "invalid_request_error", "context_length_exceeded"},  // prompt_too_long
    {429, "rate_limit_error", nullptr},                         // queue_full
    {429, "rate_limit_error", nullptr},                         // too_many_in_flight
    {503, "server_error", nullptr},                             // too_many_connections
    {503, "server_error", nullptr},                             // shutting_down
    {500, "server_error", nullptr},                             // internal
    {400, "invalid_request_error", nullptr},                    // unsupported_parameter
    {404, "invalid_request_error", nullptr},                    // model_not_found
    {404, "invalid_request_error", nullptr},                    // not_found
    {413, "invalid_request_error", nullptr},                    // body_too_large
    {401, "invalid_request_error", nullptr},                    // invalid_api_key
    {503, "server_error", nullptr},                             // starting
    {503, "server_error", nullptr},                             // stalled
    {503, "server_error", nullptr},                             // server_busy
    {400, "invalid_request_error", nullptr},                    // invalid_json
    {400, "invalid_request_error", nullptr},                    // duplicate_custom_id
};
static_assert(sizeof(kHttpErrors) / sizeof(kHttpErrors[0]) == kErrorCodeCount);

bool given(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

// One prompt of /v1/completions, a string or an array of token ids, as the project's key.
std::optional<ApiError> prompt_entry(const json& p, json* out) {
  out->erase("prompt");
  out->erase("prompt_tokens");
  if (p.is_string()) {
    (*out)["prompt"] = p;
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    (*out)["prompt_tokens"] = p;  // every id is checked by parse_request_fields
  } else {
    return invalid("\"prompt\" must be a string, an array of token ids, or an array of up to " +
                       std::to_string(kMaxPrompts) + " of either (got " + quote_json(p) + ")",
                   "prompt");
  }
  return std::nullopt;
}

// The prompt of /v1/completions: one prompt, or an array of prompts (strings or token-id
// arrays): the first into `out`, the others into `more` (OpenAI's batched prompts).
std::optional<ApiError> translate_prompt(const json& j, json* out, std::vector<json>* more) {
  if (!given(j, "prompt")) return invalid("\"prompt\" is required", "prompt");
  const json& p = j["prompt"];
  if (!(p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())))
    return prompt_entry(p, out);
  if (p.size() > static_cast<size_t>(kMaxPrompts)) {
    return invalid("\"prompt\" may hold at most " + std::to_string(kMaxPrompts) + " prompts (got " +
                       std::to_string(p.size()) + ")",
                   "prompt");
  }
  for (size_t i = 1; i < p.size(); ++i) {
    json one = json::object();
    if (auto e = prompt_entry(p[i], &one)) return e;
    more->push_back(std::move(one));
  }
  return prompt_entry(p[0], out);
  return std::nullopt;
}

// The one max-tokens key the client used (max_completion_tokens wins, as OpenAI documents).
const char* max_tokens_key(const json& j, ApiKind kind) {
  if (kind == ApiKind::kChat && given(j, "max_completion_tokens")) return "max_completion_tokens";
  return given(j, "max_tokens") ? "max_tokens" : nullptr;
}

// parse_request_fields names the project's keys; the client wrote OpenAI's (an absent one is
// max_tokens: the message is about the one token the prompt must leave room for).
std::string in_client_terms(std::string message, const std::string& max_key) {
  const std::string from = "max_new_tokens";
  const std::string to = max_key.empty() ? "max_tokens" : max_key;
  for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at))
    message.replace(at, from.size(), to);
  return message;
}

// The served names, for messages: "a", "b".
std::string served_list(const ApiContext& ctx) {
  std::string s;
  for (const std::string& m : ctx.served_models) s += (s.empty() ? "\"" : ", \"") + m + "\"";
  return s;
}

}  // namespace

HttpErrorClass http_error_class(ErrorCode code) {
  return kHttpErrors[static_cast<size_t>(code)];
}

ApiError api_error(ErrorCode code, std::string message, std::string param) {
  ApiError e;
  e.code = code;
  e.message = std::move(message);
  e.param = std::move(param);
  e.status = http_error_class(code).status;
  return e;
}

std::optional<ApiError> parse_json_object(const std::string& body, json* j) {
  if (!is_valid_utf8(body)) return invalid("the body is not valid UTF-8", "");
  if (json_nesting_exceeds(body, kMaxJsonDepth)) {
    return invalid("the body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                   "");
  }
  *j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return invalid("the body is not valid JSON", "");
  if (!j->is_object()) return invalid("the body must be a JSON object", "");
  return std::nullopt;
}

const char* api_error_code_name(ErrorCode code) {
  const char* openai = http_error_class(code).openai_code;
  return openai != nullptr ? openai : to_string(code);
}

json api_error_body(const ApiError& e) {
  return json{{"error",
               {{"message", e.message},
                {"type", http_error_class(e.code).type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", api_error_code_name(e.code)}}}};
}

bool serves_model(const ApiContext& ctx, const std::string& model) {
  for (const std::string& m : ctx.served_models)
    if (m == model) return true;
  return false;
}

std::optional<ApiError> api_model_error(const json& j, const ApiContext& ctx, bool required) {
  if (!given(j, "model") && !required) return std::nullopt;
  if (!given(j, "model") || !j["model"].is_string())
    return invalid("\"model\" is required (a string: " + served_list(ctx) + ")", "model");
  const std::string& model = j["model"].get_ref<const std::string&>();
  if (serves_model(ctx, model)) return std::nullopt;
  return invalid(
      "the model " + quote(model) + " does not exist (this server serves " + served_list(ctx) + ")",
      "model", ErrorCode::kModelNotFound);
}

namespace {

// The body as a JSON object naming a served model and no field that would change the output
// unimplemented (under --strict-api, no unknown field either); else the error.
std::optional<ApiError> parse_envelope(const std::string& body, ApiKind kind, const ApiContext& ctx,
                                       json* j) {
  if (std::optional<ApiError> e = parse_json_object(body, j)) return e;
  for (const auto& item : j->items()) {
    if (ctx.strict && !strict_api_key(item.key(), kind)) {
      return invalid("unknown parameter " + quote(item.key()) +
                         " (--strict-api; allowed: " + strict_api_keys(kind) + ")",
                     item.key());
    }
  }
  // The model before any value: a client talking to the wrong server learns that first.
  if (std::optional<ApiError> e = api_model_error(*j, ctx, /*required=*/true)) return e;
  if (const std::optional<RefusedField> r = refused_field(*j))
    return unsupported(r->param, r->what);
  return std::nullopt;
}

// "echo" (completions only) and "prompt_logprobs" into `out`, and the engine's prompt_logprobs
// into `mine`: the most alternatives either asks for. Streams do not carry prompt logprobs.
std::optional<ApiError> parse_scoring(const json& j, ApiKind kind, ApiRequest* req, json* mine) {
  ApiScoring* out = &req->scoring;
  if (given(j, "echo")) {
    if (!j["echo"].is_boolean()) return invalid("\"echo\" must be true or false", "echo");
    out->echo = j["echo"].get<bool>();
  }
  if (out->echo && kind == ApiKind::kChat)
    return unsupported("echo", "\"echo\": true in chat completions");
  if (given(j, "prompt_logprobs")) {
    if (!j["prompt_logprobs"].is_number_integer())
      return invalid(
          "\"prompt_logprobs\" must be an integer: the alternatives per prompt token, 0.." +
              std::to_string(kMaxTopLogprobs) + " (got " + quote_json(j["prompt_logprobs"]) + ")",
          "prompt_logprobs");
    const int64_t k = j["prompt_logprobs"].get<int64_t>();
    if (k < 0 || k > kMaxTopLogprobs) {
      return invalid("prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                         "] (got " + std::to_string(k) + ")",
                     "prompt_logprobs");
    }
    out->prompt_logprobs = static_cast<int>(k);
  }
  if (out->echo && given(j, "logprobs") && j["logprobs"].is_number_integer())
    out->echo_top = j["logprobs"].get<int>();
  const char* max_key = max_tokens_key(j, kind);
  const bool none = max_key != nullptr && j[max_key].is_number_integer() && j[max_key] == 0;
  if (out->echo && mine->contains("prompt")) out->echo_text = (*mine)["prompt"].get<std::string>();
  int k = std::max(out->echo_top, out->prompt_logprobs.value_or(-1));
  if (k < 0 && out->echo && none) k = 0;  // echo alone with max_tokens 0: the prompt, unscored
  if (k >= 0) {
    if (req->stream) {
      return unsupported(out->prompt_logprobs ? "prompt_logprobs" : "echo",
                         "a prompt's logprobs in a stream (\"stream\": true)");
    }
    (*mine)["prompt_logprobs"] = k;
  }
  return std::nullopt;
}

// "n": the choices per prompt, [1, kMaxChoicesPerPrompt], and at most kMaxChoices in all.
std::optional<ApiError> parse_n(const json& j, size_t prompts, ApiRequest* out) {
  if (!given(j, "n")) return std::nullopt;
  const json& n = j["n"];
  if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > kMaxChoicesPerPrompt) {
    return invalid("n must be an integer in [1, " + std::to_string(kMaxChoicesPerPrompt) +
                       "] (got " + quote_json(n) + ")",
                   "n");
  }
  out->n = n.get<int>();
  if (prompts * static_cast<size_t>(out->n) > static_cast<size_t>(kMaxChoices)) {
    return invalid(std::to_string(prompts) + " prompts x n " + std::to_string(out->n) +
                       " choices exceed " + std::to_string(kMaxChoices),
                   "n");
  }
  return std::nullopt;
}

// "stream" and "stream_options" into `out`.
std::optional<ApiError> parse_streaming(const json& j, ApiRequest* out) {
  if (given(j, "stream")) {
    if (!j["stream"].is_boolean()) return invalid("\"stream\" must be true or false", "stream");
    out->stream = j["stream"].get<bool>();
  }
  if (!given(j, "stream_options")) return std::nullopt;
  const json& so = j["stream_options"];
  if (!out->stream)
    return invalid("\"stream_options\" is only allowed with \"stream\": true", "stream_options");
  if (!so.is_object() || (so.contains("include_usage") && !so["include_usage"].is_boolean()))
    return invalid("\"stream_options\" must be {\"include_usage\": true|false}", "stream_options");
  out->include_usage = so.value("include_usage", false);
  return std::nullopt;
}

// The project's request object (request.h's keys) for an OpenAI body, validated there like the
// socket protocol's and batch's: max_tokens -> max_new_tokens, a token-id prompt ->
// prompt_tokens, logprobs in the project's two keys.
std::optional<ApiError> translate_fields(const json& j, ApiKind kind, json* mine,
                                         std::vector<json>* more) {
  for (const std::string& k : kSameNameKeys)
    if (given(j, k.c_str())) (*mine)[k] = j[k];
  // Absent: the rest of the context once the prompt is tokenized (api_default_max_tokens); until
  // then 1, the room the prompt must leave.
  const char* max_key = max_tokens_key(j, kind);
  (*mine)["max_new_tokens"] = max_key != nullptr ? j[max_key] : json(1);
  // Logprobs: chat's logprobs (bool) + top_logprobs are the project's keys; completions' logprobs
  // is the number of alternatives (0 = the chosen token's only). Validated with the others.
  if (kind == ApiKind::kChat) {
    for (const char* k : {"logprobs", "top_logprobs"})
      if (given(j, k)) (*mine)[k] = j[k];
  } else if (given(j, "logprobs")) {
    if (!j["logprobs"].is_number_integer())
      return invalid("\"logprobs\" must be an integer: the number of alternatives, 0.." +
                         std::to_string(kMaxTopLogprobs) + " (got " + quote_json(j["logprobs"]) +
                         ")",
                     "logprobs");
    (*mine)["logprobs"] = true;
    (*mine)["top_logprobs"] = j["logprobs"];
  }
  if (auto e = translate_structured_fields(j, mine)) return e;  // structured_fields.h
  if (kind == ApiKind::kCompletion) {
    if (given(j, "tools") && !j["tools"].empty())
      return unsupported("tools", "\"tools\" on /v1/completions (use /v1/chat/completions)");
    return translate_prompt(j, mine, more);
  }
  for (const char* k : {"tools", "tool_choice", "parallel_tool_calls"})  // request_tools.h
    if (given(j, k)) (*mine)[k] = j[k];
  if (!given(j, "messages")) return invalid("\"messages\" is required", "messages");
  (*mine)["messages"] = j["messages"];
  return std::nullopt;
}

}  // namespace

ApiParse parse_api_request(const std::string& body, ApiKind kind, const ApiContext& ctx) {
  ApiParse out;
  json j, mine = json::object();
  std::vector<json> more;  // the prompts after the first
  out.error = parse_envelope(body, kind, ctx, &j);
  if (!out.error) out.error = parse_streaming(j, &out.request);
  if (!out.error) out.error = translate_fields(j, kind, &mine, &more);
  if (!out.error) out.error = parse_n(j, more.size() + 1, &out.request);
  if (!out.error) out.error = parse_scoring(j, kind, &out.request, &mine);
  if (out.error) return out;
  out.request.kind = kind;
  out.request.model = j["model"].get<std::string>();
  const char* max_key = max_tokens_key(j, kind);
  out.request.max_tokens_key = max_key != nullptr ? max_key : "";
  out.request.ignored = ignored_fields(j, kind);
  out.request.request = parse_request_fields(mine, ctx.defaults, ctx.config, {});
  for (const json& one : more) {
    ApiPrompt p;
    if (out.request.scoring.echo && one.contains("prompt")) p.echo_text = one["prompt"];
    json m = mine;  // every field of the first prompt's request but the prompt
    m.erase("prompt");
    m.erase("prompt_tokens");
    m.update(one);
    p.request = parse_request_fields(m, ctx.defaults, ctx.config, {});
    out.request.more_prompts.push_back(std::move(p));
  }
  for (size_t i = 0; i <= out.request.more_prompts.size() && !out.error; ++i) {
    const ParsedRequest& r = i == 0 ? out.request.request : out.request.more_prompts[i - 1].request;
    if (!r.ok()) out.error = api_refusal(Refusal{*r.error_code, r.error_message}, out.request);
  }
  return out;
}

ApiError api_refusal(const Refusal& refusal, const ApiRequest& request) {
  const std::string message = in_client_terms(refusal.message, request.max_tokens_key);
  std::string param;
  if (refusal.code == ErrorCode::kPromptTooLong) {
    param = request.kind == ApiKind::kChat ? "messages" : "prompt";
  } else if (refusal.code == ErrorCode::kInvalidRequest) {
    param = api_error_param(refusal.message, request.kind, request.max_tokens_key);
  }
  return api_error(refusal.code, message, param);
}

int api_default_max_tokens(int prompt_tokens, const PromptLimits& limits, std::optional<int> cap) {
  const int64_t rest =
      std::min<int64_t>(limits.max_tokens(), std::numeric_limits<int>::max()) - prompt_tokens;
  const int64_t n = cap ? std::min<int64_t>(rest, *cap) : rest;
  return static_cast<int>(std::max<int64_t>(n, 1));
}

std::string api_error_param(const std::string& message, ApiKind kind, const std::string& max_key) {
  size_t at = message.empty() || message[0] != '"' ? 0 : 1;
  size_t end = at;
  while (end < message.size() &&
         (std::islower(static_cast<unsigned char>(message[end])) || message[end] == '_')) {
    ++end;
  }
  const std::string key = message.substr(at, end - at);
  if (key == "max_new_tokens") return max_key.empty() ? "max_tokens" : max_key;
  if (key == "prompt_tokens") return "prompt";
  // Completions' logprobs is the number of alternatives: the project's top_logprobs.
  if (key == "top_logprobs" && kind == ApiKind::kCompletion) return "logprobs";
  return field_use(key, kind) == FieldUse::kRead ? key : "";
}

const char* api_finish_reason(FinishReason finish_reason) {
  switch (finish_reason) {
    case FinishReason::kStop:
    case FinishReason::kCancelled:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kTimeout:
    case FinishReason::kShuttingDown:
      return "length";
  }
  return "stop";
}

std::string api_system_fingerprint(const std::string& build, const json& config) {
  // FNV-1a, 64 bits: stable across runs and platforms (std::hash is neither), and collisions
  // between configurations of one deployment are not a concern.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : build + "\n" + config.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[24];
  std::snprintf(out, sizeof(out), "fp_%016llx", static_cast<unsigned long long>(h));
  return out;
}

json api_usage(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

namespace {
json head_object(const ApiResponseHead& h, bool chunk) {
  const char* object = h.kind == ApiKind::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return json{{"id", h.id},
              {"object", object},
              {"created", h.created},
              {"model", h.model},
              {"system_fingerprint", h.system_fingerprint}};
}
}  // namespace

namespace {
// A token's string and bytes for the logprobs objects (see api_logprobs in the header).
std::pair<std::string, json> token_text(const Tokenizer& tok, int id) {
  std::string piece = tok.id_to_piece(id);
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    const int byte = std::stoi(piece.substr(3, 2), nullptr, 16);
    if (byte < 0x80) return {std::string(1, static_cast<char>(byte)), json::array({byte})};
    return {piece, json::array({byte})};
  }
  const std::string space = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary
  for (size_t at = piece.find(space); at != std::string::npos; at = piece.find(space, at))
    piece.replace(at, space.size(), " ");
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return {piece, bytes};
}
}  // namespace

std::string api_token_string(const Tokenizer& tokenizer, int id) {
  return token_text(tokenizer, id).first;
}

json api_logprobs(ApiKind kind, const std::vector<ApiTokenLogprobs>& tokens,
                  const Tokenizer& tokenizer, int text_offset) {
  if (kind == ApiKind::kChat) {
    json content = json::array();
    for (const ApiTokenLogprobs& t : tokens) {
      auto [text, bytes] = token_text(tokenizer, t.token);
      json top = json::array();
      for (const TopLogprob& a : t.top) {
        auto [atext, abytes] = token_text(tokenizer, a.token);
        top.push_back(json{{"token", atext}, {"logprob", a.logprob}, {"bytes", abytes}});
      }
      content.push_back(
          json{{"token", text}, {"logprob", t.logprob}, {"bytes", bytes}, {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int offset = text_offset;
  for (const ApiTokenLogprobs& t : tokens) {
    const std::string text = token_text(tokenizer, t.token).first;
    toks.push_back(text);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TopLogprob& a : t.top) top[token_text(tokenizer, a.token).first] = a.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += static_cast<int>(text.size());
  }
  return json{
      {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json api_response(const ApiResponseHead& h, const ApiResult& r) {
  return api_response(h, std::vector<ApiResult>{r},
                      api_usage(r.prompt_tokens, r.completion_tokens, r.cached_tokens));
}

json api_response(const ApiResponseHead& h, const std::vector<ApiResult>& choices,
                  const json& usage) {
  json out = head_object(h, false);
  out["choices"] = json::array();
  for (const ApiResult& r : choices) {
    json choice{{"index", r.index},
                {"finish_reason", api_finish_reason(r.finish_reason)},
                {kVendorFinishReason, to_string(r.finish_reason)},
                {"logprobs", r.logprobs}};
    if (h.kind == ApiKind::kChat && r.tool_calls) {
      choice["message"] = {{"role", "assistant"},
                           {"content", nullptr},
                           {"tool_calls", tool_calls_json(*r.tool_calls)}};
      choice["finish_reason"] = "tool_calls";
    } else if (h.kind == ApiKind::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    } else {
      choice["text"] = r.text;
    }
    // vLLM puts prompt_logprobs in the choice of a completion, beside the choices of a chat.
    if (!r.prompt_logprobs.is_null())
      (h.kind == ApiKind::kChat ? out : choice)["prompt_logprobs"] = r.prompt_logprobs;
    if (!r.speculative.is_null()) choice["speculative"] = r.speculative;  // our extension
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = usage;
  return out;
}

json api_chunk(const ApiResponseHead& h, const std::string& text, bool first,
               const FinishReason* finish_reason, bool with_usage_null, const json& logprobs,
               int index) {
  json out = head_object(h, true);
  json choice{
      {"index", index},
      {"logprobs", logprobs},
      {"finish_reason", finish_reason ? json(api_finish_reason(*finish_reason)) : json(nullptr)}};
  if (finish_reason) choice[kVendorFinishReason] = to_string(*finish_reason);
  if (h.kind == ApiKind::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  if (with_usage_null) out["usage"] = nullptr;
  return out;
}

json api_usage_chunk(const ApiResponseHead& h, int prompt_tokens, int completion_tokens,
                     int cached_tokens) {
  json out = head_object(h, true);
  out["choices"] = json::array();
  out["usage"] = api_usage(prompt_tokens, completion_tokens, cached_tokens);
  return out;
}

json api_model(const std::string& id, int64_t created) {
  return json{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "llama2"}};
}

json api_models(const std::vector<std::string>& served_models, int64_t created) {
  json data = json::array();
  for (const std::string& m : served_models) data.push_back(api_model(m, created));
  return json{{"object", "list"}, {"data", data}};
}

}  // namespace llama2
