#include "common/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "common/check.h"

namespace llama2 {
namespace {

using nlohmann::json;

// Shortest readable form for messages: "-0.5", "1.5", "0", "nan", "inf".
std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  std::ostringstream os;
  os << v;
  return os.str();
}

// Stop strings are matched byte-wise against detokenized text; a stop string that is not valid
// UTF-8 could match in the middle of a character and make the emitted text invalid UTF-8.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not valid UTF-8.
    static const uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

[[noreturn]] void type_error(const char* key, const char* expected, const json& v) {
  throw Error("\"" + std::string(key) + "\" must be " + expected + " (got " + v.type_name() + ")");
}

// An integer in [lo, hi]; JSON floats are accepted when they hold an integral value (3.0), since
// some clients serialise every number as a double.
int64_t json_int(const json& v, const char* key, int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  const auto out_of_range = [&]() {
    return Error("\"" + std::string(key) + "\" must be an integer in " + range + " (got " +
                 v.dump() + ")");
  };
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) throw out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::trunc(d) != d) {
      throw Error("\"" + std::string(key) + "\" must be an integer (got " + v.dump() + ")");
    }
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) throw out_of_range();
    return static_cast<int64_t>(d);
  }
  type_error(key, "an integer", v);
}

float json_float(const json& v, const char* key) {
  if (!v.is_number()) type_error(key, "a number", v);
  return static_cast<float>(v.get<double>());
}

uint64_t json_seed(const json& v) {
  const auto negative = [&]() {
    return Error("\"seed\" must be a non-negative integer (got " + v.dump() + ")");
  };
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) throw negative();  // nlohmann stores non-negatives as unsigned
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::trunc(d) != d) throw Error("\"seed\" must be an integer (got " + v.dump() + ")");
    if (d < 0) throw negative();
    // 2^64 is the first double past uint64_t's range.
    if (d >= 18446744073709551616.0) {
      throw Error("\"seed\" must be an integer in [0, 18446744073709551615] (got " + v.dump() +
                  ")");
    }
    return static_cast<uint64_t>(d);
  }
  type_error("seed", "a non-negative integer", v);
}

std::vector<std::string> json_stop(const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) type_error("stop", "a string or an array of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      throw Error("\"stop\"[" + std::to_string(i) + "] must be a string (got " + v[i].type_name() +
                  ")");
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

// OpenAI's logit_bias: {"token id": bias}, the id in decimal (JSON keys are strings). Ids are
// checked against the vocabulary and biases against their range later (validate_sampling*).
std::vector<std::pair<int32_t, float>> json_logit_bias(const json& v) {
  if (!v.is_object()) type_error("logit_bias", "an object of token id -> bias", v);
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& item : v.items()) {
    const std::string& key = item.key();
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      // Client text: shown only when short and plain ASCII, so that the message stays valid UTF-8.
      const bool plain = key.size() <= 40 && std::all_of(key.begin(), key.end(), [](char c) {
                           return c >= ' ' && c <= '~' && c != '"' && c != '\\';
                         });
      throw Error(
          "\"logit_bias\" keys must be token ids written in decimal (got " +
          (plain ? "\"" + key + "\"" : "a key of " + std::to_string(key.size()) + " bytes") + ")");
    }
    if (!item.value().is_number()) {
      throw Error("\"logit_bias\"[\"" + key + "\"] must be a number in [-100, 100] (got " +
                  item.value().type_name() + ")");
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(item.value().get<double>()));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) {  // "7" and "07"
      throw Error("\"logit_bias\" names token id " + std::to_string(out[i].first) + " twice");
    }
  }
  return out;
}

std::vector<int32_t> json_token_ids(const json& v, const char* key) {
  if (!v.is_array()) type_error(key, "an array of token ids", v);
  std::vector<int32_t> out;
  for (const json& id : v) {
    out.push_back(static_cast<int32_t>(json_int(id, key, 0, std::numeric_limits<int32_t>::max())));
  }
  return out;
}

bool json_bool(const json& v, const char* key) {
  if (!v.is_boolean()) type_error(key, "a boolean", v);
  return v.get<bool>();
}

}  // namespace

json float_as_json(float f) {
  if (!std::isfinite(f)) return static_cast<double>(f);  // dumped as null, as any non-finite
  for (int digits = 6; digits < 9; ++digits) {
    std::ostringstream os;
    os.precision(digits);
    os << f;
    const double d = std::stod(os.str());
    if (static_cast<float>(d) == f) return d;
  }
  return static_cast<double>(f);  // 9 significant digits always round-trip a float
}

std::string validate_sampling(const SamplingParams& p, int prompt_tokens,
                              int max_position_embeddings) {
  if (!std::isfinite(p.temperature)) {
    return "temperature must be a finite number >= 0 (got " + fmt(p.temperature) + ")";
  }
  if (p.temperature < 0) return "temperature must be >= 0 (got " + fmt(p.temperature) + ")";
  if (!(p.top_p > 0 && p.top_p <= 1)) {  // written so that NaN fails too
    return "top_p must be in (0, 1] (got " + fmt(p.top_p) + ")";
  }
  if (p.top_k < 0) {
    return "top_k must be >= 0 (0, or -1 in a request: off) (got " + std::to_string(p.top_k) + ")";
  }
  if (!std::isfinite(p.repetition_penalty)) {
    return "repetition_penalty must be a finite number > 0 (got " + fmt(p.repetition_penalty) + ")";
  }
  if (p.repetition_penalty <= 0) {
    return "repetition_penalty must be > 0 (got " + fmt(p.repetition_penalty) + ")";
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", p.presence_penalty},
        {"frequency_penalty", p.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {  // written so that NaN fails too
      return std::string(name) + " must be in [-2, 2] (got " + fmt(value) + ")";
    }
  }
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) {
    return "top_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "] (got " +
           std::to_string(p.top_logprobs) + ")";
  }
  if (p.top_logprobs > 0 && !p.logprobs) {
    return "top_logprobs needs logprobs set to true (got top_logprobs " +
           std::to_string(p.top_logprobs) + " with logprobs false)";
  }
  if (p.prompt_logprobs && (*p.prompt_logprobs < 0 || *p.prompt_logprobs > kMaxTopLogprobs)) {
    return "prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
           "] (or null: off) (got " + std::to_string(*p.prompt_logprobs) + ")";
  }
  // 0 scores the prompt alone (OpenAI's echo with max_tokens 0).
  if (p.max_new_tokens < 1 && !(p.max_new_tokens == 0 && p.prompt_logprobs)) {
    return "max_new_tokens must be >= 1 (got " + std::to_string(p.max_new_tokens) + ")";
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {  // written so that NaN fails too
      return "logit_bias values must be in [-100, 100] (got " + fmt(bias) + " for token " +
             std::to_string(id) + ")";
    }
  }
  if (p.min_tokens < 0) {
    return "min_tokens must be >= 0 (got " + std::to_string(p.min_tokens) + ")";
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return "min_p must be in [0, 1] (got " + fmt(p.min_p) + ")";
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      return "stop strings must be non-empty (got \"\" at stop[" + std::to_string(i) + "])";
    }
    if (!valid_utf8(p.stop[i])) {
      return "stop strings must be valid UTF-8 (stop[" + std::to_string(i) + "] is not)";
    }
  }
  if (prompt_tokens < 1) {
    return "prompt must have >= 1 token (got " + std::to_string(prompt_tokens) + ")";
  }
  PromptLimits limits;
  limits.max_position_embeddings = max_position_embeddings;
  return prompt_length_error(limits, prompt_tokens, false, p.max_new_tokens);
}

std::string validate_sampling_tokens(const SamplingParams& p, int64_t vocab_size) {
  const std::string range = " is not a token id in [0, " + std::to_string(vocab_size) + ")";
  for (const auto& entry : p.logit_bias) {
    if (entry.first >= vocab_size) return "logit_bias key " + std::to_string(entry.first) + range;
  }
  for (int32_t id : p.stop_token_ids) {
    if (id >= vocab_size) return "stop_token_ids entry " + std::to_string(id) + range;
  }
  return "";
}

int64_t PromptLimits::max_tokens() const {
  int64_t m = INT64_MAX;
  for (int64_t l : {max_position_embeddings, max_seq_len, kv_capacity_tokens})
    if (l > 0) m = std::min(m, l);
  return m;
}

std::string prompt_length_error(const PromptLimits& limits, int64_t prompt_tokens, bool at_least,
                                int64_t max_new_tokens, const std::string& prompt_what) {
  // 64-bit sum: both operands may be near INT_MAX.
  const int64_t total = prompt_tokens + max_new_tokens;
  if (total <= limits.max_tokens()) return "";
  // The smallest limit, the model's first on a tie: the one the user can least change.
  std::string broken;
  if (limits.max_position_embeddings > 0 && total > limits.max_position_embeddings &&
      limits.max_position_embeddings == limits.max_tokens()) {
    broken = "max_position_embeddings (" + std::to_string(limits.max_position_embeddings) + ")";
  } else if (limits.max_seq_len > 0 && limits.max_seq_len == limits.max_tokens()) {
    broken = "--max-seq-len (" + std::to_string(limits.max_seq_len) + ")";
  } else {
    broken = "the KV cache (" + std::to_string(limits.kv_capacity_tokens) + " tokens)";
  }
  return prompt_what + " (" + (at_least ? "at least " : "") + std::to_string(prompt_tokens) +
         " tokens) + max_new_tokens (" + std::to_string(max_new_tokens) +
         ") = " + std::to_string(total) + " exceeds " + broken;
}

SamplingParams sampling_from_json(const nlohmann::json& obj, const SamplingParams& defaults) {
  if (!obj.is_object()) {
    throw Error("sampling parameters must be a JSON object (got " + std::string(obj.type_name()) +
                ")");
  }
  constexpr int64_t kIntMin = std::numeric_limits<int>::min();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  SamplingParams p = defaults;
  const auto given = [&](const char* key) -> const json* {
    const auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
  };
  if (const json* v = given("temperature")) p.temperature = json_float(*v, "temperature");
  if (const json* v = given("top_p")) p.top_p = json_float(*v, "top_p");
  if (const json* v = given("top_k")) {
    p.top_k = static_cast<int>(json_int(*v, "top_k", kIntMin, kIntMax));
    if (p.top_k == -1) p.top_k = 0;  // vLLM's and OpenAI-style clients' spelling of "off"
  }
  if (const json* v = given("repetition_penalty")) {
    p.repetition_penalty = json_float(*v, "repetition_penalty");
  }
  if (const json* v = given("presence_penalty")) {
    p.presence_penalty = json_float(*v, "presence_penalty");
  }
  if (const json* v = given("frequency_penalty")) {
    p.frequency_penalty = json_float(*v, "frequency_penalty");
  }
  if (const json* v = given("max_new_tokens")) {
    p.max_new_tokens = static_cast<int>(json_int(*v, "max_new_tokens", kIntMin, kIntMax));
  }
  if (const json* v = given("seed")) p.seed = json_seed(*v);
  if (const json* v = given("stop")) p.stop = json_stop(*v);
  if (const json* v = given("ignore_eos")) {
    if (!v->is_boolean()) type_error("ignore_eos", "a boolean", *v);
    p.ignore_eos = v->get<bool>();
  }
  if (const json* v = given("logprobs")) {
    if (!v->is_boolean()) type_error("logprobs", "a boolean", *v);
    p.logprobs = v->get<bool>();
  }
  if (const json* v = given("top_logprobs")) {
    p.top_logprobs = static_cast<int>(json_int(*v, "top_logprobs", kIntMin, kIntMax));
  }
  if (const json* v = given("prompt_logprobs")) {
    // -1 (vLLM's "the whole vocabulary") is refused by the range check, not taken as off.
    p.prompt_logprobs = static_cast<int>(json_int(*v, "prompt_logprobs", kIntMin, kIntMax));
  }
  if (const json* v = given("logit_bias")) p.logit_bias = json_logit_bias(*v);
  if (const json* v = given("stop_token_ids"))
    p.stop_token_ids = json_token_ids(*v, "stop_token_ids");
  if (const json* v = given("min_tokens")) {
    p.min_tokens = static_cast<int>(json_int(*v, "min_tokens", kIntMin, kIntMax));
  }
  if (const json* v = given("min_p")) p.min_p = json_float(*v, "min_p");
  if (const json* v = given("include_stop_str_in_output")) {
    p.include_stop_str_in_output = json_bool(*v, "include_stop_str_in_output");
  }
  if (const json* v = given("skip_special_tokens")) {
    p.skip_special_tokens = json_bool(*v, "skip_special_tokens");
  }
  if (const json* v = given("speculative")) p.speculative = json_bool(*v, "speculative");
  return p;
}

nlohmann::json sampling_to_json(const SamplingParams& p) {
  json j;
  j["temperature"] = float_as_json(p.temperature);
  j["top_p"] = float_as_json(p.top_p);
  j["top_k"] = p.top_k;
  j["repetition_penalty"] = float_as_json(p.repetition_penalty);
  j["presence_penalty"] = float_as_json(p.presence_penalty);
  j["frequency_penalty"] = float_as_json(p.frequency_penalty);
  j["max_new_tokens"] = p.max_new_tokens;
  j["seed"] = p.seed ? json(*p.seed) : json(nullptr);
  j["stop"] = p.stop;
  j["ignore_eos"] = p.ignore_eos;
  j["logprobs"] = p.logprobs;
  j["top_logprobs"] = p.top_logprobs;
  j["prompt_logprobs"] = p.prompt_logprobs ? json(*p.prompt_logprobs) : json(nullptr);
  json bias = json::object();
  for (const auto& [id, value] : p.logit_bias) bias[std::to_string(id)] = float_as_json(value);
  j["logit_bias"] = std::move(bias);
  j["stop_token_ids"] = p.stop_token_ids;
  j["min_tokens"] = p.min_tokens;
  j["min_p"] = float_as_json(p.min_p);
  j["include_stop_str_in_output"] = p.include_stop_str_in_output;
  j["skip_special_tokens"] = p.skip_special_tokens;
  j["speculative"] = p.speculative ? json(*p.speculative) : json(nullptr);
  return j;
}

}  // namespace llama2
