#include "coordinator/requests/request.h"

#include "common/check.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/requests/request_tools.h"
#include "coordinator/text/chat_tools.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

using nlohmann::json;

const std::set<std::string> kRequestKeys = {"response_format",
                                            "regex",
                                            "choice",
                                            "grammar",
                                            "prompt",
                                            "prompt_tokens",
                                            "messages",
                                            "temperature",
                                            "top_p",
                                            "top_k",
                                            "repetition_penalty",
                                            "presence_penalty",
                                            "frequency_penalty",
                                            "max_new_tokens",
                                            "seed",
                                            "stop",
                                            "ignore_eos",
                                            "logprobs",
                                            "top_logprobs",
                                            "prompt_logprobs",
                                            "logit_bias",
                                            "stop_token_ids",
                                            "min_tokens",
                                            "min_p",
                                            "include_stop_str_in_output",
                                            "skip_special_tokens",
                                            "speculative",
                                            "tools",
                                            "tool_choice",
                                            "parallel_tool_calls"};

namespace {
ParsedRequest invalid(ErrorCode code, const std::string& msg) {
  ParsedRequest r;
  r.error_code = code;
  r.error_message = msg;
  return r;
}

std::string key_list(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::set<std::string> all = a;
  all.insert(b.begin(), b.end());
  std::string s;
  for (const auto& k : all) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// The longest prefix of `s` of at most `max_bytes` that does not end inside a UTF-8 character.
size_t utf8_cut(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s.size();
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

// The length checks, once the prompt has `prompt_tokens` tokens (at least; 1 for a text prompt
// still to tokenize): prompt_too_long first, then the sampling values.
void check_lengths(ParsedRequest& r, int64_t prompt_tokens, const ModelConfig& config) {
  PromptLimits limits;
  limits.max_position_embeddings = config.max_position_embeddings;
  if (r.params.max_new_tokens >= 0) {
    std::string too_long =
        prompt_length_error(limits, prompt_tokens, false, r.params.max_new_tokens);
    if (!too_long.empty()) {
      r.error_code = ErrorCode::kPromptTooLong;
      r.error_message = std::move(too_long);
      return;
    }
  }
  const std::string bad =
      validate_sampling(r.params, static_cast<int>(prompt_tokens), config.max_position_embeddings);
  if (!bad.empty()) {
    r.error_code = ErrorCode::kInvalidRequest;
    r.error_message = bad;
  }
}
}  // namespace

std::string quote(const std::string& text) {
  if (text.size() <= kMaxQuoteBytes) return "\"" + text + "\"";
  return "\"" + text.substr(0, utf8_cut(text, kMaxQuoteBytes)) + "...\" (" +
         std::to_string(text.size()) + " bytes)";
}

std::string quote_json(const json& value) {
  if (value.is_string()) return quote(value.get_ref<const std::string&>());
  // Numbers, booleans and null are short; arrays and objects are at most a frame (1 MiB) and
  // nest at most kMaxJsonDepth levels, so dumping them whole before cutting is bounded.
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() <= kMaxQuoteBytes) return text;
  return text.substr(0, utf8_cut(text, kMaxQuoteBytes)) + "... (" + std::to_string(text.size()) +
         " bytes)";
}

namespace {

// `messages`: the dialog checked (its order rule too), its tool turns and the callable tools
// rendered (chat_tools.h), and left to tokenize_request.
void parse_chat_prompt(const json& messages, const ModelConfig& config, ParsedRequest* r) {
  try {
    r->chat = render_tool_dialog(parse_chat_messages(messages),
                                 r->tools != nullptr ? r->tools->tools : json());
    // The order rule, before any tokenizing: encode_llama2_chat checks it again when it runs.
    check_chat_order(r->chat);
  } catch (const Error& e) {
    *r = invalid(ErrorCode::kInvalidRequest, e.what());
    return;
  }
  r->is_chat = true;
  r->text_pending = true;
  check_lengths(*r, 1, config);
}

// `prompt`: a string of valid UTF-8, left to tokenize_request.
void parse_text_prompt(const json& prompt, const ModelConfig& config, ParsedRequest* r) {
  if (!prompt.is_string()) {
    *r = invalid(ErrorCode::kInvalidRequest, "\"prompt\" must be a string");
    return;
  }
  r->prompt_text = prompt.get<std::string>();
  if (!is_valid_utf8(r->prompt_text)) {
    *r = invalid(ErrorCode::kInvalidRequest, "\"prompt\" is not valid UTF-8");
    return;
  }
  r->text_pending = true;
  check_lengths(*r, 1, config);  // <s> at least: bad values are refused before tokenizing
}

// `prompt_tokens`: ids inside the vocabulary.
void parse_token_prompt(const json& ids, const ModelConfig& config, ParsedRequest* r) {
  if (!ids.is_array() || ids.empty()) {
    *r = invalid(ErrorCode::kInvalidRequest,
                 "\"prompt_tokens\" must be a non-empty array of token ids");
    return;
  }
  r->prompt.reserve(ids.size());
  for (const auto& v : ids) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= config.vocab_size) {
      *r = invalid(ErrorCode::kInvalidRequest, "\"prompt_tokens\" entry " + quote_json(v) +
                                                   " is not a token id in [0, " +
                                                   std::to_string(config.vocab_size) + ")");
      return;
    }
    r->prompt.push_back(v.get<int>());
  }
  check_lengths(*r, static_cast<int64_t>(r->prompt.size()), config);
}

// A non-null value of `key` in `obj`, or nullptr.
const json* given_value(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && !it->is_null() ? &*it : nullptr;
}

// The callable tools' constraint into r->constraint; "" when fine, else why not.
std::string tool_constraint_error(const json& obj, ParsedRequest* r) {
  if (r->tools == nullptr) return "";
  if (r->constraint != nullptr) {
    return "\"tools\" and \"" + r->constraint->field +
           "\" both constrain the output: give at most one (or \"tool_choice\": \"none\")";
  }
  if (given_value(obj, "messages") == nullptr)
    return "\"tools\" need \"messages\": the tools are written into the dialog";
  r->constraint = tool_constraint(*r->tools);
  return "";
}

}  // namespace

ParsedRequest parse_request_fields(const json& obj, const SamplingParams& defaults,
                                   const ModelConfig& config,
                                   const std::set<std::string>& extra_keys) {
  if (!obj.is_object())
    return invalid(ErrorCode::kInvalidRequest, "a request must be a JSON object");
  for (const auto& item : obj.items()) {
    if (!kRequestKeys.count(item.key()) && !extra_keys.count(item.key())) {
      // Typos such as "max_tokens" would otherwise silently fall back to the defaults.
      return invalid(ErrorCode::kInvalidRequest,
                     "unknown key " + quote(item.key()) +
                         " (allowed: " + key_list(kRequestKeys, extra_keys) + ")");
    }
  }
  ParsedRequest r;
  try {
    r.params = sampling_from_json(obj, defaults);
    r.constraint = parse_constraint_fields(obj);
    r.tools = parse_tool_fields(obj);
  } catch (const Error& e) {
    return invalid(ErrorCode::kInvalidRequest, e.what());
  }
  if (std::string bad = tool_constraint_error(obj, &r); !bad.empty())
    return invalid(ErrorCode::kInvalidRequest, bad);
  const std::string bad_id = validate_sampling_tokens(r.params, config.vocab_size);
  if (!bad_id.empty()) return invalid(ErrorCode::kInvalidRequest, bad_id);
  if (r.constraint != nullptr && r.params.ignore_eos) {
    // The grammar decides where the output ends; EOS is its end (docs/structured-output.md).
    return invalid(ErrorCode::kInvalidRequest,
                   "\"ignore_eos\" cannot be true with \"" + r.constraint->field +
                       "\": the constraint decides where the output ends");
  }
  const json* text = given_value(obj, "prompt");
  const json* ids = given_value(obj, "prompt_tokens");
  const json* chat = given_value(obj, "messages");
  if (int{text != nullptr} + int{ids != nullptr} + int{chat != nullptr} != 1) {
    return invalid(ErrorCode::kInvalidRequest,
                   "give exactly one of \"prompt\" (string), \"prompt_tokens\" (array of token "
                   "ids) or \"messages\" (chat turns: [{\"role\", \"content\"}, ...])");
  }
  if (chat != nullptr) {
    parse_chat_prompt(*chat, config, &r);
  } else if (text != nullptr) {
    parse_text_prompt(*text, config, &r);
  } else {
    parse_token_prompt(*ids, config, &r);
  }
  return r;
}

size_t ParsedRequest::pending_bytes() const {
  size_t bytes = prompt_text.size();
  for (const ChatMessage& m : chat) bytes += m.content.size();
  return bytes;
}

void tokenize_request(ParsedRequest& r, const Tokenizer& tok, const ModelConfig& config) {
  if (!r.ok() || !r.text_pending) return;
  if (r.is_chat) {
    r.prompt = encode_llama2_chat(tok, r.chat);
    std::vector<ChatMessage>().swap(r.chat);
  } else {
    r.prompt = tok.encode(r.prompt_text, /*add_bos=*/true);
  }
  r.text_pending = false;
  std::string().swap(r.prompt_text);  // up to a frame of text, no longer needed
  check_lengths(r, static_cast<int64_t>(r.prompt.size()), config);
}

std::optional<Refusal> prepare_prompt(ParsedRequest& r, const Tokenizer& tok,
                                      const ModelConfig& config, const PromptLimits& limits,
                                      ConstraintCompiler& constraints) {
  try {
    tokenize_request(r, tok, config);
  } catch (const std::exception& e) {
    return Refusal{ErrorCode::kInternal, std::string("tokenizing the prompt failed: ") + e.what()};
  }
  if (!r.ok()) return Refusal{*r.error_code, r.error_message};
  std::string too_long = prompt_length_error(limits, static_cast<int64_t>(r.prompt.size()), false,
                                             r.params.max_new_tokens);
  if (!too_long.empty()) return Refusal{ErrorCode::kPromptTooLong, std::move(too_long)};
  compile_request_constraint(r, constraints);
  if (!r.ok()) return Refusal{*r.error_code, r.error_message};
  return std::nullopt;
}

void compile_request_constraint(ParsedRequest& r, ConstraintCompiler& constraints) {
  if (!r.ok() || r.constraint == nullptr) return;
  if (std::optional<Refusal> bad = constraints.compile(*r.constraint)) {
    r.error_code = bad->code;
    r.error_message = std::move(bad->message);
  }
}

ParsedRequest parse_request(const json& obj, const SamplingParams& defaults, const Tokenizer& tok,
                            const ModelConfig& config, const std::set<std::string>& extra_keys) {
  ParsedRequest r = parse_request_fields(obj, defaults, config, extra_keys);
  tokenize_request(r, tok, config);
  return r;
}

json top_logprobs_json(const std::vector<TopLogprob>& top) {
  json out = json::array();
  for (const TopLogprob& t : top) {
    out.push_back(json{{"logprob", float_as_json(t.logprob)}, {"token_id", t.token}});
  }
  return out;
}

json speculative_json(const Finished& done) {
  if (done.speculative == SpecUse::kNone) return nullptr;
  json out{{"status", to_string(done.speculative)}};
  if (done.speculative == SpecUse::kOn) {
    out["proposed_tokens"] = done.spec_proposed;
    out["accepted_tokens"] = done.spec_accepted;
    out["verify_steps"] = done.spec_verify_steps;
  }
  return out;
}

json prompt_logprobs_json(const Finished& done) {
  json out = json::array({nullptr});  // the first token has nothing before it
  for (const PromptLogprob& p : done.prompt_logprobs) {
    out.push_back(json{{"token_id", p.token},
                       {"logprob", float_as_json(p.logprob)},
                       {"rank", p.rank},
                       {"top_logprobs", top_logprobs_json(p.top)}});
  }
  return out;
}

void add_logprobs_json(const Finished& done, json* out) {
  json lp = json::array();
  for (float x : done.logprobs) lp.push_back(float_as_json(x));
  (*out)["logprobs"] = std::move(lp);
  json top = json::array();
  for (const auto& step : done.top_logprobs) top.push_back(top_logprobs_json(step));
  (*out)["top_logprobs"] = std::move(top);
}

}  // namespace llama2
