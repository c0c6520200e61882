// The continuous-batching scheduler (coordinator/scheduler/batch_scheduler.{h,cpp}) behind its
// request owner (coordinator/requests/request_owner.{h,cpp}: the FIFO queue, deadlines, cancel),
// driven through the StepExecutor seam by a fake engine. The fake returns a deterministic token per
// (sequence, position) and checks every plan it receives the way an engine would depend on it:
// positions continue where the sequence left off (or restart from 0 after a preemption, feeding
// prompt and generated tokens again), decode rows feed back the token sampled last, block tables
// cover the positions and keep their prefix, no block appears twice in a step, and every position
// a sequence reads holds its own token in the (simulated) KV cache. The hand-written cases pin FIFO
// admission, KV blocks on demand and preemption, the prefill budget, cancel and expiry at each
// stage; the random test replays random operations against a small reference model of the
// policy.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/step_runner.h"
#include "coordinator/text/tokenizer.h"

namespace {

using llama2::BlockAllocator;
using llama2::Finished;
using llama2::StepPlan;
using Clock = std::chrono::steady_clock;

constexpr int kEos = 2;
constexpr int kVocab = 512;  // the tiny test models' vocabulary

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

// The token the fake engine predicts for position `pos` of sequence `seq` (never EOS).
int token_at(int64_t seq, int pos) {
  return 3 + static_cast<int>((seq * 31 + pos * 7) % 250);
}

std::vector<int> prompt_of(int64_t id, int len) {
  std::vector<int> p(len);
  for (int i = 0; i < len; ++i) p[i] = 3 + static_cast<int>((id * 13 + i) % 300);
  return p;
}

class FakeEngine final : public llama2::StepExecutor {
 public:
  FakeEngine(int num_blocks, int block_size) : num_blocks_(num_blocks), block_size_(block_size) {}

  // What the engine must see of request `id`, and where (if anywhere) it predicts EOS.
  void expect(int64_t id, const std::vector<int>& prompt, std::optional<int> eos_pos) {
    Seq& q = seqs_[id];
    q.prompt = prompt;
    q.eos_pos = eos_pos;
  }
  void finished(int64_t id) { finished_.insert(id); }

  std::vector<StepPlan> plans;
  std::vector<int> prefill_tokens;  // prompt tokens in each plan
  int restarts = 0;                 // sequences fed again from position 0 (preempted before)

  void execute(const StepPlan& plan, llama2::StepLogits* out) override {
    plans.push_back(plan);
    REQUIRE(plan.kind == llama2::StepKind::kForward);
    REQUIRE(!plan.seqs.empty());
    // Greedy requests: the best candidate is enough (0 = full rows, only when no row wants any).
    REQUIRE((plan.candidates >= 1 || plan.logit_rows() == 0));
    std::set<int> step_blocks;
    size_t tok_off = 0;
    int prefill = 0;
    out->rows = 0;
    out->width = plan.candidates;
    out->values.clear();
    out->ids.clear();
    for (const auto& s : plan.seqs) {
      INFO("seq " << s.seq_id << " pos_begin " << s.pos_begin << " n_tokens " << s.n_tokens);
      REQUIRE(seqs_.count(s.seq_id) == 1);
      REQUIRE(finished_.count(s.seq_id) == 0);  // a finished sequence never runs again
      Seq& q = seqs_[s.seq_id];
      const int P = static_cast<int>(q.prompt.size());
      REQUIRE(s.n_tokens >= 1);
      if (s.pos_begin != q.fed) {  // recomputed after a preemption: from the start, new blocks
        REQUIRE(s.pos_begin == 0);
        REQUIRE(q.fed > 0);
        q.table.clear();
        ++restarts;
      }
      REQUIRE(tok_off + s.n_tokens <= plan.tokens.size());
      for (int i = 0; i < s.n_tokens; ++i) {
        const int pos = s.pos_begin + i;
        const int want = pos < P ? q.prompt[pos] : q.sampled.at(pos - P);
        REQUIRE(plan.tokens[tok_off + i] == want);
        prefill += pos < P ? 1 : 0;
      }
      tok_off += static_cast<size_t>(s.n_tokens);
      REQUIRE(s.table_len == BlockAllocator::blocks_for(s.pos_begin + s.n_tokens, block_size_));
      const int32_t* table = plan.block_ids.data() + s.table_begin;
      for (int i = 0; i < s.table_len; ++i) {
        const int b = table[i];
        REQUIRE(b >= 0);
        REQUIRE(b < num_blocks_);
        REQUIRE(step_blocks.insert(b).second);  // no block twice in one step
        if (i < static_cast<int>(q.table.size())) REQUIRE(q.table[i] == b);  // prefix kept
      }
      // What it reads is its own KV: every position before this chunk holds its token.
      for (int pos = 0; pos < s.pos_begin; ++pos) {
        const int want = pos < P ? q.prompt[pos] : q.sampled.at(pos - P);
        REQUIRE(kv_[{table[pos / block_size_], pos % block_size_}] == want);
      }
      for (int i = 0; i < s.n_tokens; ++i) {
        const int pos = s.pos_begin + i;
        kv_[{table[pos / block_size_], pos % block_size_}] = plan.tokens[tok_off - s.n_tokens + i];
      }
      q.table.assign(table, table + s.table_len);
      q.fed = s.pos_begin + s.n_tokens;
      // Logits once every known token is in the cache: the next token's.
      REQUIRE(s.n_logits == (q.fed == P + static_cast<int>(q.sampled.size()) ? 1 : 0));
      if (!s.n_logits) continue;
      const int next = q.eos_pos && *q.eos_pos == q.fed ? kEos : token_at(s.seq_id, q.fed);
      q.sampled.push_back(next);
      ++out->rows;
      for (int c = 0; c < plan.candidates; ++c) {  // best first, then strictly worse ones
        out->values.push_back(10.f - static_cast<float>(c));
        out->ids.push_back(c == 0 ? next : (next + c) % kVocab);
      }
    }
    prefill_tokens.push_back(prefill);
  }
  int vocab_size() const override { return kVocab; }

 private:
  struct Seq {
    std::vector<int> prompt;
    std::optional<int> eos_pos;
    int fed = 0;               // positions already in the (fake) KV cache
    std::vector<int> sampled;  // tokens returned so far
    std::vector<int> table;
  };
  int num_blocks_, block_size_;
  std::map<int64_t, Seq> seqs_;
  std::set<int64_t> finished_;
  std::map<std::pair<int, int>, int> kv_;  // (block, offset) -> the token whose KV it holds
};

using Plan = std::vector<std::array<int, 3>>;

// A request owner and its batch scheduler over a fake engine, recording the events they report.
struct Harness : llama2::RequestEvents {
  BlockAllocator blocks;
  FakeEngine engine;
  llama2::ModelConfig config;
  std::vector<int64_t> admitted;
  std::vector<std::pair<int64_t, std::string>> done;  // (id, finish_reason) in event order
  std::map<int64_t, Finished> results;
  std::map<int64_t, std::vector<int>> indices;  // token event indices per request
  std::unique_ptr<llama2::Admission> admission;
  std::unique_ptr<llama2::BatchScheduler> scheduler;
  std::unique_ptr<llama2::StepRunner> runner;
  std::unique_ptr<llama2::RequestOwner> gen;

  Harness(int num_blocks, int block_size, int max_batch, int prefill_chunk)
      : blocks(num_blocks, block_size), engine(num_blocks, block_size) {
    config.vocab_size = kVocab;
    config.eos_token_id = kEos;
    config.max_position_embeddings = 4096;
    llama2::AdmissionOptions ao;
    ao.limits.max_position_embeddings = config.max_position_embeddings;
    ao.limits.kv_capacity_tokens = int64_t{num_blocks} * block_size;
    admission = std::make_unique<llama2::Admission>(ao);
    scheduler = std::make_unique<llama2::BatchScheduler>(
        tokenizer(), config, blocks, llama2::SchedulerOptions{max_batch, prefill_chunk});
    runner = std::make_unique<llama2::StepRunner>(*scheduler, engine);
    gen = std::make_unique<llama2::RequestOwner>(*admission, *runner, *this);
  }
  void on_admitted(int64_t id) override { admitted.push_back(id); }
  void on_token(const llama2::TokenEvent& ev) override {
    CHECK(ev.index == static_cast<int>(indices[ev.id].size()));  // no gap, no repeat
    indices[ev.id].push_back(ev.index);
  }
  void on_finished(const Finished& r, const llama2::Timings&) override {
    done.emplace_back(r.id, llama2::to_string(r.finish_reason));
    CHECK(results.count(r.id) == 0);  // one done per request
    results[r.id] = r;
    engine.finished(r.id);
  }

  // Submits through the owner's admission; a refusal (the one prompt-length check) throws.
  void add(int64_t id, int prompt_len, int max_new, std::optional<int> eos_index = std::nullopt,
           Clock::time_point deadline = Clock::time_point::max()) {
    llama2::SubmitRequest r;
    r.id = id;
    r.prompt = prompt_of(id, prompt_len);
    r.params.temperature = 0.f;
    r.params.max_new_tokens = max_new;
    std::optional<int> eos_pos;
    if (eos_index) eos_pos = prompt_len + *eos_index;
    engine.expect(id, r.prompt, eos_pos);
    llama2::Reservation place = admission->reserve(0);
    REQUIRE(place);
    if (auto refusal = gen->submit(std::move(r), std::move(place), deadline))
      throw llama2::Error(refusal->message);
  }
  // (seq_id, pos_begin, n_tokens) of the last plan.
  std::vector<std::array<int, 3>> last_plan() const {
    std::vector<std::array<int, 3>> v;
    for (const auto& s : engine.plans.back().seqs) v.push_back({s.seq_id, s.pos_begin, s.n_tokens});
    return v;
  }
  void run_until_idle() {
    for (int i = 0; i < 10000 && !gen->idle(); ++i) gen->step();
    REQUIRE(gen->idle());
  }
};

// The policy the owner and scheduler promise, written as plainly as possible: FIFO admission while
// a batch slot is free, nothing is preempted and the prompt's blocks are free beside what this
// step's decoding sequences need; each step then resumes preempted sequences oldest first (blocks
// for all their tokens), gives each decoding sequence the block its next position needs (the
// newest running sequence is preempted when none is free), decodes every sequence that has fed
// all its tokens but the last (admission order), then hands the prefill budget to the others
// (prompts, or prompt + generated tokens after a preemption) in admission order; a sequence ends
// on EOS, on max_new_tokens, on cancel or on its deadline.
class ReferenceScheduler {
 public:
  struct Req {
    int64_t id = 0;
    int prompt_len = 0, max_new = 0;
    std::optional<int> eos_index;
    int deadline_h =
        INT32_MAX;  // hours after `base` (INT32_MAX: none; -1: already past when added)
    int cached = 0;
    std::vector<int> tokens;
    int blocks = 0;
    int known() const { return prompt_len + static_cast<int>(tokens.size()); }
    bool decoding() const { return cached >= prompt_len && cached == known() - 1; }
  };
  ReferenceScheduler(int num_blocks, int block_size, int max_batch, int chunk)
      : free_(num_blocks), block_size_(block_size), max_batch_(max_batch), chunk_(chunk) {}

  std::vector<std::pair<int64_t, std::string>> done;
  std::map<int64_t, std::vector<int>> tokens;  // of finished requests

  void add(Req r) { queue_.push_back(std::move(r)); }
  // The step's plan as (seq, pos_begin, n_tokens), and the tokens it generates.
  std::pair<Plan, int> step(int now_h) {
    expire(now_h);
    admit();
    resume();
    grow();
    Plan plan;
    std::vector<Req*> order;
    for (auto& r : running_) {
      if (r.decoding()) {
        plan.push_back({static_cast<int>(r.id), r.cached, 1});
        order.push_back(&r);
      }
    }
    int budget = chunk_;
    for (auto& r : running_) {
      if (r.decoding() || budget == 0) continue;
      const int n = std::min(budget, r.known() - r.cached);
      plan.push_back({static_cast<int>(r.id), r.cached, n});
      order.push_back(&r);
      budget -= n;
    }
    int generated = 0;
    std::set<int64_t> ended;
    for (size_t i = 0; i < plan.size(); ++i) {
      Req& r = *order[i];
      r.cached += plan[i][2];
      if (r.cached < r.known()) continue;
      const int index = static_cast<int>(r.tokens.size());
      const bool eos = r.eos_index && *r.eos_index == index;
      r.tokens.push_back(eos ? kEos : token_at(r.id, r.cached));
      ++generated;
      if (eos || index + 1 >= r.max_new) {
        finish(r, eos ? "stop" : "length");
        ended.insert(r.id);
      }
    }
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](const Req& r) { return ended.count(r.id) == 1; }),
                   running_.end());
    return {plan, generated};
  }
  bool cancel(int64_t id, const std::string& reason) {
    auto match = [id](const Req& r) { return r.id == id; };
    if (auto it = std::find_if(queue_.begin(), queue_.end(), match); it != queue_.end()) {
      finish(*it, reason);
      queue_.erase(it);
      return true;
    }
    if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
      finish(*it, reason);
      running_.erase(it);
      return true;
    }
    if (auto it = std::find_if(preempted_.begin(), preempted_.end(), match);
        it != preempted_.end()) {
      finish(*it, reason);
      preempted_.erase(it);
      return true;
    }
    return false;
  }
  int expire(int now_h) {
    std::vector<int64_t> ids;
    for (const auto& r : queue_)
      if (r.deadline_h <= now_h) ids.push_back(r.id);
    for (const auto& r : running_)
      if (r.deadline_h <= now_h) ids.push_back(r.id);
    for (const auto& r : preempted_)
      if (r.deadline_h <= now_h) ids.push_back(r.id);
    for (int64_t id : ids) cancel(id, "timeout");
    return static_cast<int>(ids.size());
  }
  std::vector<int64_t> active() const {
    std::vector<int64_t> ids;
    for (const auto& r : queue_) ids.push_back(r.id);
    for (const auto& r : running_) ids.push_back(r.id);
    for (const auto& r : preempted_) ids.push_back(r.id);
    return ids;
  }
  size_t queued() const { return queue_.size(); }
  size_t running() const { return running_.size() + preempted_.size(); }
  int preemptions = 0;
  int used_blocks(int num_blocks) const { return num_blocks - free_; }

 private:
  void finish(Req& r, const std::string& reason) {
    free_ += r.blocks;
    r.blocks = 0;
    done.emplace_back(r.id, reason);
    tokens[r.id] = r.tokens;
  }

  int blocks_for(int positions) const { return BlockAllocator::blocks_for(positions, block_size_); }
  int growth_need() const {
    int n = 0;
    for (const auto& r : running_) n += r.decoding() && r.cached % block_size_ == 0 ? 1 : 0;
    return n;
  }
  void admit() {
    while (!queue_.empty() && preempted_.empty() &&
           static_cast<int>(running_.size()) < max_batch_) {
      Req& r = queue_.front();
      const int need = blocks_for(r.prompt_len);
      if (need + growth_need() > free_) break;
      free_ -= need;
      r.blocks = need;
      running_.push_back(std::move(r));
      queue_.erase(queue_.begin());
    }
  }
  void resume() {
    while (!preempted_.empty()) {
      Req& r = preempted_.front();
      const int need = blocks_for(r.known());
      if (need + growth_need() > free_) break;
      free_ -= need;
      r.blocks = need;
      running_.push_back(std::move(r));
      preempted_.erase(preempted_.begin());
    }
  }
  void grow() {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (!running_[i].decoding() || blocks_for(running_[i].cached + 1) <= running_[i].blocks)
        continue;
      while (free_ == 0) {
        const bool self = i + 1 == running_.size();
        Req r = std::move(running_.back());
        running_.pop_back();
        free_ += r.blocks;
        r.blocks = 0;
        r.cached = 0;
        preempted_.insert(preempted_.begin(), std::move(r));
        ++preemptions;
        if (self) return;
      }
      --free_;
      ++running_[i].blocks;
    }
  }

  std::vector<Req> queue_, running_, preempted_;
  int free_, block_size_, max_batch_, chunk_;
};

}  // namespace

TEST_SUITE("scheduler") {
  TEST_CASE("FIFO admission under KV pressure: the head waits, nothing overtakes it") {
    // 8 blocks of 4 tokens. Request 1 takes its prompt's 5 blocks (20 tokens; 4 new ones will need
    // a sixth), request 2 also 5, request 3 only 1: it would fit beside request 1 but must wait
    // behind request 2.
    Harness h(8, 4, 4, 64);
    h.add(1, 20, 4);
    h.add(2, 20, 4);
    h.add(3, 2, 2);
    CHECK(h.gen->step() == 1);
    CHECK(h.admitted == std::vector<int64_t>{1});
    CHECK(h.gen->running() == 1);
    CHECK(h.gen->queued() == 2);
    CHECK(h.blocks.used_blocks() == 5);
    for (int i = 0; i < 3; ++i) h.gen->step();  // request 1: tokens 2..4, then done
    CHECK(h.done == std::vector<std::pair<int64_t, std::string>>{{1, "length"}});
    CHECK(h.blocks.used_blocks() == 0);
    h.gen->step();  // 2 admitted first; 3 fits beside it now (5 + 1 of 8 blocks)
    CHECK(h.admitted == std::vector<int64_t>{1, 2, 3});
    CHECK(h.last_plan() == Plan{{2, 0, 20}, {3, 0, 2}});
    h.run_until_idle();
    CHECK(h.blocks.used_blocks() == 0);
    CHECK(h.results.at(3).tokens == std::vector<int>{token_at(3, 2), token_at(3, 3)});
  }

  TEST_CASE("FIFO admission: batch slots are taken in arrival order") {
    Harness h(64, 4, 2, 64);
    for (int id = 1; id <= 5; ++id) h.add(id, 3, 2);
    h.gen->step();
    CHECK(h.admitted == std::vector<int64_t>{1, 2});
    h.run_until_idle();
    CHECK(h.admitted == std::vector<int64_t>{1, 2, 3, 4, 5});
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("a request that can never fit is refused at add() and changes nothing") {
    Harness h(4, 4, 4, 64);
    h.add(1, 3, 2);
    CHECK_THROWS_AS(h.add(2, 14, 3), llama2::Error);  // 17 positions: 5 blocks of 4 > 4
    CHECK(h.gen->queued() == 1);
    h.run_until_idle();
    CHECK(h.done == std::vector<std::pair<int64_t, std::string>>{{1, "length"}});
  }

  // The request owner's one prompt-length check refuses it (an empty prompt reached the old
  // Generator::add and the next step decoded from context.back() of an empty vector).
  TEST_CASE("add() refuses an empty prompt") {
    Harness h(8, 4, 1, 4);
    CHECK_THROWS_AS(h.add(1, 0, 2), llama2::Error);
    CHECK(h.gen->idle());
    CHECK(h.admission->gauges().waiting == 0);
  }

  TEST_CASE("chunked prefill: at most prefill_chunk prompt tokens per step, decodes first") {
    Harness h(64, 4, 4, 5);
    h.add(1, 12, 3);
    h.add(2, 7, 2);
    h.gen->step();
    CHECK(h.last_plan() == Plan{{1, 0, 5}});
    h.gen->step();
    CHECK(h.last_plan() == Plan{{1, 5, 5}});
    h.gen->step();  // the rest of 1's prompt, then 2 gets what is left of the budget
    CHECK(h.last_plan() == Plan{{1, 10, 2}, {2, 0, 3}});
    CHECK(h.engine.plans.back().seqs[0].n_logits == 1);
    CHECK(h.engine.plans.back().seqs[1].n_logits == 0);
    h.gen->step();  // 1 decodes (one row, first), 2 finishes its prompt
    CHECK(h.last_plan() == Plan{{1, 12, 1}, {2, 3, 4}});
    h.gen->step();
    CHECK(h.last_plan() == Plan{{1, 13, 1}, {2, 7, 1}});
    h.run_until_idle();
    CHECK(h.engine.prefill_tokens == std::vector<int>{5, 5, 5, 4, 0});
    CHECK(h.results.at(1).tokens ==
          std::vector<int>{token_at(1, 12), token_at(1, 13), token_at(1, 14)});
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("EOS ends a sequence with finish_reason stop, EOS included in its tokens") {
    Harness h(64, 4, 4, 64);
    h.add(1, 4, 10, /*eos_index=*/2);
    h.run_until_idle();
    CHECK(h.done == std::vector<std::pair<int64_t, std::string>>{{1, "stop"}});
    CHECK(h.results.at(1).tokens == std::vector<int>{token_at(1, 4), token_at(1, 5), kEos});
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("cancel at every stage frees the blocks at once") {
    Harness h(64, 4, 1, 4);  // one batch slot: 2 waits in the queue while 1 runs
    h.add(1, 10, 5);         // 10 prompt tokens: 3 blocks, a fourth once decoding
    h.add(2, 3, 2);
    h.add(3, 3, 2);
    CHECK_FALSE(h.gen->cancel(99, llama2::FinishReason::kCancelled));
    int64_t cancelled = 0;

    SUBCASE("queued") {
      h.gen->step();
      cancelled = 2;
      CHECK(h.gen->cancel(2, llama2::FinishReason::kCancelled));
      CHECK(h.gen->queued() == 1);
      CHECK(h.blocks.used_blocks() == 3);  // only 1's
      CHECK(h.results.at(2).tokens.empty());
    }
    SUBCASE("mid-prefill") {
      h.gen->step();  // 4 of 1's 10 prompt tokens
      CHECK(h.last_plan() == Plan{{1, 0, 4}});
      cancelled = 1;
      CHECK(h.gen->cancel(1, llama2::FinishReason::kCancelled));
      CHECK(h.gen->running() == 0);
      CHECK(h.blocks.used_blocks() == 0);
      CHECK(h.results.at(1).tokens.empty());
      h.gen->step();  // the slot goes to 2
      CHECK(h.last_plan() == Plan{{2, 0, 3}});
    }
    SUBCASE("decoding") {
      for (int i = 0; i < 4; ++i) h.gen->step();  // 3 prefill chunks, then one decode step
      CHECK(h.results.count(1) == 0);
      cancelled = 1;
      CHECK(h.gen->cancel(1, llama2::FinishReason::kCancelled));
      CHECK(h.blocks.used_blocks() == 0);
      CHECK(h.results.at(1).tokens == std::vector<int>{token_at(1, 10), token_at(1, 11)});
    }
    CHECK(h.results.at(cancelled).finish_reason == llama2::FinishReason::kCancelled);
    CHECK_FALSE(h.gen->cancel(cancelled, llama2::FinishReason::kCancelled));  // an id ends once
    h.run_until_idle();
    CHECK(h.blocks.used_blocks() == 0);
    CHECK(h.results.size() == 3);
  }

  TEST_CASE("expiry at every stage: finish_reason timeout, blocks freed") {
    // Deadlines far in the future of the real clock (step() expires against Clock::now()), moved
    // past by calling expire() with a later instant: no sleeps, no timing dependence.
    const auto base = Clock::now() + std::chrono::hours(1000);
    const auto later = base + std::chrono::hours(1);
    Harness h(64, 4, 1, 4);
    h.add(1, 10, 5, std::nullopt, base);
    h.add(2, 3, 2, std::nullopt, base);
    h.add(3, 3, 2);  // no deadline

    SUBCASE("queued") {
      h.gen->step();
      CHECK(h.gen->expire(later) == 2);
      CHECK(h.done == std::vector<std::pair<int64_t, std::string>>{{2, "timeout"}, {1, "timeout"}});
    }
    SUBCASE("mid-prefill") {
      h.gen->step();
      CHECK(h.gen->expire(base - std::chrono::hours(1)) == 0);  // not yet
      CHECK(h.gen->expire(base) == 2);                          // at the deadline
      CHECK(h.results.at(1).tokens.empty());
    }
    SUBCASE("decoding") {
      for (int i = 0; i < 4; ++i) h.gen->step();
      CHECK(h.gen->expire(later) == 2);
      CHECK(h.results.at(1).tokens.size() == 2);
    }
    SUBCASE("already past when added: step() ends it before it runs") {
      h.add(4, 3, 2, std::nullopt, Clock::now() - std::chrono::seconds(1));
      h.gen->step();
      CHECK(h.done == std::vector<std::pair<int64_t, std::string>>{{4, "timeout"}});
      CHECK(h.gen->cancel(1, llama2::FinishReason::kCancelled));
      CHECK(h.gen->cancel(2, llama2::FinishReason::kCancelled));
    }
    CHECK(h.blocks.used_blocks() == 0);
    CHECK(h.results.at(1).finish_reason != llama2::FinishReason::kLength);
    h.run_until_idle();
    CHECK(h.results.at(3).finish_reason == llama2::FinishReason::kLength);
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("random adds, steps, cancels and expiries agree with the reference; no block leaks") {
    // Virtual hours after `base` stand for deadlines; the real clock never reaches them, so only
    // expire(base + t) calls (and deadlines already past when added) end requests by time.
    const auto base = Clock::now() + std::chrono::hours(100000);
    int preemptions = 0, restarts = 0;
    for (uint32_t seed = 1; seed <= 150; ++seed) {
      std::mt19937 rng(seed);
      auto pick = [&rng](int lo, int hi) {
        return std::uniform_int_distribution<int>(lo, hi)(rng);
      };
      const int num_blocks = pick(2, 24), block_size = pick(1, 8);
      const int max_batch = pick(1, 6), chunk = pick(1, 16);
      INFO("seed " << seed << ": " << num_blocks << " blocks of " << block_size << ", batch "
                   << max_batch << ", chunk " << chunk);
      Harness h(num_blocks, block_size, max_batch, chunk);
      ReferenceScheduler ref(num_blocks, block_size, max_batch, chunk);
      int64_t next_id = 1;
      int now_h = 0;
      for (int op = 0; op < 300; ++op) {
        INFO("op " << op);
        const int what = pick(0, 99);
        if (what < 30) {
          ReferenceScheduler::Req r;
          r.id = next_id++;
          r.prompt_len = pick(1, 30);
          r.max_new = pick(1, 10);
          if (pick(0, 3) == 0) r.eos_index = pick(0, r.max_new - 1);
          const int d = pick(0, 9);
          if (d == 0) r.deadline_h = -1;
          if (d >= 7) r.deadline_h = now_h + pick(0, 20);
          const auto deadline = r.deadline_h == INT32_MAX ? Clock::time_point::max()
                                : r.deadline_h < 0        ? Clock::now() - std::chrono::hours(1)
                                                          : base + std::chrono::hours(r.deadline_h);
          const bool fits =
              BlockAllocator::blocks_for(r.prompt_len + r.max_new, block_size) <= num_blocks;
          if (fits) {
            h.add(r.id, r.prompt_len, r.max_new, r.eos_index, deadline);
            ref.add(r);
          } else {
            CHECK_THROWS_AS(h.add(r.id, r.prompt_len, r.max_new, r.eos_index, deadline),
                            llama2::Error);
          }
        } else if (what < 75) {
          const size_t plans = h.engine.plans.size();
          const int got = h.gen->step();
          // The owner's own expire(Clock::now()) only reaches deadlines already past.
          const auto [want_plan, want_generated] = ref.step(-1);
          CHECK(got == want_generated);
          if (want_plan.empty()) {
            CHECK(h.engine.plans.size() == plans);
          } else {
            REQUIRE(h.engine.plans.size() == plans + 1);
            CHECK(h.last_plan() == want_plan);
            CHECK(h.engine.prefill_tokens.back() <= chunk);
          }
        } else if (what < 88) {
          const std::vector<int64_t> active = ref.active();
          const int64_t id = active.empty() || pick(0, 4) == 0
                                 ? pick(1, static_cast<int>(next_id))  // maybe finished or unknown
                                 : active[pick(0, static_cast<int>(active.size()) - 1)];
          CHECK(h.gen->cancel(id, llama2::FinishReason::kCancelled) == ref.cancel(id, "cancelled"));
        } else {
          now_h += pick(0, 5);
          CHECK(h.gen->expire(base + std::chrono::hours(now_h)) == ref.expire(now_h));
        }
        REQUIRE(h.done == ref.done);
        REQUIRE(h.gen->queued() == ref.queued());
        REQUIRE(h.gen->running() == ref.running());
        REQUIRE(h.blocks.used_blocks() == ref.used_blocks(num_blocks));
        REQUIRE(h.scheduler->preemptions() == ref.preemptions);
      }
      // Drain half the runs, shut the other half down: every block comes back either way.
      if (seed % 2 == 0) {
        h.run_until_idle();
        while (ref.queued() + ref.running() > 0) ref.step(-1);
      } else {
        h.gen->cancel_all(llama2::FinishReason::kShuttingDown);
        for (int64_t id : ref.active()) ref.cancel(id, "shutting_down");
      }
      CHECK(h.done == ref.done);
      CHECK(h.gen->idle());
      CHECK(h.blocks.used_blocks() == 0);
      CHECK(h.blocks.free_blocks() == num_blocks);
      for (const auto& [id, toks] : ref.tokens) CHECK(h.results.at(id).tokens == toks);
      preemptions += ref.preemptions;
      restarts += h.engine.restarts;
    }
    // The runs exercised the preemption path, not only admission.
    CHECK(preemptions > 50);
    CHECK(restarts > 50);
  }

  TEST_CASE(
      "KV blocks on demand: a request that may use the rest of the context takes its prompt's") {
    // 16 blocks of 4 = 64 tokens: each request may grow to the whole cache, as a request without
    // max_tokens does. Both start at once, on one block each.
    Harness h(16, 4, 4, 64);
    h.add(1, 4, 60);
    h.add(2, 4, 60);
    h.gen->step();
    CHECK(h.admitted == std::vector<int64_t>{1, 2});
    CHECK(h.blocks.used_blocks() == 2);
    h.gen->step();  // both decode position 4: one more block each
    CHECK(h.blocks.used_blocks() == 4);
    h.gen->cancel_all(llama2::FinishReason::kCancelled);
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("a KV cache sized for 4 full-length sequences serves 32 short ones at once") {
    // Full length 64 tokens = 16 blocks of 4; the cache holds 4 of them (64 blocks). 32 requests
    // of 4 prompt tokens may each run to 64 tokens but stop at their third (EOS).
    Harness h(64, 4, 32, 512);
    for (int id = 1; id <= 32; ++id) h.add(id, 4, 60, /*eos_index=*/2);
    h.gen->step();
    CHECK(h.gen->running() == 32);
    CHECK(h.last_plan().size() == 32);
    h.gen->step();
    CHECK(h.last_plan().size() == 32);  // every one decodes: 2 blocks each, the whole cache
    CHECK(h.blocks.used_blocks() == 64);
    h.run_until_idle();
    CHECK(h.scheduler->preemptions() == 0);
    for (int id = 1; id <= 32; ++id) {
      CHECK(h.results.at(id).finish_reason == llama2::FinishReason::kStop);
      CHECK(h.results.at(id).tokens == std::vector<int>{token_at(id, 4), token_at(id, 5), kEos});
    }
    CHECK(h.blocks.used_blocks() == 0);
  }

  TEST_CASE("preemption: the newest sequence gives its blocks back and goes on where it stopped") {
    // 12 blocks of 4; three requests of 8 prompt tokens and 12 new ones need 5 blocks each.
    Harness h(12, 4, 4, 64);
    for (int id = 1; id <= 3; ++id) h.add(id, 8, 12);
    h.run_until_idle();
    CHECK(h.scheduler->preemptions() > 0);
    CHECK(h.engine.restarts > 0);
    for (int id = 1; id <= 3; ++id) {
      std::vector<int> want;
      for (int pos = 8; pos < 20; ++pos) want.push_back(token_at(id, pos));
      CHECK(h.results.at(id).tokens == want);  // no token lost or repeated
      CHECK(h.indices.at(id).size() == 12);
      CHECK(h.results.at(id).finish_reason == llama2::FinishReason::kLength);
    }
    CHECK(h.blocks.used_blocks() == 0);
  }
}
