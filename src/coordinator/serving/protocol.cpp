#include "coordinator/serving/protocol.h"

#include "common/check.h"
#include "common/frame.h"
#include "coordinator/serving/token_bound.h"

namespace llama2 {

using nlohmann::json;

namespace {

FrameRequest refuse(const json& id, ErrorCode code, const std::string& message) {
  FrameRequest r;
  r.op = FrameRequest::Op::kError;
  r.error = error_event(id, code, message);
  r.error_code = code;
  return r;
}

// "a string of 300000 bytes", "an object", ...: what a bad id was, without repeating it.
std::string describe(const json& v) {
  if (v.is_string())
    return "a string of " + std::to_string(v.get_ref<const std::string&>().size()) + " bytes";
  return std::string(v.type_name());
}

FrameRequest decode_generate(const json& j, const json& id, const SamplingParams& defaults,
                             const ModelConfig& config, const ServeLimits& limits) {
  if (!id.is_string() || id.get_ref<const std::string&>().empty() ||
      id.get_ref<const std::string&>().size() > kMaxEchoedIdBytes) {
    return refuse(id, ErrorCode::kInvalidRequest,
                  "\"id\" must be a string of 1 to " + std::to_string(kMaxEchoedIdBytes) +
                      " bytes (got " + (j.contains("id") ? describe(id) : "none") + ")");
  }
  FrameRequest r;
  r.op = FrameRequest::Op::kGenerate;
  r.id = id.get<std::string>();
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    if (!s->is_boolean())
      return refuse(id, ErrorCode::kInvalidRequest, "\"stream\" must be true or false");
    r.stream = s->get<bool>();
  }
  r.timeout_ms = limits.request_timeout_ms;
  if (auto t = j.find("timeout_ms"); t != j.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) {
      return refuse(id, ErrorCode::kInvalidRequest,
                    "\"timeout_ms\" must be an integer >= 1 (the server caps it at " +
                        std::to_string(limits.request_timeout_ms) + ")");
    }
    r.timeout_ms = std::min(t->get<int64_t>(), limits.request_timeout_ms);
  }
  r.request = parse_request_fields(j, defaults, config, {"op", "id", "stream", "timeout_ms"});
  if (!r.request.ok()) return refuse(id, *r.request.error_code, r.request.error_message);
  const int max_new = r.request.params.max_new_tokens;
  if (r.request.is_chat) {
    // No byte bound for a dialog (whitespace the chat format strips would make one unsound): its
    // length is checked once it is encoded.
  } else if (r.request.text_pending) {
    // Refused here, without tokenizing, only when no tokenization could make it fit.
    const size_t bytes = r.request.prompt_text.size();
    const int64_t least = min_prompt_tokens(bytes, limits.max_piece_bytes);
    std::string too_long = prompt_length_error(limits.prompt, least, true, max_new,
                                               "prompt of " + std::to_string(bytes) + " bytes");
    if (!too_long.empty()) return refuse(id, ErrorCode::kPromptTooLong, too_long);
  } else if (std::string too_long = prompt_length_error(
                 limits.prompt, static_cast<int64_t>(r.request.prompt.size()), false, max_new);
             !too_long.empty()) {
    return refuse(id, ErrorCode::kPromptTooLong, too_long);
  }
  return r;
}

size_t utf8_prefix(const std::string& s, size_t max_bytes) {
  size_t n = std::min(s.size(), max_bytes);
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

// The frame of a short error event that cannot fail to fit.
std::string fallback_frame(const json& id, const std::string& message) {
  const json e = error_event(id, ErrorCode::kInternal, message);
  return encode_frame(e.dump(-1, ' ', false, json::error_handler_t::replace), kMaxEventFrameBytes);
}

}  // namespace

FrameRequest decode_request(const std::string& payload, const SamplingParams& defaults,
                            const ModelConfig& config, const ServeLimits& limits) {
  if (!is_valid_utf8(payload))
    return refuse(nullptr, ErrorCode::kInvalidRequest, "frame is not valid UTF-8");
  if (json_nesting_exceeds(payload, kMaxJsonDepth)) {
    return refuse(nullptr, ErrorCode::kInvalidRequest,
                  "frame nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  const json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return refuse(nullptr, ErrorCode::kInvalidRequest, "frame is not valid JSON");
  if (!j.is_object())
    return refuse(nullptr, ErrorCode::kInvalidRequest, "frame must be a JSON object");
  const auto id_it = j.find("id");
  const json id = id_it != j.end() ? *id_it : json(nullptr);
  const auto op_it = j.find("op");
  if (op_it == j.end() || !op_it->is_string()) {
    return refuse(id, ErrorCode::kInvalidRequest,
                  std::string(op_it == j.end() ? "missing \"op\"" : "\"op\" must be a string") +
                      " (allowed: generate, cancel, health, stats)");
  }
  const std::string& op = op_it->get_ref<const std::string&>();
  if (op == "generate") return decode_generate(j, id, defaults, config, limits);
  FrameRequest r;
  if (op == "cancel") {
    if (!id.is_string()) {
      return refuse(id, ErrorCode::kInvalidRequest,
                    "cancel: \"id\" must be the string id of a generation in flight on this "
                    "connection (got " +
                        describe(id) + ")");
    }
    r.op = FrameRequest::Op::kCancel;
    r.id = id.get<std::string>();
    return r;
  }
  if (op == "health" || op == "stats") {
    r.op = op == "health" ? FrameRequest::Op::kHealth : FrameRequest::Op::kStats;
    return r;
  }
  return refuse(id, ErrorCode::kInvalidRequest,
                "unknown op " + quote(op) + " (allowed: generate, cancel, health, stats)");
}

json echo_id(const json& id) {
  if (id.is_number_integer()) return id;
  if (id.is_string() && id.get_ref<const std::string&>().size() <= kMaxEchoedIdBytes) return id;
  return nullptr;
}

json error_event(const json& id, ErrorCode code, const std::string& message) {
  std::string m = message;
  if (m.size() > kMaxMessageBytes) {
    m = m.substr(0, utf8_prefix(m, kMaxMessageBytes)) + "... (message of " +
        std::to_string(message.size()) + " bytes cut)";
  }
  return json{{"event", "error"}, {"id", echo_id(id)}, {"code", to_string(code)}, {"message", m}};
}

std::string event_frame(const json& event) {
  try {
    return event_frame(event.dump(-1, ' ', false, json::error_handler_t::replace),
                       event.is_object() && event.contains("id") && event["id"].is_string()
                           ? event["id"].get<std::string>()
                           : std::string());
  } catch (const std::exception& e) {  // e.g. std::bad_alloc while dumping
    return fallback_frame(event.is_object() ? event.value("id", json()) : json(),
                          std::string("the reply could not be built: ") + e.what());
  }
}

std::string event_frame(const std::string& payload, const std::string& id) {
  if (payload.size() >= kMinFrameBytes && payload.size() <= kMaxEventFrameBytes) {
    return encode_frame(payload, kMaxEventFrameBytes);
  }
  return fallback_frame(id.empty() ? json() : json(id),
                        "the reply (" + std::to_string(payload.size()) +
                            " bytes) exceeds the protocol's limit of " +
                            std::to_string(kMaxEventFrameBytes) +
                            " bytes for a server frame; ask for it with \"stream\": true");
}

}  // namespace llama2
