#include "coordinator/requests/request_tools.h"

#include <cctype>
#include <random>

#include "common/check.h"
#include "coordinator/constrain/tool_grammar.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_constraint.h"

namespace llama2 {

using nlohmann::json;

const std::set<std::string> kToolKeys = {"tools", "tool_choice", "parallel_tool_calls"};

namespace {

const json* given_value(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && !it->is_null() ? &*it : nullptr;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

const char kToolShape[] =
    "expected {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}";

// tools[i]: a function with a valid, unused name and an object (or absent) parameters schema.
void check_tool(const json& t, size_t i, std::set<std::string>* names) {
  const std::string at = "tools[" + std::to_string(i) + "]";
  if (!t.is_object()) throw Error(at + ": " + kToolShape);
  const json* type = given_value(t, "type");
  if (type != nullptr && *type != "function")
    throw Error(at + ".type: " + quote_json(*type) + " is not supported (allowed: function)");
  const json* f = given_value(t, "function");
  if (f == nullptr || !f->is_object()) throw Error(at + ".function: " + kToolShape);
  const json* name = given_value(*f, "name");
  if (name == nullptr || !name->is_string()) throw Error(at + ".function.name: missing (a string)");
  const std::string& n = name->get_ref<const std::string&>();
  if (!valid_name(n)) {
    throw Error(at + ".function.name: " + quote(n) +
                " must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, '_' and '-', 1 to 64)");
  }
  if (!names->insert(n).second) throw Error(at + ".function.name: " + quote(n) + " is given twice");
  const json* params = given_value(*f, "parameters");
  if (params != nullptr && !params->is_object())
    throw Error(at + ".function.parameters: expected a JSON Schema object");
}

const char kChoiceShape[] =
    "\"tool_choice\" must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
    "\"function\": {\"name\": ...}}";

void parse_choice(const json& v, const std::set<std::string>& names, ToolRequest* r) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "none") {
      r->choice = ToolChoice::kNone;
    } else if (s == "auto") {
      r->choice = ToolChoice::kAuto;
    } else if (s == "required") {
      r->choice = ToolChoice::kRequired;
    } else {
      throw Error(std::string(kChoiceShape) + " (got " + quote(s) + ")");
    }
    return;
  }
  const json* f = v.is_object() ? given_value(v, "function") : nullptr;
  const json* name = f != nullptr && f->is_object() ? given_value(*f, "name") : nullptr;
  if (name == nullptr || !name->is_string()) throw Error(kChoiceShape);
  r->choice = ToolChoice::kNamed;
  r->named = name->get<std::string>();
  if (!names.count(r->named)) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error("\"tool_choice\" names the function " + quote(r->named) +
                ", which is not among \"tools\" (" + (list.empty() ? "none given" : list) + ")");
  }
}

}  // namespace

std::shared_ptr<const ToolRequest> parse_tool_fields(const json& obj) {
  auto r = std::make_shared<ToolRequest>();
  std::set<std::string> names;
  if (const json* tools = given_value(obj, "tools")) {
    if (!tools->is_array())
      throw Error("tools: " + std::string("expected an array of tools, ") + kToolShape);
    for (size_t i = 0; i < tools->size(); ++i) check_tool((*tools)[i], i, &names);
    r->tools = *tools;
  }
  if (const json* p = given_value(obj, "parallel_tool_calls")) {
    if (!p->is_boolean()) throw Error("\"parallel_tool_calls\" must be true or false");
    r->parallel = p->get<bool>();
  }
  r->choice = names.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  if (const json* c = given_value(obj, "tool_choice")) parse_choice(*c, names, r.get());
  if (names.empty() && r->choice != ToolChoice::kNone) {
    throw Error("\"tool_choice\" " + quote_json(*given_value(obj, "tool_choice")) +
                " needs \"tools\" (none given)");
  }
  if (r->choice == ToolChoice::kNone) return nullptr;
  return r;
}

std::shared_ptr<RequestConstraint> tool_constraint(const ToolRequest& tools) {
  json list = json::array();
  for (const json& t : tools.tools) {
    const json& f = t.at("function");
    if (tools.choice == ToolChoice::kNamed && f.at("name") != tools.named) continue;
    const json* params = given_value(f, "parameters");
    // A tool without parameters takes none: its arguments are {}.
    const json none = {
        {"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
    list.push_back(
        json{{"name", f.at("name")}, {"parameters", params != nullptr ? *params : none}});
  }
  json spec{{"mode", tools.choice == ToolChoice::kAuto ? "auto" : "required"},
            {"parallel", tools.parallel && tools.choice != ToolChoice::kNamed},
            {"tools", std::move(list)}};
  auto c = std::make_shared<RequestConstraint>();
  c->spec.kind = constrain::ConstraintKind::kToolCalls;
  c->spec.text = spec.dump();
  c->field = "tools";
  return c;
}

json tool_calls_json(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& c : calls) {
    out.push_back(json{{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

void add_tool_calls_json(const std::string& text, json* out) {
  if (auto calls = parse_tool_calls(text)) (*out)["tool_calls"] = tool_calls_json(*calls);
}

std::string new_tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

}  // namespace llama2
