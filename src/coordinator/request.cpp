#include "coordinator/request.h"

#include "common/check.h"
#include "coordinator/tokenizer.h"

namespace llama2 {

const std::set<std::string> kRequestKeys = {
    "prompt",         "prompt_tokens", "temperature", "top_p",     "top_k", "repetition_penalty",
    "max_new_tokens", "seed",          "stop",        "ignore_eos"};

namespace {
ParsedRequest invalid(const std::string& code, const std::string& msg) {
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
}  // namespace

ParsedRequest parse_request(const nlohmann::json& obj, const SamplingParams& defaults,
                            const Tokenizer& tok, const ModelConfig& config,
                            const std::set<std::string>& extra_keys) {
  if (!obj.is_object()) return invalid("invalid_request", "a request must be a JSON object");
  for (const auto& item : obj.items()) {
    if (!kRequestKeys.count(item.key()) && !extra_keys.count(item.key())) {
      // Typos such as "max_tokens" would otherwise silently fall back to the defaults.
      return invalid("invalid_request", "unknown key \"" + item.key() + "\" (allowed: " +
                                            key_list(kRequestKeys, extra_keys) + ")");
    }
  }
  ParsedRequest r;
  try {
    r.params = sampling_from_json(obj, defaults);
  } catch (const Error& e) {
    return invalid("invalid_request", e.what());
  }

  const bool has_text = obj.contains("prompt") && !obj["prompt"].is_null();
  const bool has_ids = obj.contains("prompt_tokens") && !obj["prompt_tokens"].is_null();
  if (has_text == has_ids) {
    return invalid(
        "invalid_request",
        "give exactly one of \"prompt\" (string) or \"prompt_tokens\" (array of token ids)");
  }
  if (has_text) {
    if (!obj["prompt"].is_string())
      return invalid("invalid_request", "\"prompt\" must be a string");
    const std::string text = obj["prompt"].get<std::string>();
    if (!is_valid_utf8(text)) return invalid("invalid_request", "\"prompt\" is not valid UTF-8");
    r.prompt = tok.encode(text, /*add_bos=*/true);
  } else {
    const auto& ids = obj["prompt_tokens"];
    if (!ids.is_array() || ids.empty()) {
      return invalid("invalid_request", "\"prompt_tokens\" must be a non-empty array of token ids");
    }
    for (const auto& v : ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= config.vocab_size) {
        return invalid("invalid_request", "\"prompt_tokens\" entry " + v.dump() +
                                              " is not a token id in [0, " +
                                              std::to_string(config.vocab_size) + ")");
      }
      r.prompt.push_back(v.get<int>());
    }
  }
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.params.max_new_tokens;
  if (r.params.max_new_tokens >= 1 && total > config.max_position_embeddings) {
    return invalid("prompt_too_long",
                   "prompt (" + std::to_string(r.prompt.size()) + " tokens) + max_new_tokens (" +
                       std::to_string(r.params.max_new_tokens) + ") = " + std::to_string(total) +
                       " exceeds max_position_embeddings (" +
                       std::to_string(config.max_position_embeddings) + ")");
  }
  const std::string bad = validate_sampling(r.params, static_cast<int>(r.prompt.size()),
                                            config.max_position_embeddings);
  if (!bad.empty()) return invalid("invalid_request", bad);
  return r;
}

}  // namespace llama2
