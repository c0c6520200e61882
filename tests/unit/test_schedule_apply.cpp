// The batch scheduler's two halves without any engine (coordinator/scheduler/batch_scheduler.h):
// schedule() alone (what a step plans: decode rows first, prompt chunks within the budget, which
// rows want logits, block tables, candidates or full rows), and apply() fed hand-made logit rows
// (sampling, stop reasons, blocks freed). The step log as an observer of StepRunner.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/step_log.h"
#include "coordinator/scheduler/step_runner.h"
#include "coordinator/text/tokenizer.h"
#include "scheduler_test_util.h"

namespace {

using llama2::BatchScheduler;
using llama2::BlockAllocator;
using llama2::FinishReason;
using llama2::SamplingParams;
using llama2::ScheduledStep;
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

llama2::SubmitRequest request(int64_t id, int prompt_len, SamplingParams p) {
  llama2::SubmitRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(10 + i);
  r.params = p;
  return r;
}

// Candidate rows naming `tokens[r]` as row r's best (one candidate per row: greedy).
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
};

struct Fixture {
  BlockAllocator blocks{64, 4};
  BatchScheduler scheduler;
  explicit Fixture(llama2::SchedulerOptions opts = {8, 6})
      : scheduler(tokenizer(), config(), blocks, opts) {}
  void admit(int64_t id, int prompt_len, SamplingParams p) {
    llama2::SubmitRequest r = request(id, prompt_len, p);
    REQUIRE(scheduler.try_admit(r));
  }
};

}  // namespace

TEST_SUITE("schedule_apply") {
  TEST_CASE("an idle scheduler plans nothing") {
    Fixture f;
    CHECK(f.scheduler.schedule().empty());
  }

  TEST_CASE("prompt chunks share the budget in admission order; decode rows come first") {
    Fixture f;  // prefill budget 6 tokens per step, blocks of 4
    f.admit(1, 5, greedy(3));
    f.admit(2, 4, greedy(3));
    ScheduledStep s = f.scheduler.schedule();
    REQUIRE(s.plan.seqs.size() == 2);
    CHECK(s.ids == std::vector<int64_t>{1, 2});
    CHECK(s.plan.seqs[0].n_tokens == 5);
    CHECK(s.plan.seqs[0].n_logits == 1);  // the whole prompt: its last row samples
    CHECK(s.plan.seqs[0].table_len == 2);
    CHECK(s.plan.seqs[1].n_tokens == 1);  // what is left of the budget
    CHECK(s.plan.seqs[1].n_logits == 0);
    CHECK(s.plan.seqs[1].table_len == 1);
    CHECK(s.prefill_seqs == 2);
    CHECK(s.prefill_tokens == 6);
    CHECK(s.decode_rows == 0);
    CHECK(s.plan.candidates == 1);  // greedy: the argmax is enough
    // Planning changes nothing: the same plan again.
    CHECK(f.scheduler.schedule().plan.tokens == s.plan.tokens);

    Events ev;
    CHECK(f.scheduler.apply(s, best_of({40}), ev) == 1);
    REQUIRE(ev.tokens.size() == 1);
    CHECK(ev.tokens[0].id == 1);
    CHECK(ev.tokens[0].token == 40);
    CHECK(ev.tokens[0].index == 0);

    s = f.scheduler.schedule();
    REQUIRE(s.plan.seqs.size() == 2);
    CHECK(s.ids == std::vector<int64_t>{1, 2});  // request 1 decodes first
    CHECK(s.plan.seqs[0].pos_begin == 5);
    CHECK(s.plan.seqs[0].n_tokens == 1);
    CHECK(s.plan.tokens[0] == 40);  // the token sampled last is fed back
    CHECK(s.plan.seqs[1].pos_begin == 1);
    CHECK(s.plan.seqs[1].n_tokens == 3);
    CHECK(s.plan.seqs[1].n_logits == 1);
    CHECK(s.decode_rows == 1);
  }

  TEST_CASE("candidates: top-k sampling asks for kMaxCandidates, penalties for full rows") {
    Fixture f;
    SamplingParams topk = greedy(2);
    topk.temperature = 0.8f;
    topk.top_k = 5;
    f.admit(1, 2, topk);
    CHECK(f.scheduler.schedule().plan.candidates == llama2::kMaxCandidates);
    SamplingParams alternatives = greedy(2);
    alternatives.logprobs = true;
    alternatives.top_logprobs = 12;
    Fixture g;
    g.admit(1, 2, alternatives);
    CHECK(g.scheduler.schedule().plan.candidates == 12);
    SamplingParams penalty = greedy(2);
    penalty.repetition_penalty = 1.2f;
    f.admit(2, 2, penalty);
    CHECK(f.scheduler.schedule().plan.candidates == 0);
    llama2::SchedulerOptions full{8, 6};
    full.full_logits = true;
    Fixture h(full);
    h.admit(1, 2, greedy(2));
    CHECK(h.scheduler.schedule().plan.candidates == 0);
  }

  TEST_CASE("apply: EOS ends with stop, max_new_tokens with length, and the blocks come back") {
    Fixture f;
    f.admit(1, 3, greedy(2));
    f.admit(2, 3, greedy(5));
    Events ev;
    ScheduledStep s = f.scheduler.schedule();
    f.scheduler.apply(s, best_of({50, 51}), ev);
    s = f.scheduler.schedule();
    f.scheduler.apply(s, best_of({52, kEos}), ev);
    REQUIRE(ev.finished.size() == 2);
    CHECK(ev.finished[0].id == 1);
    CHECK(ev.finished[0].finish_reason == FinishReason::kLength);
    CHECK(ev.finished[0].tokens == std::vector<int>{50, 52});
    CHECK(ev.finished[1].id == 2);
    CHECK(ev.finished[1].finish_reason == FinishReason::kStop);
    CHECK(ev.finished[1].tokens == std::vector<int>{51, kEos});
    CHECK(f.scheduler.idle());
    CHECK(f.blocks.used_blocks() == 0);
  }

  TEST_CASE("apply refuses a step planned before the running set changed") {
    Fixture f;
    f.admit(1, 3, greedy(4));
    f.admit(2, 3, greedy(4));
    const ScheduledStep s = f.scheduler.schedule();
    Events ev;
    REQUIRE(f.scheduler.cancel({1, FinishReason::kCancelled}, ev));
    CHECK_THROWS_AS(f.scheduler.apply(s, best_of({50, 51}), ev), llama2::Error);
  }

  TEST_CASE("the step log observes each executed step") {
    struct OneToken final : llama2::StepExecutor {
      void execute(const llama2::StepPlan& plan, StepLogits* out) override {
        *out = best_of(std::vector<int>(static_cast<size_t>(plan.logit_rows()), 60));
      }
      int vocab_size() const override { return 512; }
    } engine;
    const std::string path = "/tmp/llama2_step_log_test." + std::to_string(::getpid());
    {
      std::unique_ptr<llama2::StepLog> log = llama2::StepLog::open(path);
      REQUIRE(log);
      Fixture f;
      llama2::StepRunner runner(f.scheduler, engine, log.get());
      f.admit(1, 5, greedy(2));
      Events ev;
      while (!f.scheduler.idle()) runner.step(ev);
      CHECK(ev.tokens.size() == 2);
    }
    std::ifstream in(path);
    std::string header, first, second, extra;
    std::getline(in, header);
    std::getline(in, first);
    std::getline(in, second);
    CHECK(header == "# decode_rows prefill_seqs prefill_tokens logit_rows ms host_ms");
    CHECK(first.rfind("0 1 5 1 ", 0) == 0);   // the prompt, one logit row
    CHECK(second.rfind("1 0 0 1 ", 0) == 0);  // one decode row
    CHECK_FALSE(std::getline(in, extra));
    std::remove(path.c_str());
  }
}
