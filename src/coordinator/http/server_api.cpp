#include "coordinator/http/server_api.h"

#include <set>

#include "common/check.h"
#include "coordinator/requests/request.h"
#include "coordinator/text/chat_format.h"
#include "coordinator/text/chat_tools.h"
#include "coordinator/text/tokenizer.h"

#ifndef LLAMA2_VERSION
#error "LLAMA2_VERSION must be defined (CMakeLists.txt sets it from project(... VERSION))"
#endif

namespace llama2 {

using nlohmann::json;

const char* llama2_version() {
  return LLAMA2_VERSION;
}

namespace {

ApiAnswer failed(std::string message, std::string param) {
  ApiAnswer a;
  a.error = api_error(ErrorCode::kInvalidRequest, std::move(message), std::move(param));
  return a;
}

// The body as an object whose "model", if given, is served and whose keys are `read` or
// harmless; its ignored keys go to `answer`. nullopt and the error set in `answer` otherwise.
std::optional<json> parse_body(const std::string& body, const ApiContext& ctx,
                               const std::set<std::string>& read, ApiAnswer* answer) {
  json j;
  if ((answer->error = parse_json_object(body, &j))) return std::nullopt;
  for (const auto& item : j.items()) {
    if (read.count(item.key())) continue;
    if (ctx.strict) {
      std::string allowed;
      for (const std::string& k : read) allowed += (allowed.empty() ? "" : ", ") + k;
      *answer = failed(
          "unknown parameter " + quote(item.key()) + " (--strict-api; allowed: " + allowed + ")",
          item.key());
      return std::nullopt;
    }
    answer->ignored.push_back(item.key());
  }
  if ((answer->error = api_model_error(j, ctx, /*required=*/false))) return std::nullopt;
  if (const std::optional<RefusedField> r = refused_field(j)) {
    answer->error = api_error(ErrorCode::kUnsupportedParameter,
                              r->what + " is not supported by this server", r->param);
    return std::nullopt;
  }
  return j;
}

bool given(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

// A boolean key's value, `fallback` when absent; false + an error in `answer` when not a boolean.
bool flag(const json& j, const char* key, bool fallback, bool* value, ApiAnswer* answer) {
  if (!given(j, key)) {
    *value = fallback;
    return true;
  }
  if (!j[key].is_boolean()) {
    *answer = failed(
        std::string("\"") + key + "\" must be true or false (got " + quote_json(j[key]) + ")", key);
    return false;
  }
  *value = j[key].get<bool>();
  return true;
}

// The ids of the body's prompt or messages; false + an error in `answer` when they are bad.
bool prompt_ids(const json& j, const Tokenizer& tok, bool add_special, std::vector<int>* ids,
                ApiAnswer* answer) {
  const bool text = given(j, "prompt"), chat = given(j, "messages");
  if (text == chat) {
    *answer = failed(
        "give exactly one of \"prompt\" (a string) or \"messages\" (chat turns: "
        "[{\"role\", \"content\"}, ...])",
        text ? "messages" : "prompt");
    return false;
  }
  if (text) {
    if (!j["prompt"].is_string()) {
      *answer =
          failed("\"prompt\" must be a string (got " + quote_json(j["prompt"]) + ")", "prompt");
      return false;
    }
    *ids = tok.encode(j["prompt"].get<std::string>(), add_special);
    return true;
  }
  try {
    // Tool turns in the history are rendered as a generation's are (chat_tools.h).
    *ids = encode_llama2_chat(tok, render_tool_dialog(parse_chat_messages(j["messages"]), {}));
  } catch (const Error& e) {
    *answer = failed(e.what(), "messages");
    return false;
  }
  return true;
}

}  // namespace

ApiAnswer api_tokenize(const std::string& body, const Tokenizer& tok, const ApiContext& ctx,
                       int64_t max_model_len) {
  ApiAnswer a;
  const std::optional<json> j = parse_body(
      body, ctx, {"model", "prompt", "messages", "add_special_tokens", "return_token_strs"}, &a);
  if (!j) return a;
  bool add_special = true, strs = false;
  if (!flag(*j, "add_special_tokens", true, &add_special, &a)) return a;
  if (!flag(*j, "return_token_strs", false, &strs, &a)) return a;
  std::vector<int> ids;
  if (!prompt_ids(*j, tok, add_special, &ids, &a)) return a;
  json token_strs = nullptr;
  if (strs) {
    token_strs = json::array();
    for (int id : ids) token_strs.push_back(tok.id_to_piece(id));
  }
  a.body = json{{"count", ids.size()},
                {"max_model_len", max_model_len},
                {"tokens", ids},
                {"token_strs", token_strs}};
  return a;
}

ApiAnswer api_detokenize(const std::string& body, const Tokenizer& tok, const ApiContext& ctx) {
  ApiAnswer a;
  const std::optional<json> j = parse_body(body, ctx, {"model", "tokens"}, &a);
  if (!j) return a;
  if (!given(*j, "tokens") || !(*j)["tokens"].is_array())
    return failed("\"tokens\" is required: an array of token ids", "tokens");
  std::vector<int> ids;
  for (const json& v : (*j)["tokens"]) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size()) {
      return failed("\"tokens\" entry " + quote_json(v) + " is not a token id in [0, " +
                        std::to_string(tok.vocab_size()) + ")",
                    "tokens");
    }
    ids.push_back(v.get<int>());
  }
  a.body = json{{"prompt", tok.decode(ids)}};
  return a;
}

int probe_status(Probe probe, const std::string& status) {
  if (probe == Probe::kReadiness) return status == "ready" ? 200 : 503;
  return status == "stalled" ? 503 : 200;
}

}  // namespace llama2
