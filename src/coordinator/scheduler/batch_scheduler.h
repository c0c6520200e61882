// One engine's continuous-batching scheduler: the running set, its KV blocks, the chunked-prefill
// budget, and the two halves of an engine step around the engine itself (vLLM v1's schedule() /
// update_from_output(), nano-vllm's three-call step):
//   schedule() -> a ScheduledStep: the StepPlan every rank runs (prefill chunks of admitted
//                 sequences plus one decode token for every running sequence) and the sequence of
//                 each of its rows;
//   (the caller runs the plan on the ranks: StepRunner, step_runner.h, through StepExecutor)
//   apply()    -> samples each logit row, detokenizes, matches stop strings and reports
//                 TokenEvent / Finished messages (request_messages.h).
// The scheduler never calls the engine: planning and applying are testable without one. The FIFO
// queue, deadlines and admission order belong to the request owner (request_owner.h), which
// offers the queue's head to try_admit() before each step.
//
// KV blocks on demand (vLLM's policy): a request is taken when a batch slot is free, no preempted
// sequence waits (they go first), and blocks for its prompt are free beside those the running
// sequences need for this step; a sequence gets one more block each time it crosses a block
// boundary. When a decoding sequence needs a block and none is free, the newest running sequence
// is preempted: its blocks are freed and it waits, with its tokens, sampler, detokenizer and stop
// state intact, until blocks for all its tokens are free again; then it is prefilled again from
// prompt + generated tokens (its last chunk's logits give its next token, exactly where it
// stopped: no token is lost or repeated) and decodes on. Preempted sequences resume oldest first.
// With prefix caching, a reservation (admission or resumption) starts with the cached blocks of
// the longest cached prefix of its tokens (shared, counted as present; evictable cached blocks
// count as free), prefill starts after them, and each block a step fills is registered, generated
// tokens' blocks too, so a resumed sequence finds its own blocks if nobody took them meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model_config.h"
#include "common/speculative_config.h"
#include "common/step_executor.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/scheduler/block_allocator.h"

namespace llama2 {

class Tokenizer;

struct SchedulerOptions {
  int max_batch_size = 64;   // running sequences per step
  int prefill_chunk = 512;   // prompt tokens per step over all sequences (bounds step latency)
  bool full_logits = false;  // gather full logit rows, never candidates (TuningKnobs)
  // Share the KV blocks of prompt prefixes already computed (block_allocator.h). The commands'
  // default (on) is EngineConfig::prefix_caching; a scheduler built without it does not cache.
  bool prefix_caching = false;
  // Speculative decoding (docs/speculative.md): n-gram proposals verified in the step; off by
  // default. The engine must hold max_batch_size + speculative.extra_rows(max_batch_size) logit
  // rows (EngineConfig::max_logit_rows).
  SpeculativeConfig speculative{};
};

// What schedule() decided for one engine step.
struct ScheduledStep {
  StepPlan plan;
  // [plan.seqs.size()] the request id of each of the plan's sequences, and its place in the
  // running set when it was planned (apply() checks both).
  std::vector<int64_t> ids;
  std::vector<int> slots;
  // The step's shape, for observers (the step log): sequences decoding one token, sequences
  // prefilling and their prompt tokens.
  int decode_rows = 0, prefill_seqs = 0, prefill_tokens = 0;

  bool empty() const { return plan.seqs.empty(); }
};

class BatchScheduler {
 public:
  BatchScheduler(const Tokenizer& tok, const ModelConfig& config, BlockAllocator& blocks,
                 SchedulerOptions opts);
  ~BatchScheduler();

  // Takes `req` (moved from) when a batch slot is free, no preempted sequence waits and KV blocks
  // for its prompt are free beside this step's growth; false, `req` untouched, otherwise. The
  // owner has checked that prompt + max_new_tokens fits an empty cache (Error if not: it would
  // wait for ever).
  bool try_admit(SubmitRequest& req);
  // Ends running request `id` at once (on_finished with `reason`), freeing its KV blocks; false if
  // it is not running here. Not between schedule() and its apply().
  bool cancel(const CancelRequest& cancel, SchedulerEvents& events);

  // Plans the next engine step: resumes preempted sequences whose blocks are free, gives each
  // decoding sequence the block its next position needs (preempting the newest when none is
  // free), then plans decoding sequences first (one token each, so they keep streaming) and
  // prompt chunks in admission order within the prefill budget, and whether the logit rows come
  // back as candidates or full rows. Empty when nothing runs. Calling it again before apply()
  // plans the same step.
  ScheduledStep schedule();
  // After the engine ran `step` (the last schedule()): `logits` holds its logit rows in plan
  // order. Advances every planned sequence, samples, emits events and ends finished sequences
  // (freeing their blocks). Returns the number of tokens generated.
  int apply(const ScheduledStep& step, const StepLogits& logits, SchedulerEvents& events);

  bool idle() const { return running_.empty() && preempted_.empty(); }
  // Admitted sequences, running or preempted (each holds a batch slot).
  size_t running() const { return running_.size() + preempted_.size(); }
  size_t preempted() const { return preempted_.size(); }
  // Preemptions since start (llama2_preemptions_total).
  int64_t preemptions() const { return preemptions_; }
  const SpecCounters& spec_counters() const { return spec_; }
  const BlockAllocator& blocks() const { return blocks_; }

 private:
  struct Sequence;
  // Blocks this step's decoding sequences need beyond their tables (admission and resumption
  // leave them free).
  int growth_need() const;
  void resume_preempted();
  void grow_decoding();
  void preempt_newest();
  // Fills each decoding sequence's proposal for this step (empty: a plain decode row) and the
  // blocks it needs, when this step speculates.
  void propose();
  // The tokens `s` may still propose: K, less what max_new_tokens leaves room for (a verify step
  // emits up to K + 1 tokens).
  int proposal_room(const Sequence& s) const;
  // Whether `s` (just admitted) speculates, and what its Finished reports about it.
  SpecUse speculative_use(const Sequence& s) const;
  void add_to_plan(ScheduledStep& step, int slot, int n_tokens) const;
  // Each adjusted row's VocabAdjust: one per row, combining the constraint's allowed tokens (from
  // its sequence's matcher), min_tokens' masked stop ids and logit_bias.
  void add_row_adjustments(ScheduledStep& step);
  // Fills mask_ for `s`'s next row; false when the row needs no adjustment.
  // `ahead`: the row's place after the next token (a verify step's later rows: min_tokens counts
  // the tokens accepted before them).
  bool fill_row_adjust(Sequence& s, int ahead = 0);
  int logit_candidates(const ScheduledStep& step) const;
  int sample_row(Sequence& s, const StepLogits& logits, int row);
  // sample_row for a verify row: the token it gives and whether it is `proposal`.
  int verify_row(Sequence& s, const StepLogits& logits, int row, int proposal, bool* accepted);
  // A verify step's rows from `row` (the sequence's 1 + K): accepted proposals and the token after
  // them are emitted in order, until a rejection or the sequence's end; the KV of the rejected
  // tokens is dropped (cached reset, blocks past it freed; only accepted tokens' blocks register).
  int apply_verified(Sequence& s, const StepLogits& logits, int row, SchedulerEvents& events);
  // prompt_logprobs: records the unscored prompt rows among the `n` rows from `row` that end at
  // s.cached (already advanced past the step's chunk).
  void score_prompt_rows(Sequence& s, const StepLogits& logits, int row, int n);
  // The sampled `token` of `s` as a TokenEvent (logprobs, text cut at a stop string); ends `s`
  // when it stops.
  void emit(Sequence& s, int token, const StepLogits& logits, int row, SchedulerEvents& events);
  void finish(Sequence& s, FinishReason reason, SchedulerEvents& events);

  const Tokenizer& tok_;
  ModelConfig config_;
  BlockAllocator& blocks_;
  SchedulerOptions opts_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  // Preempted sequences, oldest first: all of them newer than every running one (admission waits
  // while any is preempted, and the newest is always the one preempted).
  std::vector<std::unique_ptr<Sequence>> preempted_;
  int64_t preemptions_ = 0;
  SpecCounters spec_;
  // Admitted sequences (running or preempted) with a constraint, a logit_bias or a min_tokens:
  // 0 skips the adjustment pass.
  int adjusted_ = 0;
  VocabAdjust mask_;  // scratch of add_row_adjustments: allowed [ceil(vocab / 32)] words, biases
  std::vector<float> row_logits_;  // [vocab] scratch of sample_row
};

}  // namespace llama2
