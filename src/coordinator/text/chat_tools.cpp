#include "coordinator/text/chat_tools.h"

#include "common/check.h"
#include "coordinator/constrain/tool_grammar.h"

namespace llama2 {

using nlohmann::json;
// Objects written in the order built (the calls' "name" before "arguments", as the model writes
// them) or sent (a call's arguments).
using Ordered = nlohmann::ordered_json;

const char* const kToolInstruction =
    "To call tools, answer with [TOOL_CALLS] and a JSON array of {\"name\": ..., \"arguments\": "
    "{...}} objects, and nothing else.";

namespace {

void append_spaced(const Ordered& v, std::string* out) {
  if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& item : v.items()) {
      *out += first ? "" : ", ";
      *out += Ordered(item.key()).dump() + ": ";
      append_spaced(item.value(), out);
      first = false;
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      *out += i == 0 ? "" : ", ";
      append_spaced(v[i], out);
    }
    *out += ']';
  } else {
    *out += v.dump();
  }
}

// The tool objects as the model reads them: type, and the function's name, description and
// parameters only.
Ordered tool_list(const json& tools) {
  Ordered out = Ordered::array();
  for (const json& t : tools) {
    const json& f = t.at("function");
    Ordered fn = Ordered::object();
    fn["name"] = f.at("name").get<std::string>();
    if (f.contains("description") && f["description"].is_string())
      fn["description"] = f["description"].get<std::string>();
    fn["parameters"] =
        f.contains("parameters") ? Ordered::parse(f["parameters"].dump()) : Ordered::object();
    Ordered tool = Ordered::object();
    tool["type"] = "function";
    tool["function"] = std::move(fn);
    out.push_back(std::move(tool));
  }
  return out;
}

std::string calls_text(const std::vector<ChatToolCall>& calls) {
  Ordered list = Ordered::array();
  for (const ChatToolCall& c : calls) {
    // Arguments the client sent as JSON text are shown as JSON, as the model writes them.
    Ordered args = Ordered::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded()) args = c.arguments;
    Ordered call = Ordered::object();
    call["name"] = c.name;
    call["arguments"] = std::move(args);
    list.push_back(std::move(call));
  }
  return std::string(constrain::kToolCallTrigger) + spaced_json(list);
}

// The name of the call `id` among the assistant messages before `end`; "" when none has it.
std::string call_name(const std::vector<ChatMessage>& dialog, size_t end, const std::string& id) {
  for (size_t i = end; i-- > 0;) {
    for (const ChatToolCall& c : dialog[i].tool_calls)
      if (c.id == id) return c.name;
  }
  return "";
}

std::string results_text(const std::vector<ChatMessage>& dialog, size_t begin, size_t end) {
  Ordered list = Ordered::array();
  for (size_t i = begin; i < end; ++i) {
    Ordered r = Ordered::object();
    r["call_id"] = dialog[i].tool_call_id;
    const std::string name = call_name(dialog, begin, dialog[i].tool_call_id);
    if (!name.empty()) r["name"] = name;
    r["content"] = dialog[i].content;
    list.push_back(std::move(r));
  }
  return "[TOOL_RESULTS]" + spaced_json(list) + "[/TOOL_RESULTS]";
}

void add_tools(const json& tools, std::vector<ChatMessage>* dialog) {
  std::string block = "[AVAILABLE_TOOLS]" + spaced_json(tool_list(tools)) + "[/AVAILABLE_TOOLS]\n" +
                      kToolInstruction;
  if (!dialog->empty() && dialog->front().role == ChatRole::kSystem) {
    ChatMessage& sys = dialog->front();
    sys.content = sys.content.empty() ? block : block + "\n\n" + sys.content;
    return;
  }
  ChatMessage sys;
  sys.role = ChatRole::kSystem;
  sys.content = std::move(block);
  dialog->insert(dialog->begin(), std::move(sys));
}

}  // namespace

std::string spaced_json(const Ordered& value) {
  std::string out;
  append_spaced(value, &out);
  return out;
}

std::vector<ChatMessage> render_tool_dialog(const std::vector<ChatMessage>& dialog,
                                            const json& tools) {
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < dialog.size();) {
    const ChatMessage& m = dialog[i];
    if (m.role == ChatRole::kAssistant && !m.tool_calls.empty()) {
      const std::string text = python_strip(m.content);
      out.push_back({ChatRole::kAssistant,
                     (text.empty() ? "" : text + " ") + calls_text(m.tool_calls),
                     {},
                     {}});
      ++i;
      continue;
    }
    if (m.role != ChatRole::kTool) {
      out.push_back({m.role, m.content, {}, {}});
      ++i;
      continue;
    }
    const bool after_calls = !out.empty() && out.back().role == ChatRole::kAssistant &&
                             !dialog[i - 1].tool_calls.empty();
    if (!after_calls) {
      throw Error("messages[" + std::to_string(i) +
                  "]: a tool message must follow an assistant message with tool_calls (or "
                  "another tool message)");
    }
    size_t end = i;
    while (end < dialog.size() && dialog[end].role == ChatRole::kTool) ++end;
    std::string text = results_text(dialog, i, end);
    if (end < dialog.size() && dialog[end].role == ChatRole::kUser) {
      text += "\n" + dialog[end].content;
      ++end;
    }
    out.push_back({ChatRole::kUser, std::move(text), {}, {}});
    i = end;
  }
  if (tools.is_array() && !tools.empty()) add_tools(tools, &out);
  return out;
}

}  // namespace llama2
