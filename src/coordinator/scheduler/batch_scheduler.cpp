#include "coordinator/scheduler/batch_scheduler.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "common/check.h"
#include "common/rope_frequencies.h"
#include "coordinator/constrain/matcher.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/scheduler/logprobs.h"
#include "coordinator/scheduler/ngram_proposer.h"
#include "coordinator/scheduler/sampler.h"
#include "coordinator/text/stop_matcher.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

struct BatchScheduler::Sequence {
  SubmitRequest req;
  Sampler sampler;
  StreamingDetokenizer detok;
  StopMatcher stop;
  std::vector<int> table;    // KV block ids; the first ones may be shared (prefix cache hits)
  std::vector<int> context;  // prompt + generated: the repetition penalty, the prefix hashes
  int cached = 0;            // tokens already in the KV cache (found there, or computed)
  PrefixChain chain;         // full blocks of `context` hashed so far
  // The constraint's parse of the tokens generated so far (null: unconstrained). It advances
  // only in emit(), once per sampled token, so a preempted sequence recomputed from `context`
  // resumes with it exactly as it was: nothing is accepted twice.
  std::unique_ptr<constrain::GrammarMatcher> matcher;
  Finished result;
  bool done = false;
  // Speculation: whether this request's decode steps may verify proposals (the server speculates,
  // the request did not opt out, no constraint: docs/speculative.md), and this step's proposed
  // tokens (empty: a plain decode row).
  bool speculates = false;
  std::vector<int> proposal;
  // prompt_logprobs: prompt rows scored so far. Row p (the logits after token p) scores prompt
  // token p + 1 into result.prompt_logprobs[p]; rows are scored in order, each once, also when a
  // preemption makes the prompt run again.
  int prompt_scored = 0;

  Sequence(SubmitRequest&& r, const Tokenizer& tok, std::vector<int>&& blocks, int hit_tokens,
           PrefixChain hit_chain)
      : req(std::move(r)),
        sampler(req.params, req.params.seed.value_or(req.seed)),
        detok(tok, !req.params.skip_special_tokens),
        stop(req.params.stop, req.params.include_stop_str_in_output),
        table(std::move(blocks)),
        context(req.prompt),
        cached(hit_tokens),
        chain(hit_chain) {
    result.id = req.id;
    result.seed = req.params.seed.value_or(req.seed);
    result.prompt_tokens = prompt_len();
    result.cached_tokens = std::min(hit_tokens, prompt_len());
    if (req.constraint != nullptr) {
      LLAMA2_CHECK(req.constraint->grammar != nullptr);  // compiled at admission
      matcher = std::make_unique<constrain::GrammarMatcher>(req.constraint->grammar);
    }
  }
  int prompt_len() const { return static_cast<int>(req.prompt.size()); }
  int generated() const { return static_cast<int>(result.tokens.size()); }
  // Whether some row of this sequence may need a VocabAdjust (fixed at admission).
  bool adjusted() const {
    return matcher != nullptr || !req.params.logit_bias.empty() || req.params.min_tokens > 0;
  }
  // Tokens known: the prompt and every token sampled so far. The KV cache holds the first
  // `cached`; the next step feeds context[cached, ...).
  int known() const { return static_cast<int>(context.size()); }
  // One token to feed (the one sampled last) after a computed prompt: a decode row. Otherwise a
  // prefill, of the prompt or, after a preemption, of prompt + generated tokens again.
  bool decoding() const { return cached >= prompt_len() && cached == known() - 1; }
  // The first prompt row still to score (prompt_logprobs); INT_MAX when none is left.
  int unscored_row() const {
    const bool left = req.params.prompt_logprobs && prompt_scored < prompt_len() - 1;
    return left ? prompt_scored : std::numeric_limits<int>::max();
  }
  // Whether the prefix cache may stand in for computed prompt rows: not while some are unscored.
  bool may_reuse_prefix() const { return unscored_row() == std::numeric_limits<int>::max(); }
  // The logit rows a chunk of n tokens from `cached` needs: the last `n_logits` of the chunk.
  // The unscored prompt rows in it, up to the chunk's end; else the next token's row when the
  // chunk reaches the last known token. (Unscored rows exist only before the first sampled
  // token, so they and that row are contiguous.)
  int logit_rows(int n) const {
    const int end = cached + n, from = std::max(cached, unscored_row());
    if (from < std::min(end, prompt_len() - 1)) return end - from;
    return end == known() ? 1 : 0;
  }
};

BatchScheduler::BatchScheduler(const Tokenizer& tok, const ModelConfig& config,
                               BlockAllocator& blocks, SchedulerOptions opts)
    : tok_(tok), config_(config), blocks_(blocks), opts_(opts) {
  LLAMA2_CHECK(opts_.max_batch_size > 0 && opts_.prefill_chunk > 0);
  // Dynamic NTK RoPE: no block serves another sequence (common/rope_frequencies.h); the commands
  // turn the option off and say so at start-up (start_session).
  opts_.prefix_caching = opts_.prefix_caching && rope_allows_prefix_caching(config);
  running_.reserve(static_cast<size_t>(opts_.max_batch_size));
}

BatchScheduler::~BatchScheduler() = default;

bool BatchScheduler::try_admit(SubmitRequest& req) {
  if (static_cast<int>(running()) >= opts_.max_batch_size || !preempted_.empty()) return false;
  const int prompt = static_cast<int>(req.prompt.size());
  // The owner's prompt-length check makes both impossible; a request failing them would never run.
  LLAMA2_CHECK(prompt > 0);
  LLAMA2_CHECK(BlockAllocator::blocks_for(prompt + req.params.max_new_tokens,
                                          blocks_.block_size()) <= blocks_.num_blocks());
  // The prompt's blocks only (cached prefix blocks count as present, evictable ones as free),
  // leaving what this step's decoding sequences need: a new sequence does not preempt at once.
  std::vector<int> table;
  PrefixChain chain;
  // A prompt to score is computed in full: cached blocks would skip the rows it needs.
  const bool reuse = opts_.prefix_caching && !req.params.prompt_logprobs;
  const std::optional<int> hit =
      blocks_.allocate(req.prompt, prompt, reuse, &table, &chain, growth_need(), /*count=*/true);
  if (!hit) return false;
  running_.push_back(
      std::make_unique<Sequence>(std::move(req), tok_, std::move(table), *hit, chain));
  Sequence& s = *running_.back();
  if (s.adjusted()) ++adjusted_;
  s.result.speculative = speculative_use(s);
  s.speculates = s.result.speculative == SpecUse::kOn;
  return true;
}

void BatchScheduler::finish(Sequence& s, FinishReason reason, SchedulerEvents& events) {
  s.result.finish_reason = reason;
  s.done = true;
  if (s.adjusted()) --adjusted_;
  blocks_.release(&s.table);
  events.on_finished(std::move(s.result));
}

bool BatchScheduler::cancel(const CancelRequest& cancel, SchedulerEvents& events) {
  const int64_t id = cancel.id;
  const auto is_it = [id](const std::unique_ptr<Sequence>& s) { return s->req.id == id; };
  for (auto* set : {&running_, &preempted_}) {
    const auto it = std::find_if(set->begin(), set->end(), is_it);
    if (it == set->end()) continue;
    std::unique_ptr<Sequence> s = std::move(*it);
    set->erase(it);
    finish(*s, cancel.reason, events);  // a preempted one holds no blocks: nothing to free
    return true;
  }
  return false;
}

// A speculating sequence counts the blocks its proposals may need too (the K extra KV slots).
int BatchScheduler::growth_need() const {
  const bool spec = opts_.speculative.enabled() &&
                    static_cast<int>(running_.size()) <= opts_.speculative.max_batch;
  int n = 0;
  for (const auto& s : running_) {
    if (!s->decoding()) continue;
    const int extra = spec && s->speculates ? proposal_room(*s) : 0;
    n += std::max(0, BlockAllocator::blocks_for(s->cached + 1 + extra, blocks_.block_size()) -
                         static_cast<int>(s->table.size()));
  }
  return n;
}

SpecUse BatchScheduler::speculative_use(const Sequence& s) const {
  const std::optional<bool> asked = s.req.params.speculative;
  if (!opts_.speculative.enabled())
    return asked.value_or(false) ? SpecUse::kUnavailable : SpecUse::kNone;
  if (!asked.value_or(true)) return SpecUse::kOptedOut;
  // A constrained row's mask depends on the tokens accepted before it (docs/speculative.md).
  if (s.matcher != nullptr) return SpecUse::kConstrained;
  return SpecUse::kOn;
}

int BatchScheduler::proposal_room(const Sequence& s) const {
  return std::max(0,
                  std::min(opts_.speculative.k, s.req.params.max_new_tokens - s.generated() - 1));
}

// Prompt lookup for each decoding sequence that speculates, when at most --speculative-max-batch
// sequences run. A proposal gets the blocks its tokens need only from free ones (it never
// preempts): it is cut to what fits.
void BatchScheduler::propose() {
  const SpeculativeConfig& spec = opts_.speculative;
  const bool on = spec.enabled() && static_cast<int>(running_.size()) <= spec.max_batch;
  for (auto& sp : running_) {
    Sequence& s = *sp;
    s.proposal.clear();
    if (!on || !s.speculates || !s.decoding()) continue;
    const int room = proposal_room(s);
    if (room == 0) continue;
    ngram_propose(s.context, room, spec.min_match, spec.max_match, &s.proposal);
    while (!s.proposal.empty() &&
           !blocks_.ensure(&s.table, s.cached + 1 + static_cast<int>(s.proposal.size()))) {
      s.proposal.pop_back();
    }
  }
}

void BatchScheduler::preempt_newest() {
  std::unique_ptr<Sequence> s = std::move(running_.back());
  running_.pop_back();
  blocks_.release(&s->table);  // registered blocks stay cached: its resumption may find them
  s->cached = 0;
  s->proposal.clear();
  s->chain = PrefixChain{};
  preempted_.insert(preempted_.begin(), std::move(s));
  ++preemptions_;
}

// Oldest first, each when blocks for all its known tokens are free beside this step's growth.
void BatchScheduler::resume_preempted() {
  while (!preempted_.empty()) {
    Sequence& s = *preempted_.front();
    std::vector<int> table;
    PrefixChain chain;
    const std::optional<int> hit =
        blocks_.allocate(s.context, s.known(), opts_.prefix_caching && s.may_reuse_prefix(), &table,
                         &chain, growth_need(), /*count=*/false);
    if (!hit) return;
    s.table = std::move(table);
    s.cached = *hit;
    s.chain = chain;
    running_.push_back(std::move(preempted_.front()));
    preempted_.erase(preempted_.begin());
  }
}

// Each decoding sequence, oldest first, gets the block its next position needs; when none is
// free the newest running sequence gives its blocks back (possibly the one asking, when it is the
// newest itself). The oldest can always grow: prompt + max_new_tokens fits the whole cache.
void BatchScheduler::grow_decoding() {
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    if (!s.decoding()) continue;
    while (!blocks_.ensure(&s.table, s.cached + 1)) {
      LLAMA2_CHECK(!running_.empty());
      const bool self = running_.size() == i + 1;
      preempt_newest();
      if (self) return;
    }
  }
}

void BatchScheduler::add_to_plan(ScheduledStep& step, int slot, int n_tokens) const {
  const Sequence& s = *running_[static_cast<size_t>(slot)];
  const bool decode = s.decoding();
  const bool want_logprobs = s.req.params.logprobs || s.req.params.prompt_logprobs;
  if (decode && !s.proposal.empty()) {
    // A verify step: the last sampled token and the proposals, a logit row after each.
    std::vector<int32_t> feed{s.context[static_cast<size_t>(s.cached)]};
    feed.insert(feed.end(), s.proposal.begin(), s.proposal.end());
    const int n = static_cast<int>(feed.size());
    LLAMA2_CHECK(n == n_tokens);
    append_seq(&step.plan, static_cast<int32_t>(s.req.id), s.cached, feed.data(), n, n,
               s.table.data(), BlockAllocator::blocks_for(s.cached + n, blocks_.block_size()),
               want_logprobs);
  } else {
    // The logits after its last known token give the next one.
    append_seq(&step.plan, static_cast<int32_t>(s.req.id), s.cached, s.context.data() + s.cached,
               n_tokens, s.logit_rows(n_tokens), s.table.data(),
               BlockAllocator::blocks_for(s.cached + n_tokens, blocks_.block_size()),
               want_logprobs);
  }
  step.ids.push_back(s.req.id);
  step.slots.push_back(slot);
  step.decode_rows += decode ? 1 : 0;
  step.prefill_seqs += decode ? 0 : 1;
  step.prefill_tokens += decode ? 0 : n_tokens;
}

// Greedy and top-k rows only need each row's best few logits: the ranks then send k (value, id)
// pairs per row instead of the whole vocabulary (one step asks all rows the same way).
// LLAMA2_FULL_LOGITS=1 forces full rows (for comparing the two paths). A row with top_logprobs
// needs that many candidates too (its alternatives; logprobs.h). 0: full rows.
int BatchScheduler::logit_candidates(const ScheduledStep& step) const {
  if (opts_.full_logits) return 0;
  int most = 0;
  for (size_t i = 0; i < step.plan.seqs.size(); ++i) {
    if (step.plan.seqs[i].n_logits == 0) continue;
    const Sequence& s = *running_[static_cast<size_t>(step.slots[i])];
    // A prompt row scores its prompt token, which may be any token: full rows.
    if (s.unscored_row() != std::numeric_limits<int>::max()) return 0;
    const SamplingParams& params = s.req.params;
    const int need = Sampler::candidates_needed(params);
    if (need == 0) return 0;
    most = std::max({most, need, params.logprobs ? params.top_logprobs : 0});
  }
  return most;
}

ScheduledStep BatchScheduler::schedule() {
  resume_preempted();
  grow_decoding();
  propose();
  ScheduledStep step;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& s = *running_[i];
    if (s.decoding())
      add_to_plan(step, static_cast<int>(i), 1 + static_cast<int>(s.proposal.size()));
  }
  int budget = opts_.prefill_chunk;
  // The engine holds as many logit rows per step as sequences (--max-batch-size): every running
  // sequence may have one; prompt rows to score share what the free batch slots leave.
  int extra_rows = opts_.max_batch_size - static_cast<int>(running_.size());
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const Sequence& s = *running_[i];
    if (s.decoding()) continue;
    int n = std::min(budget, s.known() - s.cached);
    if (s.unscored_row() != std::numeric_limits<int>::max()) {
      n = std::min(n, std::max(s.cached, s.unscored_row()) - s.cached + 1 + extra_rows);
      extra_rows -= std::max(0, s.logit_rows(n) - 1);
    }
    add_to_plan(step, static_cast<int>(i), n);
    budget -= n;
  }
  step.plan.candidates = logit_candidates(step);
  if (adjusted_ > 0) add_row_adjustments(step);
  return step;
}

// Computed here, at plan time, on the engine thread: step t's mask needs step t-1's token, which
// apply() has just accepted, and the plan carries the masks to every rank before the forward pass
// (docs/structured-output.md, "Serving", says what overlapping them with the pass would take).
// Every rank applies them before its slice's reductions, so logit_bias and min_tokens hold under
// tensor parallelism as on one rank.
void BatchScheduler::add_row_adjustments(ScheduledStep& step) {
  int row = 0;
  for (size_t i = 0; i < step.plan.seqs.size(); ++i) {
    const SeqStep& q = step.plan.seqs[i];
    if (q.n_logits == 0) continue;
    Sequence& s = *running_[static_cast<size_t>(step.slots[i])];
    // Only the rows that sample: the chunk's last, when it reaches the last known token (prompt
    // rows score the model's own distribution), or each row of a verify step, adjusted as a plain
    // decode would adjust it at that position.
    if (s.adjusted() && s.decoding() && !s.proposal.empty()) {
      for (int j = 0; j < q.n_logits; ++j) {
        if (fill_row_adjust(s, j)) add_row_adjust(&step.plan, row + j, mask_, config_.vocab_size);
      }
    } else if (s.adjusted() && q.pos_begin + q.n_tokens == s.known() && fill_row_adjust(s)) {
      add_row_adjust(&step.plan, row + q.n_logits - 1, mask_, config_.vocab_size);
    }
    row += q.n_logits;
  }
}

// The matcher's words cover the tokenizer's vocabulary; the model's may be larger (synthetic
// weights with a test tokenizer): the ids past it stay disallowed.
bool BatchScheduler::fill_row_adjust(Sequence& s, int ahead) {
  const SamplingParams& p = s.req.params;
  const size_t words = static_cast<size_t>((config_.vocab_size + 31) / 32);
  mask_.allowed.clear();
  if (s.matcher != nullptr) {
    mask_.allowed.resize(words);
    const size_t filled = static_cast<size_t>(s.matcher->mask_words());
    s.matcher->fill_mask(mask_.allowed.data());
    std::fill(mask_.allowed.begin() + static_cast<std::ptrdiff_t>(filled), mask_.allowed.end(), 0u);
  }
  if (s.generated() + ahead < p.min_tokens) {
    // Too early to end: EOS and the stop ids are masked out. A grammar that allows nothing else
    // keeps its own mask, as a vocabulary of stop ids only allows all (a row with no token
    // allowed could not be sampled).
    const std::vector<uint32_t> grammar = mask_.allowed;
    if (mask_.allowed.empty()) {
      mask_.allowed.assign(words, ~0u);
      const int tail = config_.vocab_size % 32;  // no bits past the vocabulary
      if (tail != 0) mask_.allowed.back() = (1u << tail) - 1u;
    }
    const auto clear = [&](int32_t id) {
      if (id >= 0 && id < config_.vocab_size) mask_.allowed[id / 32] &= ~(1u << (id % 32));
    };
    if (!p.ignore_eos) clear(config_.eos_token_id);
    for (int32_t id : p.stop_token_ids) clear(id);
    const bool none =
        std::all_of(mask_.allowed.begin(), mask_.allowed.end(), [](uint32_t w) { return w == 0; });
    if (none) mask_.allowed = grammar;
  }
  mask_.bias_ids.clear();
  mask_.bias_values.clear();
  for (const auto& [id, bias] : p.logit_bias) {
    mask_.bias_ids.push_back(id);
    mask_.bias_values.push_back(bias);
  }
  return !mask_.allowed.empty() || !mask_.bias_ids.empty();
}

int BatchScheduler::sample_row(Sequence& s, const StepLogits& logits, int row) {
  const size_t W = static_cast<size_t>(logits.width), at = static_cast<size_t>(row) * W;
  if (!logits.full()) {
    return s.sampler.sample_candidates(logits.values.data() + at, logits.ids.data() + at,
                                       logits.width);
  }
  row_logits_.assign(logits.values.begin() + static_cast<std::ptrdiff_t>(at),
                     logits.values.begin() + static_cast<std::ptrdiff_t>(at + W));
  return s.sampler.sample(row_logits_, s.context);  // the penalties write into the copy
}

int BatchScheduler::verify_row(Sequence& s, const StepLogits& logits, int row, int proposal,
                               bool* accepted) {
  const size_t W = static_cast<size_t>(logits.width), at = static_cast<size_t>(row) * W;
  if (!logits.full()) {
    return s.sampler.verify_candidates(logits.values.data() + at, logits.ids.data() + at,
                                       logits.width, proposal, nullptr, accepted);
  }
  row_logits_.assign(logits.values.begin() + static_cast<std::ptrdiff_t>(at),
                     logits.values.begin() + static_cast<std::ptrdiff_t>(at + W));
  return s.sampler.verify(row_logits_, s.context, proposal, nullptr, accepted);
}

int BatchScheduler::apply_verified(Sequence& s, const StepLogits& logits, int row,
                                   SchedulerEvents& events) {
  LLAMA2_CHECK(s.matcher == nullptr);  // constrained requests do not speculate
  const int base = s.cached, k = static_cast<int>(s.proposal.size());
  // Counted before the walk: the emit() that ends the sequence hands its result over.
  ++spec_.verify_steps;
  spec_.proposed += k;
  ++s.result.spec_verify_steps;
  s.result.spec_proposed += k;
  int emitted = 0;
  for (int j = 0; j <= k; ++j) {
    // Row j follows the fed tokens 0..j, which the KV cache now holds for good: the last sampled
    // token and the j proposals accepted so far (already in context). Only they register.
    s.cached = base + j + 1;
    if (opts_.prefix_caching) blocks_.cache_full_blocks(s.context, s.cached, s.table, &s.chain);
    bool accepted = false;
    const int token =
        j < k ? verify_row(s, logits, row + j, s.proposal[static_cast<size_t>(j)], &accepted)
              : sample_row(s, logits, row + j);  // every proposal accepted: a bonus
    spec_.accepted += accepted ? 1 : 0;
    s.result.spec_accepted += accepted ? 1 : 0;
    ++spec_.emitted;
    ++emitted;
    emit(s, token, logits, row + j, events);
    if (s.done || !accepted) break;
  }
  s.proposal.clear();
  // The rejected tokens' KV slots: past s.cached, overwritten by the next step; whole blocks past
  // it go back now.
  if (!s.done) blocks_.truncate(&s.table, s.cached);
  return emitted;
}

void BatchScheduler::emit(Sequence& s, int token, const StepLogits& logits, int row,
                          SchedulerEvents& events) {
  TokenEvent ev;
  ev.id = s.req.id;
  ev.token = token;
  if (s.req.params.logprobs) {
    row_logprobs(logits, row, token, s.req.params.top_logprobs, &ev.logprob, &ev.top_logprobs);
    s.result.logprobs.push_back(ev.logprob);
    s.result.top_logprobs.push_back(ev.top_logprobs);
  }
  s.result.tokens.push_back(token);
  s.context.push_back(token);
  ev.index = static_cast<int>(s.result.tokens.size()) - 1;
  const SamplingParams& p = s.req.params;
  // EOS or a stop id: the end, reported as a token but adding no text.
  const bool eos =
      (token == config_.eos_token_id && !p.ignore_eos) ||
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
  // A complete constrained output ends here, without a step for the EOS that alone could follow.
  const bool complete = s.matcher != nullptr && s.matcher->is_complete();
  // A model vocabulary larger than its tokenizer's (synthetic weights with a test tokenizer)
  // can produce ids with no piece: they read as <unk>, the ids themselves are still reported.
  std::string piece =
      eos ? std::string() : s.detok.push(token < tok_.vocab_size() ? token : tok_.unk_id());
  const bool last = eos || complete || ev.index + 1 >= s.req.params.max_new_tokens;
  if (last) piece += s.detok.finish();  // bytes of an unfinished character, as decode() shows them
  StopMatcher::Result m = s.stop.push(piece);
  if (last && !m.stopped) m.emit += s.stop.finish();
  s.result.text += m.emit;
  ev.text = std::move(m.emit);
  events.on_token(ev);
  if (eos || complete || m.stopped) {
    finish(s, FinishReason::kStop, events);
  } else if (last) {
    finish(s, FinishReason::kLength, events);
  }
}

void BatchScheduler::score_prompt_rows(Sequence& s, const StepLogits& logits, int row, int n) {
  const int first = s.cached - n;  // the position of the first row
  for (int j = 0; j < n; ++j) {
    const int p = first + j;
    if (p != s.prompt_scored || s.unscored_row() == std::numeric_limits<int>::max()) continue;
    PromptLogprob lp;
    prompt_row_logprob(logits, row + j, s.context[static_cast<size_t>(p) + 1],
                       *s.req.params.prompt_logprobs, &lp);
    s.result.prompt_logprobs.push_back(std::move(lp));
    ++s.prompt_scored;
  }
}

int BatchScheduler::apply(const ScheduledStep& step, const StepLogits& logits,
                          SchedulerEvents& events) {
  int generated = 0, row = 0;
  for (size_t i = 0; i < step.plan.seqs.size(); ++i) {
    const size_t slot = static_cast<size_t>(step.slots[i]);
    LLAMA2_CHECK(slot < running_.size() && running_[slot]->req.id == step.ids[i]);
    Sequence& s = *running_[slot];
    const SeqStep& q = step.plan.seqs[i];
    if (!s.proposal.empty()) {
      LLAMA2_CHECK(s.decoding() && q.n_tokens == 1 + static_cast<int>(s.proposal.size()) &&
                   q.n_logits == q.n_tokens);
      generated += apply_verified(s, logits, row, events);
      row += q.n_logits;
      continue;
    }
    s.cached += q.n_tokens;
    // Blocks this step filled are computed now: later prompts with the same prefix may share them.
    if (opts_.prefix_caching) blocks_.cache_full_blocks(s.context, s.cached, s.table, &s.chain);
    if (q.n_logits == 0) continue;
    score_prompt_rows(s, logits, row, q.n_logits);
    row += q.n_logits;
    if (s.cached != s.known()) continue;     // prompt rows only: the chunk ends inside the prompt
    if (s.req.params.max_new_tokens == 0) {  // the prompt scored alone
      finish(s, FinishReason::kLength, events);
      continue;
    }
    // The chunk's last row: the next token. (Speculative verification will sample several.)
    const int token = sample_row(s, logits, row - 1);
    if (s.matcher != nullptr && !s.matcher->accept_token(token)) {
      // Only when the mask allowed nothing (every logit -inf): a grammar state no token of this
      // vocabulary can continue. The output so far is all there is.
      finish(s, FinishReason::kStop, events);
    } else {
      emit(s, token, logits, row - 1, events);
    }
    ++generated;
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const std::unique_ptr<Sequence>& s) { return s->done; }),
                 running_.end());
  return generated;
}

}  // namespace llama2
