// One engine's continuous-batching scheduler: the running set, its KV blocks, the chunked-prefill
// budget and the step plans. Each call to step() plans one engine step (prefill chunks of admitted
// sequences plus one decode token for every running sequence), executes it on all ranks through
// the StepExecutor, samples, detokenizes, matches stop strings and reports TokenEvent / Finished
// messages (request_messages.h). The FIFO queue, deadlines and admission order belong to the
// request owner (request_owner.h), which offers the queue's head to try_admit() before each step.
//
// Admission policy: a request is taken when a batch slot is free and the allocator can reserve
// blocks for its whole prompt + max_new_tokens, so a running sequence never runs out of KV blocks
// and nothing is ever preempted. With prefix caching, the reservation starts with the cached
// blocks of its prompt's longest cached prefix (shared, counted as present; evictable cached
// blocks count as free), prefill starts after them, and each block a step fills is registered.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/requests/request_messages.h"
#include "coordinator/scheduler/block_allocator.h"

namespace llama2 {

class Tokenizer;

struct SchedulerOptions {
  int max_batch_size = 64;   // running sequences per step
  int prefill_chunk = 512;   // prompt tokens per step over all sequences (bounds step latency)
  bool full_logits = false;  // gather full logit rows, never candidates (TuningKnobs)
  // One line per engine step (open_step_log in cli_common.h, TuningKnobs::step_log): "decode_rows
  // prefill_seqs prefill_tokens logit_rows ms host_ms", see benchmarks/serve/step_log_summary.py.
  // The file stays the caller's. nullptr: no step log.
  std::FILE* step_log = nullptr;
  // Share the KV blocks of prompt prefixes already computed (block_allocator.h). The commands'
  // default (on) is EngineConfig::prefix_caching; a scheduler built without it does not cache.
  bool prefix_caching = false;
};

class BatchScheduler {
 public:
  BatchScheduler(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                 BlockAllocator& blocks, SchedulerOptions opts);
  ~BatchScheduler();

  // Takes `req` (moved from) when a batch slot is free and KV blocks for its prompt +
  // max_new_tokens can be reserved now; false, `req` untouched, otherwise. The owner has checked
  // that it fits an empty cache (Error if not: it would wait for ever).
  bool try_admit(SubmitRequest& req);
  // Ends running request `id` at once (on_finished with `reason`), freeing its KV blocks; false if
  // it is not running here.
  bool cancel(const CancelRequest& cancel, SchedulerEvents& events);
  // Plans, executes and samples one step; a no-op returning 0 when nothing runs. Returns the
  // number of tokens generated in it.
  int step(SchedulerEvents& events);

  bool idle() const { return running_.empty(); }
  size_t running() const { return running_.size(); }
  const BlockAllocator& blocks() const { return blocks_; }

 private:
  struct Sequence;
  void finish(Sequence& s, FinishReason reason, SchedulerEvents& events);

  StepExecutor& exec_;
  const Tokenizer& tok_;
  ModelConfig config_;
  BlockAllocator& blocks_;
  SchedulerOptions opts_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  // End of the previous engine step while requests kept running (for the step log's host gap);
  // unset after a step that left the scheduler idle, so idle waits are not counted as host work.
  std::chrono::steady_clock::time_point last_exec_end_{};
};

}  // namespace llama2
