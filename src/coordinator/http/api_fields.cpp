#include "coordinator/http/api_fields.h"

#include "coordinator/http/structured_fields.h"
#include "coordinator/requests/request.h"

namespace llama2 {

using nlohmann::json;

// top_k, repetition_penalty, ignore_eos, stop_token_ids, min_tokens, min_p,
// include_stop_str_in_output and skip_special_tokens are the extensions vLLM also takes;
// speculative (docs/speculative.md) is ours.
const std::vector<std::string> kSameNameKeys = {"temperature",
                                                "top_p",
                                                "seed",
                                                "stop",
                                                "top_k",
                                                "repetition_penalty",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "ignore_eos",
                                                "logit_bias",
                                                "stop_token_ids",
                                                "min_tokens",
                                                "min_p",
                                                "include_stop_str_in_output",
                                                "skip_special_tokens",
                                                "speculative"};

namespace {

// The parameters both endpoints implement: the sampling keys spelled as the socket spells them
// (kSameNameKeys, outside this namespace), then the envelope's; then each endpoint's own.
std::set<std::string> read_common() {
  std::set<std::string> keys(kSameNameKeys.begin(), kSameNameKeys.end());
  keys.insert({"model", "max_tokens", "stream", "stream_options", "logprobs", "prompt_logprobs",
               "echo", "n"});
  return keys;
}
const std::set<std::string> kReadCommon = read_common();
const std::set<std::string> kReadCompletion = {"prompt"};
const std::set<std::string> kReadChat = {"messages",     "max_completion_tokens",
                                         "top_logprobs", "tools",
                                         "tool_choice",  "parallel_tool_calls"};
// What --strict-api accepts besides the read keys and the table's: the keys taken before
// tolerance existed.
const std::set<std::string> kStrictCommon = {"user"};
const std::set<std::string> kStrictCompletion = {"best_of", "suffix"};
const std::set<std::string> kStrictChat = {
    "tools", "tool_choice", "functions", "function_call", "response_format", "parallel_tool_calls"};

// The one value (besides null) with which a refused field changes nothing.
enum class Harmless {
  kNever,  // any value is refused
  kFalse,  // false
  kTrue,   // true
  kZero,   // the number 0
  kOne,    // the integer 1
  kEmpty,  // [] or {}
  kNone,   // "none"
  kText,   // {"type": "text"}
};

struct Refused {
  const char* name;
  bool prefix;  // every key starting with `name` (vLLM's guided_json, guided_regex, ...)
  Harmless harmless;
  const char* what;  // the message's subject (a prefix row: a note after the quoted key)
};

// Fields that would change the output if honoured, refused until implemented: delete a row when
// its field is wired through.
constexpr Refused kRefused[] = {
    // (Structured output, response_format / guided_* / structured_outputs / grammar /
    // json_schema, is read: structured_fields.h.)
    // The legacy function-calling fields (tools / tool_choice are read: request_tools.h).
    {"functions", false, Harmless::kEmpty, "\"functions\" (tool calls)"},
    {"function_call", false, Harmless::kNone, "\"function_call\" other than \"none\""},
    // More than one choice, or the prompt in the output.
    {"best_of", false, Harmless::kOne, "\"best_of\" other than 1"},
    {"use_beam_search", false, Harmless::kFalse, "\"use_beam_search\""},
    {"suffix", false, Harmless::kNever, "\"suffix\""},
    // vLLM's sampling and text extensions this server does not implement (the ones it does are
    // in kSameNameKeys).
    {"bad_words", false, Harmless::kEmpty, "\"bad_words\""},
    {"allowed_token_ids", false, Harmless::kNever, "\"allowed_token_ids\""},
    {"truncate_prompt_tokens", false, Harmless::kNever, "\"truncate_prompt_tokens\""},
    {"return_tokens_as_token_ids", false, Harmless::kFalse, "\"return_tokens_as_token_ids\": true"},
    // The prompt as the Llama-2 chat format writes it, always with the assistant's turn next.
    {"chat_template", false, Harmless::kNever, "\"chat_template\" (the Llama-2 format is fixed)"},
    {"add_generation_prompt", false, Harmless::kTrue, "\"add_generation_prompt\": false"},
    {"continue_final_message", false, Harmless::kFalse, "\"continue_final_message\": true"},
};

// The most bytes of a field name the log shows.
constexpr size_t kMaxShownBytes = 80;

const Refused* find_refused(const std::string& key) {
  for (const Refused& r : kRefused) {
    if (r.prefix ? key.rfind(r.name, 0) == 0 : key == r.name) return &r;
  }
  return nullptr;
}

bool harmless(const json& v, Harmless h) {
  switch (h) {
    case Harmless::kNever:
      return false;
    case Harmless::kFalse:
      return v.is_boolean() && !v.get<bool>();
    case Harmless::kTrue:
      return v.is_boolean() && v.get<bool>();
    case Harmless::kZero:
      return v.is_number() && v.get<double>() == 0;
    case Harmless::kOne:
      return v.is_number_integer() && v.get<int64_t>() == 1;
    case Harmless::kEmpty:
      return (v.is_array() || v.is_object()) && v.empty();
    case Harmless::kNone:
      return v.is_string() && v.get_ref<const std::string&>() == "none";
    case Harmless::kText:
      return v.is_object() && v.value("type", json()) == "text";
  }
  return false;
}

}  // namespace

FieldUse field_use(const std::string& key, ApiKind kind) {
  const std::set<std::string>& own = kind == ApiKind::kChat ? kReadChat : kReadCompletion;
  if (kReadCommon.count(key) || own.count(key) || kStructuredKeys.count(key)) {
    return FieldUse::kRead;
  }
  if (find_refused(key) != nullptr) return FieldUse::kRefused;
  return FieldUse::kIgnored;
}

bool strict_api_key(const std::string& key, ApiKind kind) {
  const bool chat = kind == ApiKind::kChat;
  return kReadCommon.count(key) || (chat ? kReadChat : kReadCompletion).count(key) ||
         kStructuredKeys.count(key) || kStrictCommon.count(key) ||
         (chat ? kStrictChat : kStrictCompletion).count(key);
}

std::string strict_api_keys(ApiKind kind) {
  const bool chat = kind == ApiKind::kChat;
  std::set<std::string> all = kReadCommon;
  for (const auto* set : {chat ? &kReadChat : &kReadCompletion, &kStructuredKeys, &kStrictCommon,
                          chat ? &kStrictChat : &kStrictCompletion}) {
    all.insert(set->begin(), set->end());
  }
  std::string s;
  for (const std::string& k : all) s += (s.empty() ? "" : ", ") + k;
  return s;
}

std::optional<RefusedField> refused_field(const json& body) {
  for (const auto& item : body.items()) {
    const Refused* r = find_refused(item.key());
    if (r == nullptr || item.value().is_null() || harmless(item.value(), r->harmless)) continue;
    // A prefix row's subject is the key itself (quoted: client text), then the row's note.
    return RefusedField{item.key(), r->prefix ? quote(item.key()) + " " + r->what : r->what};
  }
  return std::nullopt;
}

std::vector<std::string> ignored_fields(const json& body, ApiKind kind) {
  std::vector<std::string> out;
  for (const auto& item : body.items()) {
    if (field_use(item.key(), kind) == FieldUse::kIgnored) out.push_back(item.key());
  }
  return out;
}

std::vector<std::string> IgnoredFieldLog::note(const std::vector<std::string>& keys,
                                               const std::string& request_id) {
  std::vector<std::string> fresh;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& k : keys) {
    if (full_ || seen_.count(k)) continue;
    if (seen_.size() == kMaxNames) {
      full_ = true;
      out_ << "llama2 serve: HTTP: " << kMaxNames
           << " ignored request fields named; further ones are not logged" << std::endl;
      break;
    }
    seen_.insert(k);
    fresh.push_back(k);
    // Client text: cut, and written as JSON (escaped; a cut character becomes U+FFFD).
    const json shown = k.size() > kMaxShownBytes ? k.substr(0, kMaxShownBytes) + "..." : k;
    out_ << "llama2 serve: HTTP: ignoring the request field "
         << shown.dump(-1, ' ', false, json::error_handler_t::replace)
         << (request_id.empty() ? "" : " (first in request_id=" + request_id + ")")
         << " (not used by this server; logged once; --strict-api refuses unknown fields)"
         << std::endl;
  }
  return fresh;
}

}  // namespace llama2
