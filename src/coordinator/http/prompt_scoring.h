// Scoring for evaluations over HTTP (docs/serving.md, "Scoring for evaluations"): what a finished
// generation with a scored prompt answers. lm-evaluation-harness's local-completions sends
// token-id prompts with echo, logprobs 1 and max_tokens 1 (or 0), and reads the prompt tokens'
// logprobs from the echoed ones; vLLM clients ask prompt_logprobs instead.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "coordinator/http/openai_api.h"

namespace llama2 {

// Completions' echoed logprobs in OpenAI's legacy shape: the prompt's tokens first ("tokens",
// "token_logprobs" null for the first token, which has nothing before it, "top_logprobs" null
// there too, "text_offset" into the echoed text), then `generated`'s (api_logprobs of the
// completion, or null when the completion has none: max_tokens 0).
nlohmann::json api_echo_logprobs(const std::vector<int>& prompt,
                                 const std::vector<PromptLogprob>& scored, int top_n,
                                 const nlohmann::json& generated, const Tokenizer& tokenizer);

// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], per
// prompt token its own entry and the top_n most probable tokens (keys are token ids as strings).
nlohmann::json api_prompt_logprobs(const std::vector<PromptLogprob>& scored, int top_n,
                                   const Tokenizer& tokenizer);

// Completes `r` (built from `f` as without scoring) for `sc`: the echoed text before r->text,
// the echoed logprobs, vLLM's prompt_logprobs.
void apply_scoring(const ApiScoring& sc, const Finished& f, const Tokenizer& tokenizer,
                   ApiResult* r);

}  // namespace llama2
