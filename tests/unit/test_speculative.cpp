// Speculative decoding's host-side parts (docs/speculative.md): --speculative's parsing, the
// n-gram proposer, and the batch scheduler's verify steps fed hand-made logit rows: what a step
// plans (last token + proposals, a logit row each), which tokens apply() emits (the accepted
// prefix and the token after it), the KV rollback (cached reset, blocks past it freed, only
// accepted tokens' blocks registered in the prefix cache), stops and max_new_tokens inside an
// accepted run, the per-request opt-out, --speculative-max-batch and the counters.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/check.h"
#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/speculative_config.h"
#include "common/step_executor.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/ngram_proposer.h"
#include "coordinator/text/tokenizer.h"
#include "scheduler_test_util.h"

namespace {

using llama2::BatchScheduler;
using llama2::BlockAllocator;
using llama2::FinishReason;
using llama2::SamplingParams;
using llama2::ScheduledStep;
using llama2::SpecMethod;
using llama2::SpeculativeConfig;
using llama2::StepLogits;

constexpr int kEos = 2;

const llama2::Tokenizer& tokenizer() {
  return llama2::test::tiny_gqa_tokenizer();
}

llama2::ModelConfig config() {
  return llama2::test::scheduler_model_config(512);
}

SamplingParams greedy(int max_new) {
  return llama2::test::greedy_params(max_new);
}

// Candidate rows naming tokens[r] as row r's best (greedy: one candidate per row).
StepLogits best_of(const std::vector<int>& tokens) {
  StepLogits l;
  l.rows = static_cast<int>(tokens.size());
  l.width = 1;
  for (int t : tokens) {
    l.values.push_back(1.0f);
    l.ids.push_back(t);
  }
  return l;
}

struct Events final : llama2::SchedulerEvents {
  std::vector<llama2::TokenEvent> tokens;
  std::vector<llama2::Finished> finished;
  void on_token(const llama2::TokenEvent& ev) override { tokens.push_back(ev); }
  void on_finished(llama2::Finished&& done) override { finished.push_back(std::move(done)); }
  std::vector<int> ids() const {
    std::vector<int> v;
    for (const auto& t : tokens) v.push_back(t.token);
    return v;
  }
};

llama2::SchedulerOptions spec_options(int k, bool prefix_caching = false) {
  llama2::SchedulerOptions o{8, 64};
  o.speculative = llama2::parse_speculative("ngram:" + std::to_string(k) + ":1:3");
  o.prefix_caching = prefix_caching;
  return o;
}

// A prompt that repeats: 10 11 12 13 14 10 11 12 (the suffix "10 11 12" recurs: prompt lookup
// proposes 13 14 10 ...).
std::vector<int> quoting_prompt() {
  return {10, 11, 12, 13, 14, 10, 11, 12};
}

struct Fixture {
  BlockAllocator blocks;
  BatchScheduler scheduler;
  explicit Fixture(llama2::SchedulerOptions opts, int num_blocks = 64, int block_size = 4)
      : blocks(num_blocks, block_size), scheduler(tokenizer(), config(), blocks, opts) {}
  void admit(int64_t id, std::vector<int> prompt, SamplingParams p) {
    llama2::SubmitRequest r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.params = p;
    REQUIRE(scheduler.try_admit(r));
  }
};

}  // namespace

TEST_SUITE("speculative") {
  TEST_CASE("--speculative: the forms, their defaults and the refusals naming them") {
    SpeculativeConfig c = llama2::parse_speculative("ngram:4");
    CHECK(c.method == SpecMethod::kNgram);
    CHECK(c.k == 4);
    CHECK(c.min_match == 2);
    CHECK(c.max_match == 4);
    c = llama2::parse_speculative("ngram:16:5");
    CHECK(c.min_match == 5);
    CHECK(c.max_match == 5);
    c = llama2::parse_speculative("ngram:1:1:8");
    CHECK(c.k == 1);
    CHECK(c.max_match == 8);
    c = llama2::parse_speculative("draft:/models/a:b:3");
    CHECK(c.method == SpecMethod::kDraft);
    CHECK(c.draft_dir == "/models/a:b");
    CHECK(c.k == 3);
    for (const char* bad : {"ngram:0", "ngram:17", "ngram", "ngram:4:0", "ngram:4:3:2", "ngram:x",
                            "ngram:4:2:4:1", "lookup:4", "draft:4", "draft::4", "", "ngram:-1"}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(llama2::parse_speculative(bad),
                           doctest::Contains("allowed forms: ngram:K[:MIN_MATCH[:MAX_MATCH]] or "
                                             "draft:DIR:K, K in 1..16"),
                           llama2::Error);
    }
    CHECK_THROWS_WITH(llama2::parse_speculative("ngram:17"),
                      doctest::Contains("K must be an integer in 1..16 (got \"17\")"));
  }

  TEST_CASE("the engine holds K more tokens and logit rows per sequence that may speculate") {
    llama2::EngineConfig e;
    e.max_batch = 32;
    e.prefill_chunk = 256;
    CHECK(e.max_logit_rows() == 32);
    e.speculative = llama2::parse_speculative("ngram:4");
    e.speculative.max_batch = 8;
    CHECK(e.max_logit_rows() == 32 + 4 * 8);
    CHECK(e.max_step_tokens() == 32 + 32 + 256);
  }

  TEST_CASE("prompt lookup: the latest earlier match of the longest suffix first") {
    std::vector<int> out;
    // Suffix "1 2" occurs at 0 and 4: the latest (4) gives 7 8 ...; at most k, at most to the end.
    llama2::ngram_propose({1, 2, 3, 4, 1, 2, 7, 8, 9, 1, 2}, 3, 1, 3, &out);
    CHECK(out == std::vector<int>{7, 8, 9});
    // The 3-token suffix "9 1 2" beats the 2-token one when it occurs.
    llama2::ngram_propose({9, 1, 2, 5, 1, 2, 6, 9, 1, 2}, 2, 1, 3, &out);
    CHECK(out == std::vector<int>{5, 1});
    // The continuation may run into the suffix itself: 5 5 5 5 -> 5 (only what exists).
    llama2::ngram_propose({5, 5, 5}, 4, 2, 2, &out);
    CHECK(out == std::vector<int>{5});
    // No match of at least min_match tokens: nothing.
    llama2::ngram_propose({1, 2, 3, 4, 2}, 4, 1, 3, &out);
    CHECK(out == std::vector<int>{3, 4, 2});
    llama2::ngram_propose({1, 2, 3, 4, 2}, 4, 2, 3, &out);
    CHECK(out.empty());
    llama2::ngram_propose({7}, 4, 1, 3, &out);
    CHECK(out.empty());
  }

  TEST_CASE("a verify step: last token + proposals, a row each; the accepted prefix and the next") {
    Fixture f(spec_options(3));
    f.admit(1, quoting_prompt(), greedy(20));
    Events ev;
    ScheduledStep s = f.scheduler.schedule();  // the prompt
    REQUIRE(s.plan.seqs.size() == 1);
    f.scheduler.apply(s, best_of({13}), ev);  // context ... 10 11 12 | 13
    s = f.scheduler.schedule();
    REQUIRE(s.plan.seqs.size() == 1);
    // Suffix "11 12 13" matched at 1: proposals 14 10 11.
    CHECK(s.plan.seqs[0].pos_begin == 8);
    CHECK(s.plan.seqs[0].n_tokens == 4);
    CHECK(s.plan.seqs[0].n_logits == 4);
    CHECK(s.plan.tokens == std::vector<int32_t>{13, 14, 10, 11});
    CHECK(s.plan.seqs[0].table_len == BlockAllocator::blocks_for(12, 4));
    // The target agrees on 14 and 10, then says 99 instead of 11: 14 10 99 emitted, 11 dropped.
    CHECK(f.scheduler.apply(s, best_of({14, 10, 99, 55}), ev) == 3);
    CHECK(ev.ids() == std::vector<int>{13, 14, 10, 99});
    const llama2::SpecCounters& c = f.scheduler.spec_counters();
    CHECK(c.verify_steps == 1);
    CHECK(c.proposed == 3);
    CHECK(c.accepted == 2);
    CHECK(c.emitted == 3);
    // KV holds 8 prompt + 13 14 10 (positions 0..10): 11 tokens, 3 blocks of 4; the 4th block
    // (positions 12..) went back.
    CHECK(f.blocks.used_blocks() == 3);
    // The next step feeds 99 at position 11.
    s = f.scheduler.schedule();
    CHECK(s.plan.seqs[0].pos_begin == 11);
    CHECK(s.plan.tokens.front() == 99);
  }

  TEST_CASE("every proposal accepted: a bonus token from the last row") {
    Fixture f(spec_options(2));
    f.admit(1, quoting_prompt(), greedy(20));
    Events ev;
    f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
    ScheduledStep s = f.scheduler.schedule();
    REQUIRE(s.plan.tokens == std::vector<int32_t>{13, 14, 10});
    CHECK(f.scheduler.apply(s, best_of({14, 10, 77}), ev) == 3);
    CHECK(ev.ids() == std::vector<int>{13, 14, 10, 77});
    CHECK(f.scheduler.spec_counters().accepted == 2);
    s = f.scheduler.schedule();
    CHECK(s.plan.seqs[0].pos_begin == 11);
  }

  TEST_CASE("EOS, a stop id and max_new_tokens inside an accepted run end the sequence there") {
    {
      Fixture f(spec_options(3));
      SamplingParams p = greedy(20);
      p.stop_token_ids = {10};
      f.admit(1, quoting_prompt(), p);
      Events ev;
      f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
      ScheduledStep s = f.scheduler.schedule();
      REQUIRE(s.plan.tokens == std::vector<int32_t>{13, 14, 10, 11});
      f.scheduler.apply(s, best_of({14, 10, 11, 12}), ev);  // 10 is a stop id: 11 never emitted
      REQUIRE(ev.finished.size() == 1);
      CHECK(ev.finished[0].tokens == std::vector<int>{13, 14, 10});
      CHECK(ev.finished[0].finish_reason == FinishReason::kStop);
      CHECK(f.blocks.used_blocks() == 0);
    }
    {
      // max_new_tokens 3: after 1 token the room is 1 proposal (a verify emits up to K + 1).
      Fixture f(spec_options(3));
      f.admit(1, quoting_prompt(), greedy(3));
      Events ev;
      f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
      ScheduledStep s = f.scheduler.schedule();
      REQUIRE(s.plan.tokens == std::vector<int32_t>{13, 14});
      f.scheduler.apply(s, best_of({14, 10}), ev);
      REQUIRE(ev.finished.size() == 1);
      CHECK(ev.finished[0].tokens == std::vector<int>{13, 14, 10});
      CHECK(ev.finished[0].finish_reason == FinishReason::kLength);
    }
    {
      Fixture f(spec_options(3));
      f.admit(1, quoting_prompt(), greedy(20));
      Events ev;
      f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
      f.scheduler.apply(f.scheduler.schedule(), best_of({14, kEos, 11, 12}), ev);
      REQUIRE(ev.finished.size() == 1);
      CHECK(ev.finished[0].tokens == std::vector<int>{13, 14, kEos});
    }
  }

  TEST_CASE("a rejected token never reaches the prefix cache; the accepted ones do") {
    // Block size 4: prompt 8 tokens = 2 blocks. The verify step feeds positions 8..11 (block 2);
    // rejecting at the second proposal keeps positions 8..9 only: block 2 is not full and must not
    // be registered with the rejected tokens in it.
    Fixture f(spec_options(3, /*prefix_caching=*/true));
    f.admit(1, quoting_prompt(), greedy(6));
    Events ev;
    f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
    ScheduledStep s = f.scheduler.schedule();
    REQUIRE(s.plan.tokens == std::vector<int32_t>{13, 14, 10, 11});
    f.scheduler.apply(s, best_of({14, 66, 0, 0}), ev);  // 14 accepted, 66 instead of 10
    CHECK(ev.ids() == std::vector<int>{13, 14, 66});
    const int cached_before = f.blocks.cached_blocks();
    CHECK(cached_before == 2);  // the prompt's two full blocks only
    // A second request whose prompt is prompt + 13 14 10 11 (the rejected continuation) must find
    // only the two prompt blocks.
    std::vector<int> other = quoting_prompt();
    for (int t : {13, 14, 10, 11, 5}) other.push_back(t);
    f.admit(2, other, greedy(1));
    CHECK(f.blocks.counters().hit_tokens == 8);
  }

  TEST_CASE("opt-out per request, constrained rows and --speculative-max-batch turn it off") {
    {
      Fixture f(spec_options(3));
      SamplingParams p = greedy(20);
      p.speculative = false;
      f.admit(1, quoting_prompt(), p);
      Events ev;
      f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
      CHECK(f.scheduler.schedule().plan.tokens == std::vector<int32_t>{13});
    }
    {
      llama2::SchedulerOptions o = spec_options(3);
      o.speculative.max_batch = 1;
      Fixture f(o);
      f.admit(1, quoting_prompt(), greedy(20));
      f.admit(2, quoting_prompt(), greedy(20));
      Events ev;
      f.scheduler.apply(f.scheduler.schedule(), best_of({13, 13}), ev);
      const ScheduledStep s = f.scheduler.schedule();
      CHECK(s.plan.tokens == std::vector<int32_t>{13, 13});  // two running > 1: nobody proposes
    }
  }

  TEST_CASE("min_tokens and logit_bias adjust every verify row as a plain decode would") {
    Fixture f(spec_options(3));
    SamplingParams p = greedy(20);
    p.min_tokens = 3;  // tokens 0..2 may not be EOS: rows of tokens 1 and 2 masked, token 3 not
    p.logit_bias = {{7, 1.5f}};
    f.admit(1, quoting_prompt(), p);
    Events ev;
    f.scheduler.apply(f.scheduler.schedule(), best_of({13}), ev);
    const ScheduledStep s = f.scheduler.schedule();
    REQUIRE(s.plan.seqs[0].n_logits == 4);
    REQUIRE(s.plan.adjust.size() == 4);
    for (int r = 0; r < 4; ++r) {
      CAPTURE(r);
      const llama2::RowAdjust& a = s.plan.adjust[static_cast<size_t>(r)];
      CHECK(a.row == r);
      CHECK(a.bias_count == 1);
      const bool masked = a.mask_begin >= 0;
      CHECK(masked == (r < 2));  // generated 1 + r < 3
      if (masked) {
        const uint32_t word = s.plan.mask_words[static_cast<size_t>(a.mask_begin)];
        CHECK((word & (1u << kEos)) == 0);
      }
    }
  }
}
