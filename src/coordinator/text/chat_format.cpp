#include "coordinator/text/chat_format.h"

#include <cstdint>

#include "common/check.h"

namespace llama2 {
namespace {

const char* const kBeginInst = "[INST]";
const char* const kEndInst = "[/INST]";
const char* const kBeginSys = "<<SYS>>\n";
const char* const kEndSys = "\n<</SYS>>\n\n";

const char* const kOrderRule =
    "an optional first 'system' message, then 'user' and 'assistant' alternating, starting and "
    "ending with 'user'";

bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

// Length in bytes of the UTF-8 sequence starting with byte `b` (1 for anything malformed, which
// valid input never has).
size_t utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xe) return 3;
  if ((b >> 3) == 0x1e) return 4;
  return 1;
}

uint32_t utf8_decode(const std::string& s, size_t i, size_t len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (len == 1) return b0;
  uint32_t c = b0 & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return c;
}

const char* role_name(ChatRole r) {
  switch (r) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    case ChatRole::kAssistant:
      return "assistant";
    case ChatRole::kTool:
      return "tool";
  }
  return "?";
}

std::string where(size_t i) {
  return "messages[" + std::to_string(i) + "]";
}

std::string content_text(const nlohmann::json& content, size_t i) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw Error(where(i) + ".content: expected a string or an array of text parts, got " +
                std::string(content.type_name()));
  }
  std::string text;
  for (size_t p = 0; p < content.size(); ++p) {
    const nlohmann::json& part = content[p];
    const std::string at = where(i) + ".content[" + std::to_string(p) + "]";
    if (!part.is_object() || !part.contains("type") || part["type"] != "text") {
      throw Error(at + ": only {\"type\": \"text\", \"text\": ...} parts are supported");
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      throw Error(at + ".text: expected a string");
    }
    if (p > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string python_strip(const std::string& s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t len = utf8_length(static_cast<unsigned char>(s[begin]));
    if (begin + len > s.size() || !python_space(utf8_decode(s, begin, len))) break;
    begin += len;
  }
  // Trailing: find the start of each last character by skipping continuation bytes.
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    const size_t len = end - start;
    if (utf8_length(static_cast<unsigned char>(s[start])) != len ||
        !python_space(utf8_decode(s, start, len))) {
      break;
    }
    end = start;
  }
  return s.substr(begin, end - begin);
}

namespace {

// A string field of `obj`, or an Error naming it.
std::string string_field(const nlohmann::json& obj, const char* key, const std::string& at) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) throw Error(at + "." + key + ": expected a string");
  return it->get<std::string>();
}

// An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
// "arguments"}}].
std::vector<ChatToolCall> parse_tool_calls(const nlohmann::json& calls, size_t i) {
  const std::string at = where(i) + ".tool_calls";
  if (!calls.is_array()) throw Error(at + ": expected an array of {\"id\", \"function\"} objects");
  std::vector<ChatToolCall> out;
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::string here = at + "[" + std::to_string(c) + "]";
    const nlohmann::json& call = calls[c];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      throw Error(here +
                  ": expected {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                  "\"arguments\"}}");
    }
    if (call.contains("type") && call["type"] != "function")
      throw Error(here + ".type: only \"function\" is supported");
    ChatToolCall tc;
    tc.id = call.contains("id") && !call["id"].is_null() ? string_field(call, "id", here) : "";
    tc.name = string_field(call["function"], "name", here + ".function");
    tc.arguments = string_field(call["function"], "arguments", here + ".function");
    if (!is_valid_utf8(tc.id + tc.name + tc.arguments)) throw Error(here + ": not valid UTF-8");
    out.push_back(std::move(tc));
  }
  return out;
}

ChatRole parse_role(const nlohmann::json& m, size_t i) {
  if (!m.contains("role") || !m["role"].is_string()) {
    throw Error(where(i) + ".role: expected one of system, user, assistant, tool");
  }
  const std::string role = m["role"].get<std::string>();
  if (role == "system") return ChatRole::kSystem;
  if (role == "user") return ChatRole::kUser;
  if (role == "assistant") return ChatRole::kAssistant;
  if (role == "tool") return ChatRole::kTool;
  const std::string shown = role.size() > 40 ? role.substr(0, 40) + "..." : role;
  throw Error(where(i) + ".role: '" + shown + "' is not supported (allowed: system, user, " +
              "assistant, tool)");
}

ChatMessage parse_message(const nlohmann::json& m, size_t i) {
  if (!m.is_object()) throw Error(where(i) + ": expected an object with \"role\" and \"content\"");
  ChatMessage msg;
  msg.role = parse_role(m, i);
  const bool calls =
      msg.role == ChatRole::kAssistant && m.contains("tool_calls") && !m["tool_calls"].is_null();
  if (calls) msg.tool_calls = parse_tool_calls(m["tool_calls"], i);
  if (msg.role == ChatRole::kTool) {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
      throw Error(where(i) + ".tool_call_id: a tool message needs the id of the call it answers");
    msg.tool_call_id = m["tool_call_id"].get<std::string>();
    if (!is_valid_utf8(msg.tool_call_id)) throw Error(where(i) + ".tool_call_id: not valid UTF-8");
  }
  // An assistant message that calls tools may have no text (OpenAI sends null).
  if (calls && (!m.contains("content") || m["content"].is_null())) return msg;
  if (!m.contains("content")) throw Error(where(i) + ".content: missing");
  msg.content = content_text(m["content"], i);
  if (!is_valid_utf8(msg.content)) throw Error(where(i) + ".content: not valid UTF-8");
  return msg;
}

}  // namespace

std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& messages) {
  if (!messages.is_array()) {
    throw Error("messages: expected an array of {\"role\", \"content\"} objects, got " +
                std::string(messages.type_name()));
  }
  std::vector<ChatMessage> dialog;
  dialog.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) dialog.push_back(parse_message(messages[i], i));
  return dialog;
}

namespace {
// The turns the reference encodes: the system text merged into the first user turn. Error naming
// the rule when the roles break it.
std::vector<ChatMessage> merged_turns(const std::vector<ChatMessage>& dialog) {
  if (dialog.empty()) throw Error(std::string("messages: empty; expected ") + kOrderRule);
  // The system text is merged into the first user turn, then roles must alternate.
  std::vector<ChatMessage> turns;
  size_t first = 0;
  if (dialog[0].role == ChatRole::kSystem) {
    if (dialog.size() < 2 || dialog[1].role != ChatRole::kUser) {
      throw Error(std::string("messages: a system message must be followed by a user message; "
                              "expected ") +
                  kOrderRule);
    }
    turns.push_back(
        {ChatRole::kUser, kBeginSys + dialog[0].content + kEndSys + dialog[1].content, {}, {}});
    first = 2;
  }
  for (size_t i = first; i < dialog.size(); ++i) turns.push_back(dialog[i]);
  for (size_t t = 0; t < turns.size(); ++t) {
    const ChatRole want = t % 2 == 0 ? ChatRole::kUser : ChatRole::kAssistant;
    if (turns[t].role != want) {
      const size_t index = t + (first == 2 ? 1 : 0);  // back to the caller's numbering
      throw Error(where(index) + ": role '" + role_name(turns[t].role) + "' where '" +
                  role_name(want) + "' is expected; expected " + kOrderRule);
    }
  }
  if (turns.back().role != ChatRole::kUser) {
    throw Error(std::string("messages: the last message must be from 'user'; expected ") +
                kOrderRule);
  }
  return turns;
}
}  // namespace

void check_chat_order(const std::vector<ChatMessage>& dialog) {
  merged_turns(dialog);
}

std::vector<int> encode_llama2_chat(const Tokenizer& tokenizer,
                                    const std::vector<ChatMessage>& dialog) {
  const std::vector<ChatMessage> turns = merged_turns(dialog);
  std::vector<int> ids;
  for (size_t t = 0; t + 1 < turns.size(); t += 2) {
    const std::string text = std::string(kBeginInst) + " " + python_strip(turns[t].content) + " " +
                             kEndInst + " " + python_strip(turns[t + 1].content) + " ";
    const std::vector<int> pair = tokenizer.encode(text, /*add_bos=*/true);
    ids.insert(ids.end(), pair.begin(), pair.end());
    ids.push_back(tokenizer.eos_id());
  }
  const std::string last =
      std::string(kBeginInst) + " " + python_strip(turns.back().content) + " " + kEndInst;
  const std::vector<int> tail = tokenizer.encode(last, /*add_bos=*/true);
  ids.insert(ids.end(), tail.begin(), tail.end());
  return ids;
}

}  // namespace llama2
