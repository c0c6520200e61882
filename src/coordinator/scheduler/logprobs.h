// The log-probabilities a request with `logprobs` reports for each sampled token, assembled on
// rank 0 from what the step gathered (StepLogits): the model's own distribution, log-softmax of the
// raw logits (before penalties, temperature and truncation; SamplingParams::logprobs).
#pragma once

#include <vector>

#include "common/step_executor.h"
#include "coordinator/requests/request_messages.h"

namespace llama2 {

// Row `row` of `logits` (whose lse[row] is set: the row had want_logprobs) for the sampled id
// `token`: *logprob = log p(token) and *top = the `top_n` most probable tokens, most probable
// first, equal logits by lower id.
//
// Why the sampled token's raw logit is always at hand without any further gather:
//   - full rows (penalties, plain temperature or top-p sampling): rank 0 holds every logit;
//   - candidate rows (greedy, top-k sampling): the sampler chooses among the candidates
//     (Sampler::sample_candidates returns one of their ids), and candidate values are raw logits:
//     penalties force full rows and the temperature is applied on rank 0. The step asks for at
//     least top_n candidates (BatchScheduler), so the alternatives are candidates too.
// The log-sum-exp (lse) comes from the ranks' slice summaries or the full rows (logits_gather.h).
// Error when `token` is not in a candidate row (an invariant of the sampler) or top_n > width.
void row_logprobs(const StepLogits& logits, int row, int token, int top_n, float* logprob,
                  std::vector<TopLogprob>* top);

// A prompt token's score from full row `row` (its lse set): log p(target), the target's rank (1 +
// the tokens ranked before it: larger logit, or an equal one with a lower id) and the top_n most
// probable tokens. Prompt rows are always full (BatchScheduler asks full rows for a step that
// scores a prompt): the target is any token, not one of a few candidates.
void prompt_row_logprob(const StepLogits& logits, int row, int target, int top_n,
                        PromptLogprob* out);

}  // namespace llama2
