#include "coordinator/constrain/tool_grammar.h"

#include <nlohmann/json.hpp>
#include <vector>

namespace llama2::constrain {
namespace {

using Json = nlohmann::json;

// One element of the calls array: {"name": "<name>", "arguments": <its parameters' grammar>}.
Sequence one_call(Grammar& g, JsonGrammar& json, const Json& tool, size_t index,
                  const JsonSchemaOptions& options) {
  const std::string name = tool.at("name").get<std::string>();
  try {
    compile_json_schema(g, tool.at("parameters").dump(), options);
  } catch (const ConstraintError& e) {
    throw ConstraintError("tools[" + std::to_string(index) + "] (" + name +
                          ") parameters: " + e.what());
  }
  const Symbol args = Grammar::ref(g.root());
  const Symbol name_member = json.member(json.literal("\"name\""), json.literal(Json(name).dump()));
  const Symbol args_member = json.member(json.literal("\"arguments\""), args);
  return {name_member, g.byte(','), json.ws(), args_member};
}

// Free text that does not start with the trigger: every prefix of the trigger may end the text
// or be followed by any other character, but never by the trigger's next byte at its last one.
Symbol text_without_trigger(Grammar& g) {
  CodepointSet all;
  all.add(0, CodepointSet::kMax);
  const Symbol rest = g.star(g.codepoints(all));
  const std::string trigger = kToolCallTrigger;
  Symbol next{};  // set at the trigger's last byte, whose own alternatives end there
  for (size_t k = trigger.size(); k-- > 0;) {
    CodepointSet other;
    const auto c = static_cast<uint32_t>(static_cast<unsigned char>(trigger[k]));
    if (c > 0) other.add(0, c - 1);
    other.add(c + 1, CodepointSet::kMax);
    std::vector<Sequence> alts{{}, {g.codepoints(other), rest}};
    if (k + 1 < trigger.size()) alts.push_back({g.byte(static_cast<uint8_t>(c)), next});
    next = g.choice(std::move(alts));
  }
  return next;
}

}  // namespace

namespace {

void compile_spec(Grammar& grammar, const Json& spec, const JsonSchemaOptions& options) {
  const Json& tools = spec.at("tools");
  if (!tools.is_array() || tools.empty())
    throw ConstraintError("tool calls need at least one tool");
  JsonGrammar json(grammar, options.whitespace);
  std::vector<Sequence> calls;
  for (size_t i = 0; i < tools.size(); ++i)
    calls.push_back(one_call(grammar, json, tools[i], i, options));
  const Symbol call = json.object(grammar.choice(std::move(calls)), /*may_be_empty=*/false);
  Symbol items = call;
  if (spec.at("parallel").get<bool>()) {
    const Symbol more = grammar.group({grammar.byte(','), json.ws(), call});
    items = grammar.group({call, grammar.star(more)});
  }
  Sequence tool_calls = grammar.literal(kToolCallTrigger);
  for (const Symbol& s : {grammar.byte('['), json.ws(), items, json.ws(), grammar.byte(']')})
    tool_calls.push_back(s);
  std::vector<Sequence> root{tool_calls};
  if (spec.at("mode").get<std::string>() == "auto") root.push_back({text_without_trigger(grammar)});
  grammar.set_root(grammar.intern("root", std::move(root)));
}

}  // namespace

void compile_tool_calls(Grammar& grammar, const std::string& spec_text,
                        const JsonSchemaOptions& options) {
  // Written by the server itself (request_tools.cpp); a malformed one (only a fuzzer makes
  // those) is refused like any other constraint.
  try {
    compile_spec(grammar, Json::parse(spec_text), options);
  } catch (const nlohmann::json::exception& e) {
    throw ConstraintError(std::string("malformed tool-call spec: ") + e.what());
  }
}

}  // namespace llama2::constrain
