// Per-request sampling parameters: the value type shared by the CLI, the batch and serve front ends
// and the coordinator's sampler. No MPI, CUDA or tokenizer includes: only the coordinator samples,
// but the front ends parse and validate.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llama2 {

// Semantics follow Hugging Face `transformers` generate (see coordinator/scheduler/sampler.h).
struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  float top_p = 1.0f;               // (0, 1]; 1 = off
  int top_k = 0;                    // 0 = disabled (a request's -1 too: sampling_from_json)
  float repetition_penalty = 1.0f;  // > 0, 1 = off
  // OpenAI's penalties on the tokens generated so far (not the prompt): the logit of token j drops
  // by frequency_penalty * count(j) + presence_penalty * (count(j) > 0). [-2, 2], 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int max_new_tokens = 128;       // >= 1; 0 only with prompt_logprobs (score the prompt alone)
  std::optional<uint64_t> seed;   // none: chosen at random by the caller and reported
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool ignore_eos = false;
  // Log-probabilities of the model's own distribution (log-softmax of the raw logits, before
  // repetition/presence/frequency penalties, temperature, top-k and top-p; vLLM's default): with
  // `logprobs`, each generated token reports its own log-probability and the `top_logprobs` most
  // probable tokens of that step (0..kMaxTopLogprobs; needs logprobs). They never change which
  // token is sampled.
  bool logprobs = false;
  int top_logprobs = 0;
  // vLLM's prompt_logprobs, for evaluations: unset = off; k in [0, kMaxTopLogprobs]: every prompt
  // token after the first reports its log-probability given the tokens before it, its rank, and
  // the k most probable tokens at its position (Finished::prompt_logprobs). The prompt is then
  // computed in full (no prefix-cache reuse) with a logit row per prompt token.
  std::optional<int> prompt_logprobs;
  // vLLM's extensions. Token-level ones reach every rank as the step plan's per-row vocabulary
  // adjustments (VocabAdjust), applied before any reduction, so tensor parallelism sees them too.
  // logit_bias: (token id, bias in [-kMaxLogitBias, kMaxLogitBias]) added to the raw logits,
  // ascending ids, each once (OpenAI's object {"id": bias} on the wire).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Ids that end the sequence (finish "stop"); the id is reported but adds no text.
  std::vector<int32_t> stop_token_ids;
  // EOS (unless ignore_eos) and stop_token_ids are masked out until this many tokens were
  // generated; [0, max_new_tokens].
  int min_tokens = 0;
  // [0, 1], 0 = off: after temperature, tokens whose probability is below min_p times the most
  // probable token's are dropped (Sampler).
  float min_p = 0.0f;
  bool include_stop_str_in_output = false;  // a matched stop string stays in the text
  bool skip_special_tokens = true;          // false: control pieces (<s>, </s>) appear in text
  // Speculative decoding (docs/speculative.md): unset = the server's choice (on when it runs with
  // --speculative); false = opt out; true = asked for (served without it, and told so, when the
  // server has none).
  std::optional<bool> speculative;
};

// OpenAI's bound on a logit_bias value.
constexpr float kMaxLogitBias = 100.0f;

// The most alternatives a request may ask for per token (OpenAI's limit).
constexpr int kMaxTopLogprobs = 20;

// The limits on prompt + max_new_tokens, each 0 when it does not apply: the model's positions,
// the server's --max-seq-len and what the KV cache can hold for one request.
struct PromptLimits {
  int64_t max_position_embeddings = 0;
  int64_t max_seq_len = 0;
  int64_t kv_capacity_tokens = 0;
  // The smallest limit that applies (INT64_MAX when none does).
  int64_t max_tokens() const;
};

// The one prompt-length check of the project (the request owner, the socket thread's early
// refusals, the batch and generate commands all call it): "" when `prompt_tokens` (at least that
// many when `at_least`, for a text prompt not tokenized yet) + `max_new_tokens` fit every limit,
// else one message naming the smallest limit broken, e.g.
//   prompt (30 tokens) + max_new_tokens (100) = 130 exceeds max_position_embeddings (64)
//   prompt of 9000 bytes (at least 2250 tokens) + max_new_tokens (8) = 2258 exceeds --max-seq-len
//   (2048)
// `prompt_what` names the prompt ("prompt" unless a byte count says more).
std::string prompt_length_error(const PromptLimits& limits, int64_t prompt_tokens, bool at_least,
                                int64_t max_new_tokens, const std::string& prompt_what = "prompt");

// Returns "" when `p` is usable for a prompt of `prompt_tokens` tokens on a model with
// `max_position_embeddings` positions, else one message naming the parameter, the value given and
// the allowed range, e.g. "top_p must be in (0, 1] (got 1.5)". The first problem found is reported.
std::string validate_sampling(const SamplingParams& p, int prompt_tokens,
                              int max_position_embeddings);

// "" when every token id `p` names (logit_bias, stop_token_ids) is in [0, vocab_size), else a
// message naming the parameter and the range, e.g. "logit_bias key 32000 is not a token id in
// [0, 32000)". Separate from validate_sampling: the vocabulary is the model's, known later.
std::string validate_sampling_tokens(const SamplingParams& p, int64_t vocab_size);

// Overrides the fields of `defaults` whose keys are present in the JSON object `obj`: temperature,
// top_p, top_k, repetition_penalty, presence_penalty, frequency_penalty, max_new_tokens, seed, stop
// (a string or an array of strings), ignore_eos, logprobs, top_logprobs, logit_bias (an object of
// decimal token id -> number), stop_token_ids, min_tokens, min_p, include_stop_str_in_output,
// skip_special_tokens, speculative. Other keys are ignored
// (front ends pass whole request objects); a null value means "not given" (as OpenAI-style clients
// send it). Throws llama2::Error naming the key and the expected type on a wrong type, e.g. "top_k"
// must be an integer (got string). Ranges are left to validate_sampling so that every range error
// reads the same wherever the parameter came from.
SamplingParams sampling_from_json(const nlohmann::json& obj, const SamplingParams& defaults);

// The shortest decimal that reads back as the same float, so that a reported top_p of 0.8f shows
// as 0.8 rather than 0.800000011920929 (the double nearest the float); also logprobs.
nlohmann::json float_as_json(float f);

// Every field, with "seed": null when none is set; sampling_from_json reads it back unchanged.
nlohmann::json sampling_to_json(const SamplingParams& p);

}  // namespace llama2
