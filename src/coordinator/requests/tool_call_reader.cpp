// ToolCallReader and parse_tool_calls (request_tools.h): a byte scanner over the call array that
// the tool-call grammar lets the model write, [{"name": ..., "arguments": ...}, ...], which finds
// each call's name and cuts its arguments' text out as it streams.
#include <cstring>

#include "coordinator/constrain/tool_grammar.h"
#include "coordinator/requests/request_tools.h"

namespace llama2 {

using nlohmann::json;

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// A JSON string's value, or "" when `raw` is not one.
std::string json_string(const std::string& raw) {
  const json v = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  return v.is_string() ? v.get<std::string>() : std::string();
}

void add_delta(ToolCallReader::Output* out, ToolCallReader::Delta d) {
  // Pieces of one call's arguments in one feed() go out as one delta.
  if (!out->deltas.empty() && d.name.empty() && out->deltas.back().index == d.index) {
    out->deltas.back().arguments += d.arguments;
    return;
  }
  out->deltas.push_back(std::move(d));
}

}  // namespace

ToolCallReader::Output ToolCallReader::feed(const std::string& piece) {
  Output out;
  const std::string trigger = constrain::kToolCallTrigger;
  for (size_t i = 0; i < piece.size(); ++i) {
    const char c = piece[i];
    if (mode_ == Mode::kText) {
      out.text += piece.substr(i);
      break;
    }
    if (mode_ == Mode::kCalls) {
      scan(c, &out);
      continue;
    }
    held_ += c;
    if (held_ == trigger) {
      mode_ = Mode::kCalls;
      held_.clear();
    } else if (trigger.compare(0, held_.size(), held_) != 0) {
      mode_ = Mode::kText;  // a false start: the answer is text
      out.text += held_;
      held_.clear();
    }
  }
  return out;
}

ToolCallReader::Output ToolCallReader::finish() {
  Output out;
  if (mode_ == Mode::kUndecided) {
    out.text = std::move(held_);
    held_.clear();
    mode_ = Mode::kText;
  }
  return out;
}

void ToolCallReader::scan(char c, Output* out) {
  if (depth_ == 0) {  // before the array, or after its end (nothing may follow)
    if (!seen_open_ && c == '[') {
      seen_open_ = true;
      depth_ = 1;
    } else if (seen_open_ || !is_space(c)) {
      bad_ = true;
    }
    return;
  }
  const bool structural = !in_string_;
  if (in_string_) {
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
    }
  } else if (c == '"') {
    in_string_ = true;
  }
  if (structural && c != '"') {
    if (depth_ == 2 && in_value_ && (c == ',' || c == '}')) {
      end_value(out);
      if (c == '}') {
        depth_ = 1;
        if (!header_sent_) bad_ = true;  // a call without a name
      }
      return;
    }
    if (depth_ == 2 && !in_value_ && c == ':') {
      value_key_ = json_string(key_raw_);
      key_raw_.clear();
      in_value_ = true;
      return;
    }
    if (c == '[' || c == '{') {
      if (depth_ == 1 && c == '{') start_call();
      if (++depth_ <= 2) return;
    } else if (c == ']' || c == '}') {
      if (--depth_ < 2) return;
    } else if (depth_ < 2) {
      return;  // ',' and spaces between calls
    }
  }
  if (in_value_) {
    value_byte(c, out);
  } else {
    key_raw_ += c;
  }
}

void ToolCallReader::start_call() {
  ++index_;
  header_sent_ = false;
  args_started_ = false;
  in_value_ = false;
  key_raw_.clear();
  name_raw_.clear();
  pending_args_.clear();
  args_space_.clear();
}

void ToolCallReader::value_byte(char c, Output* out) {
  if (value_key_ == "name") {
    name_raw_ += c;
    return;
  }
  if (value_key_ != "arguments") return;
  // The grammar's optional spaces around the value are not part of the arguments' text.
  if (is_space(c) && !in_string_) {
    if (args_started_) args_space_ += c;
    return;
  }
  std::string text = args_space_ + c;
  args_space_.clear();
  args_started_ = true;
  if (header_sent_) {
    add_delta(out, Delta{index_, "", "", std::move(text)});
  } else {
    pending_args_ += text;  // arguments before the name: sent with the name
  }
}

void ToolCallReader::end_value(Output* out) {
  if (value_key_ == "name" && !header_sent_) {
    const std::string name = json_string(name_raw_);
    if (name.empty()) {
      bad_ = true;
    } else {
      add_delta(out, Delta{index_, new_tool_call_id(), name, pending_args_});
      pending_args_.clear();
      header_sent_ = true;
    }
  }
  args_space_.clear();
  value_key_.clear();
  name_raw_.clear();
  in_value_ = false;
}

std::optional<std::vector<ToolCall>> parse_tool_calls(const std::string& text) {
  ToolCallReader reader;
  ToolCallReader::Output out = reader.feed(text);
  reader.finish();
  if (!reader.complete()) return std::nullopt;
  // The grammar makes it so; checked again because the text is the client's answer.
  const json whole = json::parse(text.substr(std::strlen(constrain::kToolCallTrigger)), nullptr,
                                 /*allow_exceptions=*/false);
  if (!whole.is_array() || whole.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const ToolCallReader::Delta& d : out.deltas) {
    if (!d.name.empty()) calls.push_back(ToolCall{d.id, d.name, ""});
    if (calls.empty()) return std::nullopt;
    calls.back().arguments += d.arguments;
  }
  if (calls.size() != whole.size()) return std::nullopt;
  for (const ToolCall& c : calls) {
    if (json::parse(c.arguments, nullptr, /*allow_exceptions=*/false).is_discarded())
      return std::nullopt;
  }
  return calls;
}

}  // namespace llama2
