// A model's generation_config.json as the source of a request's default sampling parameters, the
// way vLLM reads it (its --generation-config auto): the keys temperature, top_p, top_k,
// repetition_penalty and max_new_tokens, where present, replace the engine's built-in defaults
// (common/sampling_params.h); the command line's sampling flags and each request's own values
// still override them. `--generation-config ignore` keeps the built-in defaults.
//
// Read but not applied, as in vLLM: do_sample (a value of false does not make requests greedy;
// temperature 0 does), max_length (a total length, not a number of new tokens). min_p is named in
// the start-up note as not applied as a default (requests set min_p themselves). Other keys
// (bos/eos ids, pad_token_id, transformers_version, ...) are not sampling defaults.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "common/sampling_params.h"

namespace llama2 {

// --generation-config
enum class GenerationConfigMode { kAuto, kIgnore };
// "auto" | "ignore"; Error naming the flag and the allowed values otherwise.
GenerationConfigMode parse_generation_config_mode(const std::string& s);

struct GenerationDefaults {
  std::optional<float> temperature, top_p, repetition_penalty;
  std::optional<int> top_k, max_new_tokens;
  std::optional<float> min_p;  // present in the file, not applied (noted)
  std::string source;          // the file, for the note ("" when none was read)

  bool empty() const;
  // Sets the fields present here in `p`.
  void apply_to(SamplingParams* p) const;
  // "temperature 0.6, top_p 0.9" ("" when empty).
  std::string describe() const;
};

// The sampling defaults of a generation_config.json object; `source` names the file in errors.
// Error naming the file and the key for a wrong type or a value outside its range (temperature
// >= 0, top_p in (0, 1], top_k >= 0, repetition_penalty > 0, max_new_tokens >= 1).
GenerationDefaults parse_generation_config(const nlohmann::json& j, const std::string& source);
// DIR/generation_config.json (none: empty defaults); Error for unreadable or invalid JSON.
GenerationDefaults load_generation_config(const std::string& model_dir);

}  // namespace llama2
