#include "coordinator/http/openai_api.h"

#include <set>

#include "common/frame.h"
#include "coordinator/http/structured_fields.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

using nlohmann::json;

namespace {

// Keys both endpoints take. `user` is accepted and ignored (OpenAI's abuse tracking id);
// top_k, repetition_penalty and ignore_eos are the extensions vLLM also takes.
const std::set<std::string> kCommonKeys = {"model",
                                           "max_tokens",
                                           "temperature",
                                           "top_p",
                                           "seed",
                                           "stop",
                                           "n",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "user",
                                           "stream",
                                           "stream_options",
                                           "logprobs",
                                           "logit_bias",
                                           "top_k",
                                           "repetition_penalty",
                                           "ignore_eos"};
const std::set<std::string> kCompletionKeys = {"prompt", "echo", "best_of", "suffix"};
const std::set<std::string> kChatKeys = {
    "messages",      "max_completion_tokens", "top_logprobs",
    "tools",         "tool_choice",           "functions",
    "function_call", "response_format",       "parallel_tool_calls"};
// Sampling keys whose name is the same in both protocols.
const char* const kSameKeys[] = {"temperature",
                                 "top_p",
                                 "seed",
                                 "stop",
                                 "top_k",
                                 "repetition_penalty",
                                 "presence_penalty",
                                 "frequency_penalty",
                                 "ignore_eos"};

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
    {400, "invalid_request_error"},  // invalid_request
    {400, "invalid_request_error"},  // prompt_too_long
    {429, "rate_limit_error"},       // queue_full
    {429, "rate_limit_error"},       // too_many_in_flight
    {503, "server_error"},           // too_many_connections
    {503, "server_error"},           // shutting_down
    {500, "server_error"},           // internal
    {400, "invalid_request_error"},  // unsupported_parameter
    {404, "invalid_request_error"},  // model_not_found
    {404, "invalid_request_error"},  // not_found
    {413, "invalid_request_error"},  // body_too_large
    {401, "invalid_request_error"},  // invalid_api_key
    {503, "server_error"},           // starting
    {503, "server_error"},           // stalled
    {503, "server_error"},           // server_busy
    {400, "invalid_request_error"},  // invalid_json
    {400, "invalid_request_error"},  // duplicate_custom_id
};
static_assert(sizeof(kHttpErrors) / sizeof(kHttpErrors[0]) == kErrorCodeCount);

bool given(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

std::string list(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> all = a;
  all.insert(b.begin(), b.end());
  std::string s;
  for (const auto& k : all) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// What OpenAI defines and this server does not do; nullopt when the body asks for none of it.
std::optional<ApiError> refuse_unsupported(const json& j, ApiKind kind) {
  if (given(j, "n") && !(j["n"].is_number_integer() && j["n"].get<int64_t>() == 1))
    return invalid("\"n\" must be 1 (one choice per request; got " + quote_json(j["n"]) + ")", "n");
  if (given(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    return unsupported("logit_bias", "\"logit_bias\"");
  if (kind == ApiKind::kCompletion) {
    if (given(j, "echo") && !(j["echo"].is_boolean() && !j["echo"].get<bool>()))
      return unsupported("echo", "\"echo\": true");
    if (given(j, "best_of") && !(j["best_of"].is_number_integer() && j["best_of"] == 1))
      return unsupported("best_of", "\"best_of\" other than 1");
    if (given(j, "suffix")) return unsupported("suffix", "\"suffix\"");
    return std::nullopt;
  }
  for (const char* k : {"tools", "functions"}) {
    if (given(j, k) && !(j[k].is_array() && j[k].empty()))
      return unsupported(k, std::string("\"") + k + "\" (tool calls)");
  }
  for (const char* k : {"tool_choice", "function_call"}) {
    if (given(j, k) && !(j[k].is_string() && j[k] == "none"))
      return unsupported(k, std::string("\"") + k + "\" other than \"none\"");
  }
  return std::nullopt;
}

// The prompt of /v1/completions: a string, an array of token ids, or an array of one of either.
std::optional<ApiError> translate_prompt(const json& j, json* out) {
  if (!given(j, "prompt")) return invalid("\"prompt\" is required", "prompt");
  json p = j["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    (*out)["prompt"] = p;
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    (*out)["prompt_tokens"] = p;  // every id is checked by parse_request_fields
  } else {
    return invalid(
        "\"prompt\" must be a string or an array of token ids (one prompt per request; got " +
            quote_json(p) + ")",
        "prompt");
  }
  return std::nullopt;
}

// The one max-tokens key the client used (max_completion_tokens wins, as OpenAI documents).
const char* max_tokens_key(const json& j, ApiKind kind) {
  if (kind == ApiKind::kChat && given(j, "max_completion_tokens")) return "max_completion_tokens";
  return given(j, "max_tokens") ? "max_tokens" : nullptr;
}

// parse_request_fields names the project's keys; the client wrote OpenAI's.
std::string in_client_terms(std::string message, const char* max_key) {
  if (max_key == nullptr) return message;
  const std::string from = "max_new_tokens";
  for (size_t at = message.find(from); at != std::string::npos; at = message.find(from, at))
    message.replace(at, from.size(), max_key);
  return message;
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

json api_error_body(const ApiError& e) {
  return json{{"error",
               {{"message", e.message},
                {"type", http_error_class(e.code).type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", to_string(e.code)}}}};
}

namespace {

// The body as a JSON object with only known keys and the served model; else the error.
std::optional<ApiError> parse_envelope(const std::string& body, ApiKind kind, const ApiContext& ctx,
                                       json* j) {
  if (!is_valid_utf8(body)) return invalid("the body is not valid UTF-8", "");
  if (json_nesting_exceeds(body, kMaxJsonDepth)) {
    return invalid("the body nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                   "");
  }
  *j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return invalid("the body is not valid JSON", "");
  if (!j->is_object()) return invalid("the body must be a JSON object", "");
  const std::set<std::string>& own = kind == ApiKind::kChat ? kChatKeys : kCompletionKeys;
  for (const auto& item : j->items()) {
    if (!kCommonKeys.count(item.key()) && !own.count(item.key()) &&
        !kStructuredKeys.count(item.key())) {
      return invalid(
          "unknown parameter " + quote(item.key()) + " (allowed: " + list(kCommonKeys, own) + ")",
          item.key());
    }
  }
  // The model before any value: a client talking to the wrong server learns that first.
  if (!given(*j, "model") || !(*j)["model"].is_string())
    return invalid("\"model\" is required (a string: \"" + ctx.served_model + "\")", "model");
  const std::string& model = (*j)["model"].get_ref<const std::string&>();
  if (model != ctx.served_model) {
    return invalid("the model " + quote(model) + " does not exist (this server serves \"" +
                       ctx.served_model + "\")",
                   "model", ErrorCode::kModelNotFound);
  }
  return refuse_unsupported(*j, kind);
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
std::optional<ApiError> translate_fields(const json& j, ApiKind kind, json* mine) {
  for (const char* k : kSameKeys)
    if (given(j, k)) (*mine)[k] = j[k];
  if (const char* max_key = max_tokens_key(j, kind)) (*mine)["max_new_tokens"] = j[max_key];
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
  if (kind == ApiKind::kCompletion) return translate_prompt(j, mine);
  if (!given(j, "messages")) return invalid("\"messages\" is required", "messages");
  (*mine)["messages"] = j["messages"];
  return std::nullopt;
}

}  // namespace

ApiParse parse_api_request(const std::string& body, ApiKind kind, const ApiContext& ctx) {
  ApiParse out;
  json j, mine = json::object();
  out.error = parse_envelope(body, kind, ctx, &j);
  if (!out.error) out.error = parse_streaming(j, &out.request);
  if (!out.error) out.error = translate_fields(j, kind, &mine);
  if (out.error) return out;
  out.request.kind = kind;
  out.request.model = j["model"].get<std::string>();
  out.request.request = parse_request_fields(mine, ctx.defaults, ctx.config, {});
  if (!out.request.request.ok()) {
    const ParsedRequest& r = out.request.request;
    out.error =
        invalid(in_client_terms(r.error_message, max_tokens_key(j, kind)), "", *r.error_code);
  }
  return out;
}

const char* api_finish_reason(FinishReason finish_reason) {
  return to_string(finish_reason);  // stop | length | timeout | cancelled: OpenAI's names
}

json api_usage(int prompt_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
json head_object(const ApiResponseHead& h, bool chunk) {
  const char* object = h.kind == ApiKind::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
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
  json out = head_object(h, false);
  json choice{{"index", 0},
              {"finish_reason", api_finish_reason(r.finish_reason)},
              {"logprobs", r.logprobs}};
  if (h.kind == ApiKind::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  } else {
    choice["text"] = r.text;
  }
  out["choices"] = json::array({choice});
  out["usage"] = api_usage(r.prompt_tokens, r.completion_tokens);
  return out;
}

json api_chunk(const ApiResponseHead& h, const std::string& text, bool first,
               const FinishReason* finish_reason, bool with_usage_null, const json& logprobs) {
  json out = head_object(h, true);
  json choice{
      {"index", 0},
      {"logprobs", logprobs},
      {"finish_reason", finish_reason ? json(api_finish_reason(*finish_reason)) : json(nullptr)}};
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

json api_usage_chunk(const ApiResponseHead& h, int prompt_tokens, int completion_tokens) {
  json out = head_object(h, true);
  out["choices"] = json::array();
  out["usage"] = api_usage(prompt_tokens, completion_tokens);
  return out;
}

json api_models(const std::string& served_model, int64_t created) {
  return json{{"object", "list"},
              {"data", json::array({{{"id", served_model},
                                     {"object", "model"},
                                     {"created", created},
                                     {"owned_by", "llama2"}}})}};
}

}  // namespace llama2
