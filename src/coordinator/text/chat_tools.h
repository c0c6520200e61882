// Tool calling in the Llama-2 dialog (docs/tool-calling.md). Llama-2 has no tool tokens, so the
// tools and the tool turns are written as bracket-tagged text, Mistral's convention (its v3
// template: [AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]), inside the turns Llama-2 knows:
//
//   the tools            in the system text: "[AVAILABLE_TOOLS]" + tools + "[/AVAILABLE_TOOLS]\n"
//                        + kToolInstruction (+ "\n\n" + the client's system text, if any)
//   an assistant's calls its text, then "[TOOL_CALLS]" + [{"name", "arguments"}, ...] (the bytes
//                        a tool-call answer has, tool_grammar.h)
//   tool results         one user turn per run of tool messages: "[TOOL_RESULTS]" +
//                        [{"call_id", "name", "content"}, ...] + "[/TOOL_RESULTS]", then "\n" and
//                        the next user message's text when one follows
//
// JSON is written with ", " and ": " separators (spaced_json), the spacing the tool-call grammar
// lets the model write, so the history looks like the model's own answers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/text/chat_format.h"

namespace llama2 {

// The sentence after the tool list that tells the model how to call.
extern const char* const kToolInstruction;

// `value` as JSON text with ", " between items and ": " after keys, keys in the order given.
std::string spaced_json(const nlohmann::ordered_json& value);

// `dialog` in the three roles the Llama-2 format has: tool turns and calls rendered as above, and,
// when `tools` is a non-empty array of OpenAI tool objects ({"type": "function", "function":
// {"name", "description", "parameters"}}), the tool list in the system text (a system message is
// made when there is none, as the <<SYS>> block of the first user turn). Error naming the message
// when a tool message does not follow an assistant's calls or another tool message.
std::vector<ChatMessage> render_tool_dialog(const std::vector<ChatMessage>& dialog,
                                            const nlohmann::json& tools);

}  // namespace llama2
