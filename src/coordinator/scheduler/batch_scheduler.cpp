#include "coordinator/scheduler/batch_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "common/check.h"
#include "coordinator/scheduler/logprobs.h"
#include "coordinator/scheduler/sampler.h"
#include "coordinator/text/stop_matcher.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

using Clock = std::chrono::steady_clock;

struct BatchScheduler::Sequence {
  SubmitRequest req;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stop;
  std::vector<int> table;    // KV block ids; the first ones may be shared (prefix cache hits)
  std::vector<int> context;  // prompt + generated: the repetition penalty, the prefix hashes
  int cached = 0;            // tokens already in the KV cache (found there, or computed)
  PrefixChain chain;         // full blocks of `context` hashed so far
  Finished result;
  bool done = false;

  Sequence(SubmitRequest&& r, const Tokenizer& tok, std::vector<int>&& blocks, int hit_tokens,
           PrefixChain hit_chain)
      : req(std::move(r)),
        sampler(req.params, req.params.seed.value_or(req.seed)),
        detok(tok),
        stop(req.params.stop),
        table(std::move(blocks)),
        context(req.prompt),
        cached(hit_tokens),
        chain(hit_chain) {
    result.id = req.id;
    result.prompt_tokens = prompt_len();
  }
  int prompt_len() const { return static_cast<int>(req.prompt.size()); }
  bool prefilling() const { return cached < prompt_len(); }
};

BatchScheduler::BatchScheduler(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                               BlockAllocator& blocks, SchedulerOptions opts)
    : exec_(exec), tok_(tok), config_(config), blocks_(blocks), opts_(opts) {
  LLAMA2_CHECK(opts_.max_batch_size > 0 && opts_.prefill_chunk > 0);
  running_.reserve(static_cast<size_t>(opts_.max_batch_size));
}

BatchScheduler::~BatchScheduler() = default;

bool BatchScheduler::try_admit(SubmitRequest& req) {
  if (static_cast<int>(running_.size()) >= opts_.max_batch_size) return false;
  const int positions = static_cast<int>(req.prompt.size()) + req.params.max_new_tokens;
  // The owner's prompt-length check makes both impossible; a request failing them would never run.
  LLAMA2_CHECK(!req.prompt.empty());
  LLAMA2_CHECK(BlockAllocator::blocks_for(positions, blocks_.block_size()) <= blocks_.num_blocks());
  // Cached prefix blocks count as present and evictable ones as free: the reservation is still
  // the whole prompt + max_new_tokens, so nothing is ever preempted.
  std::vector<int> table;
  PrefixChain chain;
  const std::optional<int> hit =
      blocks_.allocate(req.prompt, positions, opts_.prefix_caching, &table, &chain);
  if (!hit) return false;
  running_.push_back(
      std::make_unique<Sequence>(std::move(req), tok_, std::move(table), *hit, chain));
  return true;
}

void BatchScheduler::finish(Sequence& s, FinishReason reason, SchedulerEvents& events) {
  s.result.finish_reason = reason;
  s.done = true;
  blocks_.release(&s.table);
  events.on_finished(std::move(s.result));
}

bool BatchScheduler::cancel(const CancelRequest& cancel, SchedulerEvents& events) {
  const int64_t id = cancel.id;
  auto it = std::find_if(running_.begin(), running_.end(),
                         [id](const std::unique_ptr<Sequence>& s) { return s->req.id == id; });
  if (it == running_.end()) return false;
  std::unique_ptr<Sequence> s = std::move(*it);
  running_.erase(it);
  finish(*s, cancel.reason, events);
  return true;
}

int BatchScheduler::step(SchedulerEvents& events) {
  if (running_.empty()) return 0;

  // Decoding sequences first (one token each) so they keep streaming; the prefill budget is then
  // shared by prompts in admission order.
  StepPlan plan;
  std::vector<Sequence*> order;
  auto add_seq = [&](Sequence& s, int n_tokens, const int* tokens) {
    append_seq(&plan, static_cast<int32_t>(s.req.id), s.cached, tokens, n_tokens,
               s.cached + n_tokens >= s.prompt_len(), s.table.data(),
               BlockAllocator::blocks_for(s.cached + n_tokens, blocks_.block_size()),
               s.req.params.logprobs);
    order.push_back(&s);
  };
  for (auto& s : running_) {
    if (!s->prefilling()) add_seq(*s, 1, &s->context.back());
  }
  int budget = opts_.prefill_chunk;
  for (auto& s : running_) {
    if (!s->prefilling() || budget == 0) continue;
    const int n = std::min(budget, s->prompt_len() - s->cached);
    add_seq(*s, n, s->req.prompt.data() + s->cached);
    budget -= n;
  }

  // Greedy and top-k rows only need each row's best few logits: the ranks then send k (value,
  // id) pairs per row instead of the whole vocabulary (one step asks all rows the same way).
  // LLAMA2_FULL_LOGITS=1 forces full rows (for comparing the two paths). A row with
  // top_logprobs needs that many candidates too (its alternatives; logprobs.h).
  int most = 0;
  bool full = opts_.full_logits;
  for (size_t i = 0; i < plan.seqs.size() && !full; ++i) {
    if (!plan.seqs[i].want_logits) continue;
    const SamplingParams& params = order[i]->req.params;
    const int need = Sampler::candidates_needed(params);
    full = need == 0;
    most = std::max({most, need, params.logprobs ? params.top_logprobs : 0});
  }
  plan.candidates = full ? 0 : most;
  StepLogits logits;
  const auto t_exec = Clock::now();
  exec_.execute(plan, &logits);
  const auto t_exec_end = Clock::now();
  if (FILE* log = opts_.step_log) {
    int decode_rows = 0, prefill_seqs = 0, prefill_tokens = 0;
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      if (order[i]->prefilling()) {
        ++prefill_seqs;
        prefill_tokens += plan.seqs[i].n_tokens;
      } else {
        ++decode_rows;
      }
    }
    const double host_ms =
        last_exec_end_ == Clock::time_point{}
            ? 0.0
            : std::chrono::duration<double, std::milli>(t_exec - last_exec_end_).count();
    std::fprintf(log, "%d %d %d %d %.4f %.4f\n", decode_rows, prefill_seqs, prefill_tokens,
                 plan.logit_rows(),
                 std::chrono::duration<double, std::milli>(t_exec_end - t_exec).count(), host_ms);
    std::fflush(log);
  }

  int generated = 0, row = 0;
  std::vector<float> row_logits;
  TokenEvent token_event;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& s = *order[i];
    s.cached += plan.seqs[i].n_tokens;
    // Blocks this step filled are computed now: later prompts with the same prefix may share them.
    if (opts_.prefix_caching) blocks_.cache_full_blocks(s.context, s.cached, s.table, &s.chain);
    if (!plan.seqs[i].want_logits) continue;
    const size_t W = static_cast<size_t>(logits.width);
    int token = 0;
    if (logits.full()) {
      row_logits.assign(logits.values.begin() + row * W, logits.values.begin() + (row + 1) * W);
      token = s.sampler.sample(row_logits, s.context);
    } else {
      token = s.sampler.sample_candidates(logits.values.data() + row * W,
                                          logits.ids.data() + row * W, logits.width);
    }
    token_event.top_logprobs.clear();
    token_event.logprob = 0;
    if (s.req.params.logprobs) {
      row_logprobs(logits, row, token, s.req.params.top_logprobs, &token_event.logprob,
                   &token_event.top_logprobs);
      s.result.logprobs.push_back(token_event.logprob);
      s.result.top_logprobs.push_back(token_event.top_logprobs);
    }
    ++row;
    ++generated;
    s.result.tokens.push_back(token);
    s.context.push_back(token);
    const int index = static_cast<int>(s.result.tokens.size()) - 1;
    const bool eos = token == config_.eos_token_id && !s.req.params.ignore_eos;
    // A model vocabulary larger than its tokenizer's (synthetic weights with a test tokenizer)
    // can produce ids with no piece: they read as <unk>, the ids themselves are still reported.
    std::string piece =
        eos ? std::string() : s.detok.push(token < tok_.vocab_size() ? token : tok_.unk_id());
    const bool last = eos || index + 1 >= s.req.params.max_new_tokens;
    if (last)
      piece += s.detok.finish();  // bytes of an unfinished character, as decode() shows them
    StopMatcher::Result m = s.stop.push(piece);
    if (last && !m.stopped) m.emit += s.stop.finish();
    s.result.text += m.emit;
    token_event.id = s.req.id;
    token_event.index = index;
    token_event.token = token;
    token_event.text = std::move(m.emit);
    events.on_token(token_event);
    if (eos || m.stopped) {
      finish(s, FinishReason::kStop, events);
    } else if (last) {
      finish(s, FinishReason::kLength, events);
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Sequence>& s) { return s->done; }),
                 running_.end());
  last_exec_end_ = running_.empty() ? Clock::time_point{} : t_exec_end;
  return generated;
}

}  // namespace llama2
