// The tool-call grammar (docs/tool-calling.md): the output that calls the request's tools, as the
// constraint engine's one grammar form. A call is the trigger text, then a JSON array of
// {"name": NAME, "arguments": ARGS} objects, ARGS compiled from that tool's `parameters` JSON
// Schema by the schema compiler (json_schema.h):
//
//   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
//
// Modes: kRequired, the output is a call (constrained from the first token); kAuto, the output is
// either a call or free text that does not start with the trigger. So a row under `auto` is
// masked only where it must be: any text (valid UTF-8) is allowed until the answer's first bytes
// spell the whole trigger, and from there on the call's JSON. A false start ("[TOOL" then
// something else) is ordinary text; a trigger after the first byte of the answer is text too.
#pragma once

#include <string>

#include "coordinator/constrain/json_schema.h"

namespace llama2::constrain {

// The exact bytes that start a tool call, in the answer and in the rendered history.
constexpr const char* kToolCallTrigger = "[TOOL_CALLS]";

// The spec's text (ConstraintKind::kToolCalls): canonical JSON written by tool_grammar_spec.
//   {"mode": "auto" | "required", "parallel": bool, "tools": [{"name", "parameters"}, ...]}
// Compiles it and sets the grammar's root. Throws ConstraintError naming the tool (its index and
// name) and the schema compiler's message when a `parameters` schema is refused.
void compile_tool_calls(Grammar& grammar, const std::string& spec_text,
                        const JsonSchemaOptions& options);

}  // namespace llama2::constrain
