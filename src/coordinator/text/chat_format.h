// The Llama-2 chat format: a dialog (`messages`, as in the OpenAI API) turned into the token ids
// Meta's reference implementation (llama/generation.py, chat_completion) feeds the chat models.
//
//   [system]? user (assistant user)*          roles in this order, nothing else
//   first user content, with a system message: "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + user
//   each (user, assistant) pair:  <s> encode("[INST] " + strip(user) + " [/INST] " +
//   strip(assistant) + " ") </s> the final user turn:          <s> encode("[INST] " + strip(user) +
//   " [/INST]")
//
// strip() is Python's str.strip() (every Unicode whitespace character, not only ASCII), applied
// after the system text is merged into the first user turn, as the reference does.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/text/tokenizer.h"

namespace llama2 {

// kTool: a tool's result (OpenAI's role "tool"); render_tool_dialog (chat_tools.h) turns it and
// the assistant's tool_calls into the three roles the Llama-2 format has, before encoding.
enum class ChatRole { kSystem, kUser, kAssistant, kTool };

// One call an assistant message made (OpenAI's tool_calls[i]): `arguments` as the client sent it
// (a string, normally JSON text).
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant only
  std::string tool_call_id;              // tool only: the call it answers
};

// Parses an OpenAI-style `messages` array: objects with "role" (system | user | assistant | tool)
// and "content" (a string, or an array of {"type": "text", "text": ...} parts, joined with "\n").
// An assistant message may carry "tool_calls" ([{"id", "type": "function", "function": {"name",
// "arguments"}}]; its content may then be null or absent); a tool message needs "tool_call_id".
// Other keys ("name") are ignored. Error naming the message index, the field and the allowed
// values otherwise; the order rule is checked by encode_llama2_chat (after render_tool_dialog).
std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& messages);

// Error naming the rule when the roles of `dialog` break it (see encode_llama2_chat); no tokenizer
// needed, so front ends can refuse a bad dialog before any tokenizing.
void check_chat_order(const std::vector<ChatMessage>& dialog);

// The token ids of `dialog` in the Llama-2 chat format (see above): ends with the final user
// turn, ready for the model to answer. Error naming the rule when the roles break it (empty
// dialog, a system message not first, two turns of one role in a row, not ending with user).
std::vector<int> encode_llama2_chat(const Tokenizer& tokenizer,
                                    const std::vector<ChatMessage>& dialog);

// Python's str.strip(): removes leading and trailing characters for which str.isspace() is true
// (ASCII \t \n \v \f \r and space, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000). `s` must be valid UTF-8.
std::string python_strip(const std::string& s);

}  // namespace llama2
