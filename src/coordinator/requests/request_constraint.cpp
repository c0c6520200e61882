#include "coordinator/requests/request_constraint.h"

#include <vector>

#include "common/check.h"
#include "coordinator/constrain/vocabulary.h"
#include "coordinator/requests/request.h"

namespace llama2 {

using constrain::ConstraintKind;
using nlohmann::json;

const std::set<std::string> kConstraintKeys = {"response_format", "regex", "choice", "grammar"};

namespace {

const json* given_value(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && !it->is_null() ? &*it : nullptr;
}

std::shared_ptr<RequestConstraint> make(ConstraintKind kind, const char* field) {
  auto c = std::make_shared<RequestConstraint>();
  c->spec.kind = kind;
  c->field = field;
  return c;
}

const char kFormatShape[] =
    "\"response_format\" must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
    "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}";

// OpenAI's response_format; null for {"type": "text"}.
std::shared_ptr<RequestConstraint> parse_response_format(const json& f) {
  const json* type = f.is_object() ? given_value(f, "type") : nullptr;
  if (type == nullptr || !type->is_string()) throw Error(kFormatShape);
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return nullptr;
  if (t == "json_object") return make(ConstraintKind::kJsonObject, "response_format");
  if (t != "json_schema") {
    throw Error("\"response_format\" type " + quote(t) +
                " is not one of: text, json_object, json_schema");
  }
  const json* js = given_value(f, "json_schema");
  const json* schema = js != nullptr && js->is_object() ? given_value(*js, "schema") : nullptr;
  if (schema == nullptr || !(schema->is_object() || schema->is_boolean())) {
    throw Error(
        "\"response_format\" of type json_schema needs \"json_schema\": {\"schema\": "
        "{...}} (a JSON Schema object)");
  }
  auto c = make(ConstraintKind::kJsonSchema, "response_format");
  c->spec.text = schema->dump();
  return c;
}

std::shared_ptr<RequestConstraint> parse_one(const char* key, const json& v) {
  const std::string k = key;
  if (k == "response_format") return parse_response_format(v);
  if (k == "choice") {
    if (!v.is_array() || v.empty()) throw Error("\"choice\" must be a non-empty array of strings");
    auto c = make(ConstraintKind::kChoice, key);
    for (const json& s : v) {
      if (!s.is_string()) throw Error("\"choice\" entry " + quote_json(s) + " is not a string");
      c->spec.choices.push_back(s.get<std::string>());
    }
    return c;
  }
  if (!v.is_string()) throw Error("\"" + k + "\" must be a string");
  auto c = make(k == "regex" ? ConstraintKind::kRegex : ConstraintKind::kGbnf, key);
  c->spec.text = v.get<std::string>();
  return c;
}

}  // namespace

std::shared_ptr<RequestConstraint> parse_constraint_fields(const json& obj) {
  std::shared_ptr<RequestConstraint> found;
  if (const json* tools = given_value(obj, kToolGrammarWireKey)) {
    found = make(ConstraintKind::kToolCalls, "tools");
    found->spec.text = tools->get<std::string>();
  }
  for (const char* key : {"response_format", "regex", "choice", "grammar"}) {
    const json* v = given_value(obj, key);
    if (v == nullptr) continue;
    std::shared_ptr<RequestConstraint> c = parse_one(key, *v);
    if (c == nullptr) continue;
    if (found != nullptr) {
      throw Error("\"" + found->field + "\" and \"" + c->field +
                  "\" both constrain the output: give at most one");
    }
    found = std::move(c);
  }
  return found;
}

void constraint_to_json(const RequestConstraint& c, json* obj) {
  switch (c.spec.kind) {
    case ConstraintKind::kJsonSchema:
      (*obj)["response_format"] = {{"type", "json_schema"},
                                   {"json_schema", {{"schema", json::parse(c.spec.text)}}}};
      return;
    case ConstraintKind::kJsonObject:
      (*obj)["response_format"] = {{"type", "json_object"}};
      return;
    case ConstraintKind::kRegex:
      (*obj)["regex"] = c.spec.text;
      return;
    case ConstraintKind::kChoice:
      (*obj)["choice"] = c.spec.choices;
      return;
    case ConstraintKind::kGbnf:
      (*obj)["grammar"] = c.spec.text;
      return;
    case ConstraintKind::kToolCalls:
      (*obj)[kToolGrammarWireKey] = c.spec.text;
      return;
  }
}

ConstraintCompiler::ConstraintCompiler(const Tokenizer& tok, size_t capacity)
    : tok_(tok), capacity_(capacity) {}

constrain::GrammarCache& ConstraintCompiler::cache() {
  std::call_once(once_, [this] {
    cache_ = std::make_unique<constrain::GrammarCache>(
        constrain::TokenVocabulary::from_tokenizer(tok_), capacity_);
  });
  return *cache_;
}

std::optional<Refusal> ConstraintCompiler::compile(RequestConstraint& c) {
  try {
    c.grammar = cache().get(c.spec);
  } catch (const Error& e) {  // ConstraintError: the input's fault, a 400
    return Refusal{ErrorCode::kInvalidRequest, "\"" + c.field + "\": " + e.what()};
  }
  return std::nullopt;
}

}  // namespace llama2
