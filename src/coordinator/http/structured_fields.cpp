#include "coordinator/http/structured_fields.h"

#include <utility>
#include <vector>

#include "coordinator/requests/request.h"

namespace llama2 {

using nlohmann::json;

const std::set<std::string> kStructuredKeys = {
    "response_format",    "guided_json",    "guided_regex",
    "guided_choice",      "guided_grammar", "guided_decoding_backend",
    "structured_outputs", "grammar",        "json_schema"};

namespace {

const json* given_value(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && !it->is_null() ? &*it : nullptr;
}

ApiError bad(const std::string& message, const std::string& param) {
  return api_error(ErrorCode::kInvalidRequest, message, param);
}

// One constraint found in the body: the client's key and the project's field and value.
struct Asked {
  std::string client_key;
  std::string field;
  json value;
};

// A schema given as an object, or (vLLM's guided_json allows it) as its JSON text.
std::optional<ApiError> schema_format(const json& v, const std::string& key, json* format) {
  json schema = v;
  if (v.is_string()) {
    schema = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return bad("\"" + key + "\" is not valid JSON", key);
  }
  if (!schema.is_object() && !schema.is_boolean())
    return bad("\"" + key + "\" must be a JSON Schema object", key);
  *format = json{{"type", "json_schema"}, {"json_schema", {{"schema", std::move(schema)}}}};
  return std::nullopt;
}

// vLLM's structured_outputs object: one of json, regex, choice, grammar, json_object.
std::optional<ApiError> from_structured_outputs(const json& so, std::vector<Asked>* asked) {
  const std::string key = "structured_outputs";
  if (!so.is_object())
    return bad(
        "\"structured_outputs\" must be an object with one of: json, regex, choice, "
        "grammar, json_object",
        key);
  for (const auto& item : so.items()) {
    const std::string name = key + "." + item.key();
    if (item.value().is_null()) continue;
    if (item.key() == "json") {
      json format;
      if (auto e = schema_format(item.value(), name, &format)) return e;
      asked->push_back({name, "response_format", std::move(format)});
    } else if (item.key() == "regex" || item.key() == "choice" || item.key() == "grammar") {
      asked->push_back({name, item.key(), item.value()});
    } else if (item.key() == "json_object") {
      if (item.value() == true)
        asked->push_back({name, "response_format", json{{"type", "json_object"}}});
    } else {
      return bad("unknown key " + quote(item.key()) +
                     " in \"structured_outputs\" (allowed: json, regex, choice, grammar, "
                     "json_object)",
                 name);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> translate_structured_fields(const json& body, json* mine) {
  std::vector<Asked> asked;
  if (const json* f = given_value(body, "response_format")) {
    asked.push_back({"response_format", "response_format", *f});
  }
  for (const char* key : {"guided_json", "json_schema"}) {
    if (const json* v = given_value(body, key)) {
      json format;
      if (auto e = schema_format(*v, key, &format)) return e;
      asked.push_back({key, "response_format", std::move(format)});
    }
  }
  const std::pair<const char*, const char*> plain[] = {{"guided_regex", "regex"},
                                                       {"guided_choice", "choice"},
                                                       {"guided_grammar", "grammar"},
                                                       {"grammar", "grammar"}};
  for (const auto& [key, field] : plain) {
    if (const json* v = given_value(body, key)) asked.push_back({key, field, *v});
  }
  if (const json* so = given_value(body, "structured_outputs")) {
    if (auto e = from_structured_outputs(*so, &asked)) return e;
  }
  // {"type": "text"} asks for nothing: it may sit beside another key.
  const auto is_text = [](const Asked& a) {
    return a.field == "response_format" && a.value.is_object() &&
           a.value.value("type", "") == "text";
  };
  const Asked* chosen = nullptr;
  for (const Asked& a : asked) {
    if (is_text(a) && asked.size() > 1) continue;
    if (chosen != nullptr) {
      return bad("\"" + chosen->client_key + "\" and \"" + a.client_key +
                     "\" both constrain the output: give at most one",
                 a.client_key);
    }
    chosen = &a;
  }
  if (chosen != nullptr) (*mine)[chosen->field] = chosen->value;
  return std::nullopt;
}

}  // namespace llama2
