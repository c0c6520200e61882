// Prefix caching in the KV block allocator (src/coordinator/scheduler/block_allocator.{h,cpp}):
// the hash chain, reference counts, LRU eviction only under pressure, never sharing a partial block
// or the block of the last prompt token, exact admission accounting, and a release (cancel) of one
// sharer that leaves the other's blocks alone. The random test simulates the KV contents: each
// block records the token prefix whose KV it holds; a hit must hand out blocks holding exactly the
// prompt's prefix, and a sequence may only write into blocks no live sequence shares.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"

using llama2::BlockAllocator;
using llama2::PrefixChain;

namespace {

constexpr uint64_t kSalt = 12345;

// A sequence as the scheduler keeps it: its tokens, blocks and chain.
struct Seq {
  std::vector<int> tokens;
  std::vector<int> table;
  PrefixChain chain;
  int hit = 0;
};

// allocate() for `tokens` with room for `extra` more; nullopt when it does not fit.
std::optional<Seq> admit(BlockAllocator& a, std::vector<int> tokens, int extra = 0) {
  Seq s;
  s.tokens = std::move(tokens);
  const int positions = static_cast<int>(s.tokens.size()) + extra;
  const std::optional<int> hit = a.allocate(s.tokens, positions, true, &s.table, &s.chain);
  if (!hit) return std::nullopt;
  s.hit = *hit;
  return s;
}

// The engine computed every token of the sequence: its full blocks get registered.
void compute_all(BlockAllocator& a, Seq& s) {
  a.cache_full_blocks(s.tokens, static_cast<int>(s.tokens.size()), s.table, &s.chain);
}

std::vector<int> seq_of(int first, int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_SUITE("prefix_cache") {
  TEST_CASE("a prompt reuses the longest chain of cached full blocks, keyed by the whole prefix") {
    BlockAllocator a(32, 4, kSalt);
    // 3 full blocks + 2 tokens.
    const std::vector<int> p = seq_of(100, 14);
    Seq first = *admit(a, p);
    CHECK(first.hit == 0);
    compute_all(a, first);
    CHECK(a.cached_blocks() == 3);  // the partial fourth block is never registered
    const std::vector<int> shared(first.table.begin(), first.table.begin() + 3);

    Seq same = *admit(a, p);
    CHECK(same.hit == 12);
    CHECK(std::vector<int>(same.table.begin(), same.table.begin() + 3) == shared);
    CHECK(same.table.size() == 4);
    CHECK(same.table[3] != first.table[3]);  // the partial block is its own
    CHECK(a.used_blocks() == 5);             // shared blocks count once

    // Same first block, different second: one block.
    std::vector<int> q = p;
    q[5] = 999;
    Seq one = *admit(a, q);
    CHECK(one.hit == 4);
    CHECK(one.table[0] == shared[0]);

    // Block 1's tokens equal, block 0's not: the chain hash differs, no hit at all.
    std::vector<int> r = p;
    r[0] = 998;
    Seq none = *admit(a, r);
    CHECK(none.hit == 0);
    CHECK(std::find(none.table.begin(), none.table.end(), shared[1]) == none.table.end());

    const llama2::PrefixCacheCounters& c = a.counters();
    CHECK(c.queried_tokens == 4 * 14);
    CHECK(c.hit_tokens == 12 + 4);
  }

  TEST_CASE("the block holding the last prompt token is always computed") {
    BlockAllocator a(16, 4, kSalt);
    const std::vector<int> p = seq_of(7, 8);  // exactly two full blocks
    Seq s = *admit(a, p, 3);
    compute_all(a, s);
    CHECK(a.cached_blocks() == 2);
    Seq again = *admit(a, p, 3);
    CHECK(again.hit == 4);  // block 1 holds token 7 (the last): recomputed
    CHECK(again.chain.blocks == 1);
    Seq longer = *admit(a, concat(p, {1}), 3);
    CHECK(longer.hit == 8);
    Seq single = *admit(a, seq_of(7, 1));
    CHECK(single.hit == 0);
  }

  TEST_CASE("generated tokens fill blocks that later prompts can share") {
    BlockAllocator a(16, 4, kSalt);
    Seq s = *admit(a, seq_of(1, 3), 5);  // 3 prompt tokens, room for 8 positions (2 blocks)
    // Step 1: the prompt. Steps 2..: one token each; tokens[] holds what is in the KV cache.
    a.cache_full_blocks(s.tokens, 3, s.table, &s.chain);
    CHECK(a.cached_blocks() == 0);
    s.tokens.push_back(50);
    a.cache_full_blocks(s.tokens, 4, s.table, &s.chain);
    CHECK(a.cached_blocks() == 1);
    s.tokens.push_back(51);
    a.cache_full_blocks(s.tokens, 5, s.table, &s.chain);
    CHECK(a.cached_blocks() == 1);
    a.release(&s.table);
    Seq next = *admit(a, {1, 2, 3, 50, 51});
    CHECK(next.hit == 4);
  }

  TEST_CASE("shared blocks are reference counted; one sharer's release leaves the other's intact") {
    BlockAllocator a(6, 4, kSalt);
    const std::vector<int> prefix = seq_of(10, 8);
    Seq first = *admit(a, concat(prefix, {1}));
    compute_all(a, first);
    Seq a1 = *admit(a, concat(prefix, {2}), 3);  // 2 shared + 1 own (12 positions)
    Seq a2 = *admit(a, concat(prefix, {3}), 3);
    CHECK(a1.hit == 8);
    CHECK(a2.hit == 8);
    a.release(&first.table);
    CHECK(a.used_blocks() == 4);  // 2 shared + 1 + 1
    CHECK(a.free_blocks() == 2);
    // a2 is cancelled: its own block is free again, the shared ones still belong to a1.
    const std::vector<int> a1_blocks = a1.table;
    a.release(&a2.table);
    CHECK(a.used_blocks() == 3);
    CHECK(a.free_blocks() == 3);
    CHECK(a.evictable_blocks() == 0);
    // Everything that can still be handed out, under pressure, is outside a1's table.
    Seq other = *admit(a, seq_of(500, 12));
    CHECK(a.free_blocks() == 0);
    for (int b : other.table)
      CHECK(std::find(a1_blocks.begin(), a1_blocks.end(), b) == a1_blocks.end());
    CHECK_FALSE(admit(a, seq_of(600, 1)).has_value());
    // a1 ends: its shared blocks become evictable (cached), its own block free.
    a.release(&a1.table);
    CHECK(a.evictable_blocks() == 2);
    CHECK(a.free_blocks() == 3);
  }

  TEST_CASE(
      "cached blocks are evicted least recently used first, and only when free ones ran out") {
    BlockAllocator a(6, 4, kSalt);
    // Three one-block prefixes X, Y, Z, cached and released in that order: LRU order X, Y, Z.
    const std::vector<std::vector<int>> px = {seq_of(100, 4), seq_of(200, 4), seq_of(300, 4)};
    for (const auto& p : px) {
      Seq s = *admit(a, p);
      compute_all(a, s);
      a.release(&s.table);
    }
    CHECK(a.cached_blocks() == 3);
    CHECK(a.evictable_blocks() == 3);
    CHECK(a.free_blocks() == 6);
    // A prompt of prefix + 1 token: 2 blocks, the first a hit when the prefix is cached. Pinning
    // and releasing it makes it the most recently used.
    auto hit_of = [&](const std::vector<int>& p) {
      std::optional<Seq> s = admit(a, concat(p, {1}));
      REQUIRE(s.has_value());
      a.release(&s->table);
      return s->hit;
    };
    CHECK(hit_of(px[0]) == 4);  // now Y, Z, X
    // Two of the three unregistered free blocks: no eviction while one is left.
    Seq hold = *admit(a, seq_of(900, 8));
    CHECK(a.counters().evicted_blocks == 0);
    CHECK(a.cached_blocks() == 3);
    CHECK(hit_of(px[2]) == 4);  // now Y, X, Z
    // Two more blocks: the last free one, then the least recently used cached one (Y).
    Seq take = *admit(a, seq_of(901, 8));
    CHECK(a.counters().evicted_blocks == 1);
    CHECK(a.cached_blocks() == 2);
    a.release(&hold.table);  // two free blocks again: the lookups below evict nothing
    CHECK(hit_of(px[1]) == 0);
    CHECK(hit_of(px[2]) == 4);  // now X, Z
    CHECK(hit_of(px[0]) == 4);  // now Z, X
    CHECK(a.counters().evicted_blocks == 1);
    // Three blocks: two free, then Z.
    Seq take2 = *admit(a, seq_of(902, 12));
    CHECK(a.counters().evicted_blocks == 2);
    a.release(&take.table);
    CHECK(hit_of(px[2]) == 0);
    CHECK(hit_of(px[0]) == 4);
  }

  TEST_CASE("admission counts hit blocks as present and evictable ones as free, exactly") {
    BlockAllocator a(3, 4, kSalt);
    const std::vector<int> prefix = seq_of(40, 8);
    {
      Seq s = *admit(a, concat(prefix, {1}));
      compute_all(a, s);
      a.release(&s.table);
    }
    CHECK(a.evictable_blocks() == 2);
    CHECK(a.free_blocks() == 3);
    // 12 positions = 3 blocks: 2 hits (evictable, pinned) + the 1 free block. Exactly fits.
    std::optional<Seq> fits = admit(a, concat(prefix, {2}), 3);
    REQUIRE(fits.has_value());
    CHECK(fits->hit == 8);
    CHECK(a.counters().evicted_blocks == 0);
    // The same prefix again while they are held: the hits are not free, one more block is needed
    // and none is left.
    CHECK_FALSE(admit(a, concat(prefix, {3}), 0).has_value());
    a.release(&fits->table);
    // A prompt with no hit needing all 3 blocks: both cached blocks are evicted for it.
    std::optional<Seq> big = admit(a, seq_of(70, 12));
    REQUIRE(big.has_value());
    CHECK(a.counters().evicted_blocks == 2);
    CHECK(a.cached_blocks() == 0);
  }

  TEST_CASE("without use_cache nothing is looked up or counted") {
    BlockAllocator a(8, 4, kSalt);
    Seq s = *admit(a, seq_of(1, 9));
    compute_all(a, s);
    a.release(&s.table);
    std::vector<int> t;
    PrefixChain c;
    const std::optional<int> hit = a.allocate(seq_of(1, 9), 9, false, &t, &c);
    REQUIRE(hit.has_value());
    CHECK(*hit == 0);
    CHECK(a.counters().queried_tokens == 9);  // the first admit only
  }

  TEST_CASE("random admissions, steps and releases against simulated KV contents") {
    const int num_blocks = 40, bs = 4;
    BlockAllocator a(num_blocks, bs, kSalt);
    // content[b]: the token prefix whose KV block b holds (empty: never written).
    std::vector<std::vector<int>> content(num_blocks);
    struct Live {
      Seq s;
      std::vector<int> target;  // the whole token sequence it will compute
      int in_cache = 0;
    };
    std::map<int, Live> live;
    std::mt19937 rng(7);
    // Prompts from 3 families of prefixes so that hits are common.
    auto random_prompt = [&] {
      std::vector<int> p = seq_of(1000 * (1 + int(rng() % 3)), int(rng() % 13));
      const int tail = 1 + int(rng() % 6);
      for (int i = 0; i < tail; ++i) p.push_back(int(rng() % 3));
      return p;
    };
    int next_id = 0, hits = 0, refused = 0;
    for (int step = 0; step < 4000; ++step) {
      CAPTURE(step);
      const int op = int(rng() % 4);
      if (op == 0) {
        std::vector<int> p = random_prompt();
        const int extra = int(rng() % 6);
        const int free_before = a.free_blocks();
        std::optional<Seq> s = admit(a, p, extra);
        if (!s) {
          ++refused;
          REQUIRE(a.free_blocks() == free_before);
          continue;
        }
        REQUIRE(s->hit % bs == 0);
        REQUIRE(s->hit < static_cast<int>(p.size()));
        REQUIRE(static_cast<int>(s->table.size()) ==
                BlockAllocator::blocks_for(static_cast<int>(p.size()) + extra, bs));
        // Every hit block holds exactly this prompt's prefix up to its end.
        for (int i = 0; i < s->hit / bs; ++i) {
          REQUIRE(content[s->table[i]] == std::vector<int>(p.begin(), p.begin() + (i + 1) * bs));
        }
        hits += s->hit > 0 ? 1 : 0;
        Live l{*s, p, s->hit};
        for (int i = 0; i < extra; ++i) l.target.push_back(50 + int(rng() % 2));
        l.s.tokens.clear();
        l.s.tokens.assign(l.target.begin(), l.target.begin() + l.in_cache);
        live.emplace(next_id++, std::move(l));
      } else if (op == 1 && !live.empty()) {
        auto it = std::next(live.begin(), int(rng() % live.size()));
        a.release(&it->second.s.table);
        live.erase(it);
      } else if (!live.empty()) {
        // A step of one sequence: 1..5 more tokens computed into its own blocks.
        auto it = std::next(live.begin(), int(rng() % live.size()));
        Live& l = it->second;
        const int n = std::min(1 + int(rng() % 5), static_cast<int>(l.target.size()) - l.in_cache);
        for (int pos = l.in_cache; pos < l.in_cache + n; ++pos) {
          const int b = l.s.table[pos / bs];
          for (const auto& [id, other] : live) {
            if (id == it->first) continue;
            REQUIRE(std::find(other.s.table.begin(), other.s.table.end(), b) ==
                    other.s.table.end());  // never a write into a shared block
          }
          if (pos % bs == 0) content[b].clear();
          content[b] = std::vector<int>(l.target.begin(), l.target.begin() + pos + 1);
        }
        l.in_cache += n;
        l.s.tokens.assign(l.target.begin(), l.target.begin() + l.in_cache);
        a.cache_full_blocks(l.s.tokens, l.in_cache, l.s.table, &l.s.chain);
      }
      // Counts agree with the live tables.
      std::set<int> held;
      for (const auto& [id, l] : live) held.insert(l.s.table.begin(), l.s.table.end());
      REQUIRE(a.used_blocks() == static_cast<int>(held.size()));
      REQUIRE(a.free_blocks() == num_blocks - a.used_blocks());
      REQUIRE(a.cached_blocks() <= num_blocks);
    }
    CHECK(hits > 100);
    CHECK(refused > 10);
    CHECK(a.counters().evicted_blocks > 10);
  }
}

// The scheduler side (batch_scheduler.cpp) through LocalServing: a prompt whose prefix is cached
// starts its prefill after the cached blocks, on the same block ids, and the owner's gauges carry
// the counters that `health` and `stats` report.
namespace {

// Records every plan; always predicts token 7 (never EOS).
class RecordingEngine final : public llama2::StepExecutor {
 public:
  std::vector<llama2::StepPlan> plans;
  void execute(const llama2::StepPlan& plan, llama2::StepLogits* out) override {
    plans.push_back(plan);
    out->rows = plan.logit_rows();
    out->width = plan.candidates;
    out->values.assign(static_cast<size_t>(out->rows) * plan.candidates, 0.f);
    out->ids.assign(out->values.size(), 8);
    for (int r = 0; r < out->rows; ++r) {
      out->values[static_cast<size_t>(r) * plan.candidates] = 1.f;
      out->ids[static_cast<size_t>(r) * plan.candidates] = 7;
    }
  }
  int vocab_size() const override { return 512; }
};

struct NoEvents : llama2::RequestEvents {
  void on_finished(const llama2::Finished&, const llama2::Timings&) override {}
};

const llama2::Tokenizer& tiny_tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

// Runs request `id` with `prompt` to the end; returns its first plan entry and block table.
std::pair<llama2::SeqStep, std::vector<int>> run_one(llama2::LocalServing& s, RecordingEngine& e,
                                                     int64_t id, const std::vector<int>& prompt) {
  llama2::SubmitRequest r;
  r.id = id;
  r.prompt = prompt;
  r.params.temperature = 0.f;
  r.params.max_new_tokens = 2;
  REQUIRE_FALSE(s.submit(std::move(r)).has_value());
  const size_t first = e.plans.size();
  while (!s.owner.idle()) s.owner.step();
  REQUIRE(e.plans.size() > first);
  const llama2::StepPlan& p = e.plans[first];
  REQUIRE(p.seqs.size() == 1);
  const llama2::SeqStep q = p.seqs[0];
  return {q, std::vector<int>(p.block_ids.begin() + q.table_begin,
                              p.block_ids.begin() + q.table_begin + q.table_len)};
}

// Simulates the KV cache: every position a step feeds is written into its block's slot, every
// position before a sequence's chunk must hold that sequence's own token there (what a real
// engine would read), and the next token is a function of the sequence and the position.
class KvEngine final : public llama2::StepExecutor {
 public:
  explicit KvEngine(int block_size) : bs_(block_size) {}
  static int token_at(int64_t seq, int pos) { return 3 + static_cast<int>((seq * 13 + pos) % 97); }
  int bad_reads = 0, resumed_after_hit = 0, restarts = 0;
  void execute(const llama2::StepPlan& plan, llama2::StepLogits* out) override {
    out->rows = plan.logit_rows();
    out->width = plan.candidates;
    out->values.assign(static_cast<size_t>(out->rows) * plan.candidates, 0.f);
    out->ids.assign(out->values.size(), 0);
    size_t t = 0;
    int row = 0;
    for (const llama2::SeqStep& s : plan.seqs) {
      std::vector<int>& known = known_[s.seq_id];  // the sequence's tokens by position
      const int32_t* table = plan.block_ids.data() + s.table_begin;
      if (s.pos_begin < static_cast<int>(fed_[s.seq_id])) {  // recomputed after a preemption
        ++restarts;
        resumed_after_hit += s.pos_begin > 0 ? 1 : 0;
      }
      for (int pos = 0; pos < s.pos_begin; ++pos)
        bad_reads += kv_[{table[pos / bs_], pos % bs_}] == known.at(pos) ? 0 : 1;
      for (int i = 0; i < s.n_tokens; ++i, ++t) {
        const int pos = s.pos_begin + i;
        if (static_cast<int>(known.size()) <= pos) known.resize(pos + 1);
        known[pos] = plan.tokens[t];
        kv_[{table[pos / bs_], pos % bs_}] = plan.tokens[t];
      }
      fed_[s.seq_id] = s.pos_begin + s.n_tokens;
      if (s.n_logits == 0) continue;
      out->values[static_cast<size_t>(row) * plan.candidates] = 1.f;
      out->ids[static_cast<size_t>(row) * plan.candidates] =
          token_at(s.seq_id, s.pos_begin + s.n_tokens);
      ++row;
    }
  }
  int vocab_size() const override { return 512; }

 private:
  int bs_;
  std::map<std::pair<int, int>, int> kv_;  // (block, slot) -> token
  std::map<int64_t, std::vector<int>> known_;
  std::map<int64_t, size_t> fed_;
};

struct Outputs : llama2::RequestEvents {
  std::map<int64_t, std::vector<int>> tokens;
  std::map<int64_t, int> cached_tokens;  // Finished::cached_tokens
  void on_finished(const llama2::Finished& f, const llama2::Timings&) override {
    tokens[f.id] = f.tokens;
    cached_tokens[f.id] = f.cached_tokens;
  }
};

}  // namespace

TEST_SUITE("prefix_cache") {
  TEST_CASE("a preempted sequence resumes on its own cached blocks and loses no token") {
    // 10 blocks of 4; three requests of 9 prompt tokens (a shared first block) and 11 new ones
    // need 5 blocks each: the newest is preempted, and its full blocks, registered, are found
    // again when it resumes (its recomputation starts after them).
    KvEngine engine(4);
    Outputs events;
    llama2::ModelConfig config;
    config.vocab_size = 512;
    config.eos_token_id = 2;
    config.max_position_embeddings = 256;
    llama2::SchedulerOptions opts{4, 64};
    opts.prefix_caching = true;
    llama2::LocalServing s(engine, tiny_tokenizer(), config, 10, 4, opts, events);
    for (int64_t id = 1; id <= 3; ++id) {
      llama2::SubmitRequest r;
      r.id = id;
      r.prompt = concat({1, 200, 201, 202}, seq_of(static_cast<int>(id) * 50, 5));
      r.params.temperature = 0.f;
      r.params.max_new_tokens = 11;
      REQUIRE_FALSE(s.submit(std::move(r)).has_value());
    }
    while (!s.owner.idle()) s.owner.step();
    CHECK(s.scheduler.preemptions() > 0);
    CHECK(engine.restarts > 0);
    CHECK(engine.resumed_after_hit > 0);
    CHECK(engine.bad_reads == 0);
    for (int64_t id = 1; id <= 3; ++id) {
      std::vector<int> want;
      for (int pos = 9; pos < 20; ++pos) want.push_back(KvEngine::token_at(id, pos));
      CHECK(events.tokens.at(id) == want);
    }
    CHECK(s.blocks.used_blocks() == 0);
    // A resumption is not a prompt lookup: the queries count each prompt once.
    CHECK(s.admission.gauges().prefix_queried_tokens == 27);
    CHECK(s.admission.gauges().preemptions == s.scheduler.preemptions());
  }

  TEST_CASE("the scheduler prefills only what follows the cached prefix") {
    for (const bool caching : {true, false}) {
      CAPTURE(caching);
      RecordingEngine engine;
      Outputs events;
      llama2::ModelConfig config;
      config.vocab_size = 512;
      config.eos_token_id = 2;
      config.max_position_embeddings = 256;
      llama2::SchedulerOptions opts{4, 64};
      opts.prefix_caching = caching;
      llama2::LocalServing s(engine, tiny_tokenizer(), config, 16, 4, opts, events);
      const std::vector<int> prefix = seq_of(20, 9);  // 2 full blocks + 1 token
      const auto [a, a_table] = run_one(s, engine, 1, concat(prefix, {3, 4}));
      CHECK(a.pos_begin == 0);
      CHECK(a.n_tokens == 11);
      const auto [b, b_table] = run_one(s, engine, 2, concat(prefix, {5}));
      CHECK(b.pos_begin == (caching ? 8 : 0));
      CHECK(b.n_tokens == (caching ? 2 : 10));
      if (caching) CHECK(std::equal(a_table.begin(), a_table.begin() + 2, b_table.begin()));
      const llama2::Gauges g = s.admission.gauges();
      CHECK(g.prefix_queried_tokens == (caching ? 21 : 0));
      CHECK(g.prefix_hit_tokens == (caching ? 8 : 0));
      // Each request's own hit reaches its Finished (HTTP's usage cached_tokens).
      CHECK(events.cached_tokens.at(1) == 0);
      CHECK(events.cached_tokens.at(2) == (caching ? 8 : 0));
      // A's first two blocks at least (A's KV holds 12 tokens at its end: a third full block).
      CHECK((g.kv_blocks_cached >= 2) == caching);
      CHECK(g.kv_blocks_used == 0);
    }
  }
}
