// Rank 0's generation loop over the paged KV cache: a small continuous-batching scheduler. Each
// call to step() plans one engine step (prefill chunks of newly admitted sequences plus one decode
// token for every running sequence), executes it on all ranks and samples.
//
// Admission policy: a request is admitted when a batch slot is free and the allocator can reserve
// blocks for its whole prompt + max_new_tokens, so a running sequence never runs out of KV blocks
// and nothing is ever preempted; requests wait in FIFO order otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "common/step_executor.h"
#include "coordinator/block_allocator.h"

namespace llama2 {

class Tokenizer;

struct GenRequest {
  int64_t id = 0;
  std::vector<int> prompt;  // token ids, BOS included when wanted
  SamplingParams params;    // already validated
  uint64_t seed = 0;        // used when params.seed is unset
  // Past this instant the request ends with finish_reason "timeout" (queued or running).
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct GenResult {
  int64_t id = 0;
  std::vector<int> prompt;
  std::vector<int> tokens;    // generated ids (EOS included when it ended the sequence)
  std::string text;           // detokenized output, stop string excluded
  std::string finish_reason;  // "stop" | "length" | "cancelled" | "timeout" | "shutting_down"
  double queue_s = 0, ttft_s = 0, total_s = 0;  // from add() to admission / first token / done
};

struct GeneratorOptions {
  int max_batch_size = 64;   // running sequences per step
  int prefill_chunk = 512;   // prompt tokens per step over all sequences (bounds step latency)
  bool full_logits = false;  // gather full logit rows, never candidates (TuningKnobs)
  // One line per engine step (open_step_log in cli_common.h, TuningKnobs::step_log); the file
  // stays the caller's. nullptr: no step log.
  std::FILE* step_log = nullptr;
};

struct GeneratorCallbacks {
  // The request left the queue and got its KV blocks.
  std::function<void(int64_t id)> on_admit;
  // A streamed piece of text (complete UTF-8, possibly empty) for the token at `index`.
  std::function<void(int64_t id, int index, int token, const std::string& piece)> on_token;
  std::function<void(const GenResult&)> on_done;
};

class Generator {
 public:
  Generator(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
            BlockAllocator& blocks, GeneratorOptions opts, GeneratorCallbacks callbacks);
  ~Generator();

  // Queues a request; Error if it could never fit in the KV cache at all.
  void add(GenRequest req);
  bool idle() const { return queue_.empty() && running_.empty(); }
  size_t running() const { return running_.size(); }
  size_t queued() const { return queue_.size(); }
  // Plans, executes and samples one step. Returns the number of tokens generated in it.
  // Requests past their deadline are finished with "timeout" first.
  int step();
  // Ends request `id` (queued or running) at once with `reason`, freeing its KV blocks;
  // false if no such request is active.
  bool cancel(int64_t id, const std::string& reason);
  // Ends every active request with `reason` (server shutdown).
  void cancel_all(const std::string& reason);
  // Finishes requests whose deadline has passed with "timeout"; returns how many.
  int expire(std::chrono::steady_clock::time_point now);

 private:
  struct Sequence;
  void admit();
  void finish(Sequence& s, const std::string& reason);

  StepExecutor& exec_;
  const Tokenizer& tok_;
  ModelConfig config_;
  BlockAllocator& blocks_;
  GeneratorOptions opts_;
  GeneratorCallbacks cb_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  std::vector<std::unique_ptr<Sequence>> running_;
  // End of the previous engine step while requests kept running (for the step log's host gap);
  // unset after a step that left the generator idle, so idle waits are not counted as host work.
  std::chrono::steady_clock::time_point last_exec_end_{};
  // No pending request's deadline is earlier: expire() skips its scan of a long queue until then.
  std::chrono::steady_clock::time_point earliest_deadline_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace llama2
