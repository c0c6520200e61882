// One generation request as the batch file and (later) the socket protocol express it: a JSON
// object with a prompt (text or token ids) and sampling values overriding the defaults.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"

namespace llama2 {

class Tokenizer;

struct ParsedRequest {
  std::vector<int> prompt;  // token ids (BOS added to text prompts)
  SamplingParams params;    // defaults overridden by the request's keys, validated
  std::string error_code;   // "" when valid; else invalid_request | prompt_too_long
  std::string error_message;
  bool ok() const { return error_code.empty(); }
};

// Keys every request may carry besides `extra_keys` (e.g. custom_id, id, stream).
extern const std::set<std::string> kRequestKeys;

// Parses `obj`. Never throws for bad input: the problem (unknown key, wrong type, missing or
// double prompt, token id outside the vocabulary, value out of range, too long) is returned as
// error_code + a message naming the key and the allowed values.
ParsedRequest parse_request(const nlohmann::json& obj, const SamplingParams& defaults,
                            const Tokenizer& tok, const ModelConfig& config,
                            const std::set<std::string>& extra_keys);

}  // namespace llama2
