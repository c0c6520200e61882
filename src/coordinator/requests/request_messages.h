// The messages between the two halves of serving (docs/ARCHITECTURE.md):
//   - the request owner on rank 0 (request_owner.h, admission.h): admission, the one FIFO queue,
//     deadlines, cancellation, disconnects, counters and the one prompt-length check;
//   - a batch scheduler per engine (batch_scheduler.h): running set, KV blocks, chunked-prefill
//     budget, step plans, driving the StepExecutor.
// They are plain values (ids, token ids, numbers, strings; no pointers, no callbacks, no clock
// readings), so that the data-parallel issue can carry them over MPI between world rank 0 and
// each replica's first rank. Owner -> scheduler: SubmitRequest, CancelRequest. Scheduler -> owner:
// TokenEvent, Finished (through SchedulerEvents); admission is BatchScheduler::try_admit's answer.
//
// Where text is made: detokenizing (StreamingDetokenizer) and stop-string matching (StopMatcher)
// run in the batch scheduler today, beside the sampler that needs the stop decision to end a
// sequence at once and free its blocks; so TokenEvent carries the text already cut at a stop
// string. Whether they stay per replica (they scale with replicas) or move to rank 0 is for the
// data-parallel issue to decide and measure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/sampling_params.h"
#include "coordinator/requests/codes.h"

namespace llama2 {

struct RequestConstraint;  // request_constraint.h

// Owner -> scheduler: run this request. Deadlines stay with the owner (one clock, rank 0's): it
// ends a late request with CancelRequest{id, FinishReason::kTimeout}.
struct SubmitRequest {
  int64_t id = 0;
  std::vector<int> prompt;  // token ids, BOS included when wanted; never empty (owner-checked)
  SamplingParams params;    // already validated
  uint64_t seed = 0;        // used when params.seed is unset
  // Constrained decoding (request_constraint.h): null for an unconstrained request, which pays
  // nothing more than this null check. Its spec travels to remote replicas; its compiled grammar
  // is set by the front (or by a remote replica's leader) before the scheduler sees it.
  std::shared_ptr<const RequestConstraint> constraint{};
};

// Owner -> scheduler: end a running request now with finish_reason `reason` (kCancelled,
// kTimeout, kShuttingDown), freeing its KV blocks.
struct CancelRequest {
  int64_t id = 0;
  FinishReason reason = FinishReason::kCancelled;
};

// One alternative of a step: a token id and its log-probability under the model's distribution.
struct TopLogprob {
  int token = 0;
  float logprob = 0;
};

// A prompt token's score (SamplingParams::prompt_logprobs): its log-probability given the tokens
// before it, its rank in that distribution (1 = most probable; equal logits by lower id) and the
// k most probable tokens there, most probable first.
struct PromptLogprob {
  int token = 0;
  float logprob = 0;
  int rank = 0;
  std::vector<TopLogprob> top{};
};

// Scheduler -> owner: the token at `index` of request `id` was sampled; `text` is the piece of
// output it completes (complete UTF-8, possibly empty; stop string excluded).
// Only when the request asked (SamplingParams::logprobs; otherwise 0 and empty): `logprob`, the
// sampled token's log-probability, and `top_logprobs`, the request's top_logprobs most probable
// tokens of the step, most probable first (equal values by lower id). Both are of the raw logits'
// log-softmax (before penalties, temperature, top-k and top-p: sampling_params.h).
struct TokenEvent {
  int64_t id = 0;
  int index = 0;
  int token = 0;
  std::string text;
  float logprob = 0;
  // {}: aggregate initializations that stop at `text` stay warning-free (-Wextra).
  std::vector<TopLogprob> top_logprobs{};
};

// Scheduler -> owner (and owner -> endpoint): request `id` ended. The owner sends the same message
// for a request that ended before it reached a scheduler (cancelled or timed out in the queue).
struct Finished {
  int64_t id = 0;
  FinishReason finish_reason = FinishReason::kStop;
  uint64_t seed = 0;  // the seed its sampler used (params.seed, else SubmitRequest::seed)
  int prompt_tokens = 0;
  // Of the prompt, the tokens whose KV blocks the prefix cache held when the request was admitted
  // (not computed for it; usage.prompt_tokens_details.cached_tokens over HTTP). A resumption after
  // a preemption does not change it.
  int cached_tokens = 0;
  std::vector<int> tokens;  // generated ids (EOS included when it ended the sequence)
  std::string text;         // detokenized output, stop string excluded
  // Only when the request asked for logprobs (else empty): [tokens.size()] each token's
  // TokenEvent::logprob and TokenEvent::top_logprobs.
  std::vector<float> logprobs{};
  std::vector<std::vector<TopLogprob>> top_logprobs{};
  // Only with prompt_logprobs (else empty): [prompt_tokens - 1], prompt tokens 1.. in order (the
  // first has nothing before it). Empty too when the request ended before its prompt was scored.
  std::vector<PromptLogprob> prompt_logprobs{};
  // Speculative decoding for this request (docs/speculative.md): what it did, and with kOn the
  // tokens proposed and accepted in its verify steps.
  SpecUse speculative = SpecUse::kNone;
  int spec_proposed = 0, spec_accepted = 0, spec_verify_steps = 0;
};

// Measured by the owner from its own clock: from submit() to admission / first token / the end.
struct Timings {
  double queue_s = 0, ttft_s = 0, total_s = 0;
};

// Where a scheduler's events go (the owner; later, an MPI sender on the replica's first rank).
class SchedulerEvents {
 public:
  virtual ~SchedulerEvents() = default;
  virtual void on_token(const TokenEvent& ev) = 0;
  virtual void on_finished(Finished&& done) = 0;
};

// Where the owner's events go: an endpoint (the socket glue, the batch writer, generate's stdout)
// that translates them into its own frames or lines.
class RequestEvents {
 public:
  virtual ~RequestEvents() = default;
  // The request left the queue: the scheduler took it and reserved its KV blocks.
  virtual void on_admitted(int64_t id) { (void)id; }
  virtual void on_token(const TokenEvent& ev) { (void)ev; }
  virtual void on_finished(const Finished& done, const Timings& timings) = 0;
};

}  // namespace llama2
