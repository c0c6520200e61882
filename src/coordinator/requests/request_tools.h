// A request's tools (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`; docs/tool-calling.md):
// checked here for every entry (HTTP, the socket, `batch` lines), rendered into the dialog
// (text/chat_tools.h), turned into the tool-call constraint (constrain/tool_grammar.h), and the
// answer's text parsed back into calls, whole or as it streams.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace llama2 {

struct RequestConstraint;

enum class ToolChoice : uint8_t {
  kNone,      // tools neither rendered nor callable
  kAuto,      // text or calls: a call starts with the trigger (the default with tools)
  kRequired,  // at least one call, constrained from the first token
  kNamed,     // one call of the named tool (a single element, whatever parallel_tool_calls says)
};

struct ToolRequest {
  nlohmann::json tools = nlohmann::json::array();  // the client's tool objects, checked
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;     // kNamed: the tool
  bool parallel = true;  // parallel_tool_calls: several calls in one answer
};

// The keys: tools, tool_choice, parallel_tool_calls.
extern const std::set<std::string> kToolKeys;

// The tools `obj` asks for; null when none are callable (no tools, or tool_choice "none"). Throws
// llama2::Error whose message starts with the key at fault (tools[i]..., "tool_choice" ...):
// a tool without a function name, a name not matching ^[a-zA-Z0-9_-]{1,64}$, a name given twice,
// parameters that are not an object, a tool_choice naming no given tool, required or a named
// choice without tools, parallel_tool_calls not a boolean.
std::shared_ptr<const ToolRequest> parse_tool_fields(const nlohmann::json& obj);

// The tool-call constraint (field "tools"): the spec tool_grammar.h compiles.
std::shared_ptr<RequestConstraint> tool_constraint(const ToolRequest& tools);

// One call of an answer: `arguments` is the JSON text the model wrote (as OpenAI sends it).
struct ToolCall {
  std::string id;  // call_ and 24 hex digits
  std::string name;
  std::string arguments;
};

// A new call id: "call_" and 24 random hex digits.
std::string new_tool_call_id();

// Reads an answer's text as it grows and tells what it is: text (which it gives back, held only
// while it may still become the trigger) or tool calls (whose parts it gives as OpenAI's deltas).
// The same reader parses whole answers, so a streamed answer reassembles to the whole one.
class ToolCallReader {
 public:
  struct Delta {
    int index = 0;
    std::string id, name;   // set on a call's first delta only
    std::string arguments;  // a piece of the call's arguments (may be empty on the first)
  };
  struct Output {
    std::string text;  // content to pass on
    std::vector<Delta> deltas;
  };
  Output feed(const std::string& piece);
  // The end of the answer: text held back (a prefix of the trigger) is given back.
  Output finish();
  // The answer started with the trigger and its call array is closed.
  bool complete() const { return mode_ == Mode::kCalls && depth_ == 0 && seen_open_ && !bad_; }
  bool calls() const { return mode_ == Mode::kCalls; }

 private:
  enum class Mode : uint8_t { kUndecided, kText, kCalls };
  void scan(char c, Output* out);
  void start_call();
  void end_value(Output* out);
  void value_byte(char c, Output* out);

  Mode mode_ = Mode::kUndecided;
  std::string held_;  // kUndecided: the answer so far, a prefix of the trigger
  int depth_ = 0;
  bool seen_open_ = false, in_string_ = false, escape_ = false;
  bool bad_ = false;       // not the call array's shape (then the answer stays text)
  bool in_value_ = false;  // between ':' and the ',' or '}' that ends a call's member
  int index_ = -1;         // the call being read
  bool header_sent_ = false;
  std::string key_raw_, value_key_, name_raw_, pending_args_, args_space_;
  bool args_started_ = false;
};

// The calls of a whole answer when it is the trigger then a complete, well-formed call array
// (each call with a string "name" and "arguments"); nullopt when it is text (then the answer is
// content: under `auto`, or cut short by a length limit).
std::optional<std::vector<ToolCall>> parse_tool_calls(const std::string& text);

// [{"id", "type": "function", "function": {"name", "arguments"}}, ...]: OpenAI's tool_calls, the
// shape every entry answers with (HTTP message.tool_calls, the socket's `done`, batch lines).
nlohmann::json tool_calls_json(const std::vector<ToolCall>& calls);
// (*out)["tool_calls"] = tool_calls_json(...) when `text` is a complete call (parse_tool_calls);
// else nothing (the text is the answer).
void add_tool_calls_json(const std::string& text, nlohmann::json* out);

}  // namespace llama2
