#include "coordinator/generator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"
#include "coordinator/sampler.h"
#include "coordinator/stop_matcher.h"
#include "coordinator/tokenizer.h"

namespace llama2 {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Generator::Sequence {
  GenRequest req;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stop;
  std::vector<int> table;    // KV block ids
  std::vector<int> context;  // prompt + generated, for the repetition penalty
  int cached = 0;            // tokens already in the KV cache
  GenResult result;
  Clock::time_point added;
  bool done = false;

  Sequence(GenRequest r, const Tokenizer& tok)
      : req(std::move(r)),
        sampler(req.params, req.params.seed.value_or(req.seed)),
        detok(tok),
        stop(req.params.stop),
        context(req.prompt),
        added(Clock::now()) {
    result.id = req.id;
    result.prompt = req.prompt;
  }
  int prompt_len() const { return static_cast<int>(req.prompt.size()); }
  bool prefilling() const { return cached < prompt_len(); }
  int reserve_positions() const { return prompt_len() + req.params.max_new_tokens; }
};

Generator::Generator(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                     BlockAllocator& blocks, GeneratorOptions opts, GeneratorCallbacks callbacks)
    : exec_(exec),
      tok_(tok),
      config_(config),
      blocks_(blocks),
      opts_(opts),
      cb_(std::move(callbacks)) {
  LLAMA2_CHECK(opts_.max_batch_size > 0 && opts_.prefill_chunk > 0);
}

Generator::~Generator() = default;

void Generator::add(GenRequest req) {
  auto seq = std::make_unique<Sequence>(std::move(req), tok_);
  const int need = BlockAllocator::blocks_for(seq->reserve_positions(), blocks_.block_size());
  if (need > blocks_.num_blocks()) {
    throw Error("request " + std::to_string(seq->req.id) + " needs " + std::to_string(need) +
                " KV blocks for prompt + max_new_tokens but the cache has only " +
                std::to_string(blocks_.num_blocks()));
  }
  earliest_deadline_ = std::min(earliest_deadline_, seq->req.deadline);
  queue_.push_back(std::move(seq));
}

void Generator::admit() {
  while (!queue_.empty() && static_cast<int>(running_.size()) < opts_.max_batch_size) {
    Sequence& s = *queue_.front();
    if (!blocks_.ensure(&s.table, s.reserve_positions())) break;  // FIFO: no overtaking
    s.result.queue_s = seconds_since(s.added);
    running_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    if (cb_.on_admit) cb_.on_admit(s.req.id);
  }
}

void Generator::finish(Sequence& s, const std::string& reason) {
  s.result.finish_reason = reason;
  s.result.total_s = seconds_since(s.added);
  s.done = true;
  blocks_.release(&s.table);
  if (cb_.on_done) cb_.on_done(s.result);
}

bool Generator::cancel(int64_t id, const std::string& reason) {
  auto match = [id](const std::unique_ptr<Sequence>& s) { return s->req.id == id; };
  if (auto it = std::find_if(queue_.begin(), queue_.end(), match); it != queue_.end()) {
    std::unique_ptr<Sequence> s = std::move(*it);
    queue_.erase(it);
    s->result.queue_s = seconds_since(s->added);
    finish(*s, reason);
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    std::unique_ptr<Sequence> s = std::move(*it);
    running_.erase(it);
    finish(*s, reason);
    return true;
  }
  return false;
}

void Generator::cancel_all(const std::string& reason) {
  std::vector<int64_t> ids;
  for (const auto& s : queue_) ids.push_back(s->req.id);
  for (const auto& s : running_) ids.push_back(s->req.id);
  for (int64_t id : ids) cancel(id, reason);
}

int Generator::expire(Clock::time_point now) {
  if (now < earliest_deadline_) return 0;
  std::vector<int64_t> ids;
  for (const auto& s : queue_)
    if (s->req.deadline <= now) ids.push_back(s->req.id);
  for (const auto& s : running_)
    if (s->req.deadline <= now) ids.push_back(s->req.id);
  for (int64_t id : ids) cancel(id, "timeout");
  earliest_deadline_ = Clock::time_point::max();
  for (const auto& s : queue_) earliest_deadline_ = std::min(earliest_deadline_, s->req.deadline);
  for (const auto& s : running_) earliest_deadline_ = std::min(earliest_deadline_, s->req.deadline);
  return static_cast<int>(ids.size());
}

int Generator::step() {
  expire(Clock::now());
  admit();
  if (running_.empty()) return 0;

  // Decoding sequences first (one token each) so they keep streaming; the prefill budget is then
  // shared by prompts in admission order.
  StepPlan plan;
  std::vector<Sequence*> order;
  auto add_seq = [&](Sequence& s, int n_tokens, const int* tokens) {
    append_seq(&plan, static_cast<int32_t>(s.req.id), s.cached, tokens, n_tokens,
               s.cached + n_tokens >= s.prompt_len(), s.table.data(),
               BlockAllocator::blocks_for(s.cached + n_tokens, blocks_.block_size()));
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
  // LLAMA2_FULL_LOGITS=1 forces full rows (for comparing the two paths).
  int most = 0;
  bool full = opts_.full_logits;
  for (size_t i = 0; i < plan.seqs.size() && !full; ++i) {
    if (!plan.seqs[i].want_logits) continue;
    const int need = Sampler::candidates_needed(order[i]->req.params);
    full = need == 0;
    most = std::max(most, need);
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
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Sequence& s = *order[i];
    s.cached += plan.seqs[i].n_tokens;
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
    ++row;
    ++generated;
    if (s.result.tokens.empty()) s.result.ttft_s = seconds_since(s.added);
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
    if (cb_.on_token) cb_.on_token(s.req.id, index, token, m.emit);
    if (eos || m.stopped) {
      finish(s, "stop");
    } else if (last) {
      finish(s, "length");
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Sequence>& s) { return s->done; }),
                 running_.end());
  last_exec_end_ = running_.empty() && queue_.empty() ? Clock::time_point{} : t_exec_end;
  return generated;
}

}  // namespace llama2
