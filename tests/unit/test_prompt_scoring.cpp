// Scoring for evaluations (issue 35, point 3): prompt_logprobs through the batch scheduler (prompt
// rows in order, at most as many logit rows per step as batch slots, no prefix-cache reuse, a
// prompt scored alone with max_new_tokens 0), and the HTTP door's echo / prompt_logprobs fields.
// The expected log-probabilities are computed here from the hand-made rows in double.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/http/prompt_scoring.h"
#include "coordinator/replicas/replica_wire.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"
#include "scheduler_test_util.h"

namespace {

using llama2::ApiKind;
using llama2::BatchScheduler;
using llama2::BlockAllocator;
using llama2::ScheduledStep;
using llama2::StepLogits;
using nlohmann::json;

constexpr int kVocab = 64;

const llama2::Tokenizer& tokenizer() {
  return llama2::test::tiny_gqa_tokenizer();
}

llama2::ModelConfig config() {
  llama2::ModelConfig c;
  c.vocab_size = kVocab;
  c.eos_token_id = 2;
  c.max_position_embeddings = 4096;
  return c;
}

// Token id j's logit at absolute position p: a different order per position.
float logit(int p, int j) {
  return static_cast<float>(std::sin(0.37 * (p + 1) * (j + 3)) * 4.0);
}

double lse_at(int p) {
  double m = -1e30, s = 0;
  for (int j = 0; j < kVocab; ++j) m = std::max(m, static_cast<double>(logit(p, j)));
  for (int j = 0; j < kVocab; ++j) s += std::exp(logit(p, j) - m);
  return m + std::log(s);
}

// The full rows a step of `plan` returns: each sequence's last n_logits positions.
StepLogits full_rows(const ScheduledStep& step) {
  StepLogits l;
  l.width = kVocab;
  for (const llama2::SeqStep& q : step.plan.seqs) {
    for (int p = q.pos_begin + q.n_tokens - q.n_logits; p < q.pos_begin + q.n_tokens; ++p) {
      for (int j = 0; j < kVocab; ++j) l.values.push_back(logit(p, j));
      l.lse.push_back(q.want_logprobs ? lse_at(p) : std::nan(""));
      ++l.rows;
    }
  }
  return l;
}

struct Events final : llama2::SchedulerEvents {
  std::vector<llama2::TokenEvent> tokens;
  std::vector<llama2::Finished> finished;
  void on_token(const llama2::TokenEvent& ev) override { tokens.push_back(ev); }
  void on_finished(llama2::Finished&& done) override { finished.push_back(std::move(done)); }
};

llama2::SubmitRequest scored(int64_t id, int prompt_len, int max_new, int k) {
  llama2::SubmitRequest r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(5 + (i * 7) % 50);
  r.params.temperature = 0;
  r.params.max_new_tokens = max_new;
  r.params.prompt_logprobs = k;
  return r;
}

// Runs the scheduler until idle; the largest number of logit rows any step asked for.
int run(BatchScheduler& s, Events& ev) {
  int most = 0;
  for (int guard = 0; !s.idle() && guard < 100; ++guard) {
    const ScheduledStep step = s.schedule();
    most = std::max(most, step.plan.logit_rows());
    s.apply(step, full_rows(step), ev);
  }
  return most;
}

void check_scored(const llama2::SubmitRequest& r, const llama2::Finished& f, int k) {
  REQUIRE(f.prompt_logprobs.size() == r.prompt.size() - 1);
  for (size_t p = 0; p + 1 < r.prompt.size(); ++p) {
    const llama2::PromptLogprob& lp = f.prompt_logprobs[p];
    const int t = r.prompt[p + 1];
    CAPTURE(p);
    CHECK(lp.token == t);
    CHECK(
        lp.logprob ==
        doctest::Approx(logit(static_cast<int>(p), t) - lse_at(static_cast<int>(p))).epsilon(1e-6));
    int before = 0;
    for (int j = 0; j < kVocab; ++j)
      before += logit(static_cast<int>(p), j) > logit(static_cast<int>(p), t);
    CHECK(lp.rank == before + 1);
    REQUIRE(static_cast<int>(lp.top.size()) == k);
    if (k > 0) CHECK(lp.top[0].logprob >= lp.logprob);
  }
}

}  // namespace

TEST_CASE(
    "prompt_logprobs: every prompt row scored once, in steps of at most max-batch-size rows") {
  BlockAllocator blocks(64, 4);
  llama2::SchedulerOptions opts;
  opts.max_batch_size = 4;
  BatchScheduler s(tokenizer(), config(), blocks, opts);
  llama2::SubmitRequest r = scored(1, 10, 0, 2);
  const llama2::SubmitRequest copy = r;
  REQUIRE(s.try_admit(r));
  const ScheduledStep first = s.schedule();
  CHECK(first.plan.candidates == 0);  // prompt rows are full rows
  CHECK(first.plan.seqs[0].n_tokens == 4);
  CHECK(first.plan.seqs[0].n_logits == 4);
  Events ev;
  s.apply(first, full_rows(first), ev);
  CHECK(run(s, ev) <= 4);
  REQUIRE(ev.finished.size() == 1);
  CHECK(ev.tokens.empty());  // max_new_tokens 0: the prompt alone
  CHECK(ev.finished[0].finish_reason == llama2::FinishReason::kLength);
  check_scored(copy, ev.finished[0], 2);
  CHECK(blocks.free_blocks() == 64);
}

TEST_CASE("prompt_logprobs beside a decoding sequence: one row per free slot, then a token") {
  BlockAllocator blocks(64, 4);
  llama2::SchedulerOptions opts;
  opts.max_batch_size = 2;
  opts.prefix_caching = true;
  BatchScheduler s(tokenizer(), config(), blocks, opts);
  llama2::SubmitRequest plain = scored(1, 12, 30, 0);
  plain.params.prompt_logprobs.reset();
  plain.params.ignore_eos = true;
  llama2::SubmitRequest again = scored(2, 12, 3, 1);  // the same prompt: cached blocks exist
  const llama2::SubmitRequest copy = again;
  REQUIRE(s.try_admit(plain));
  Events ev;
  const ScheduledStep p0 = s.schedule();
  s.apply(p0, full_rows(p0), ev);
  REQUIRE(s.try_admit(again));
  int most = 0, steps = 0;
  for (; !s.idle() && steps < 100; ++steps) {
    const ScheduledStep step = s.schedule();
    most = std::max(most, step.plan.logit_rows());
    for (size_t i = 0; i < step.plan.seqs.size(); ++i) {
      // The scored prompt is computed from its first token, prefix cache or not.
      if (step.ids[i] == 2 && steps == 0) CHECK(step.plan.seqs[i].pos_begin == 0);
    }
    s.apply(step, full_rows(step), ev);
  }
  CHECK(most <= 2);
  REQUIRE(ev.finished.size() == 2);
  const llama2::Finished& f = ev.finished[0].id == 2 ? ev.finished[0] : ev.finished[1];
  CHECK(f.cached_tokens == 0);
  CHECK(f.tokens.size() == 3);
  check_scored(copy, f, 1);
}

TEST_CASE("prompt_logprobs and max_new_tokens 0: ranges") {
  llama2::SamplingParams p;
  p.max_new_tokens = 0;
  CHECK(llama2::validate_sampling(p, 4, 100) == "max_new_tokens must be >= 1 (got 0)");
  p.prompt_logprobs = 0;
  CHECK(llama2::validate_sampling(p, 4, 100).empty());
  p.prompt_logprobs = 21;
  CHECK(llama2::validate_sampling(p, 4, 100).rfind("prompt_logprobs must be in [0, 20]", 0) == 0);
  const json round = llama2::sampling_to_json(p);
  CHECK(llama2::sampling_from_json(round, {}).prompt_logprobs == 21);
}

namespace {
llama2::ApiContext context() {
  llama2::ApiContext c;
  c.served_models = {"tiny"};
  c.config = llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
  return c;
}
llama2::ApiParse parse(json body, ApiKind kind = ApiKind::kCompletion) {
  body["model"] = "tiny";
  return llama2::parse_api_request(body.dump(), kind, context());
}
}  // namespace

TEST_CASE("HTTP echo and prompt_logprobs: what the engine is asked, and the 400s") {
  llama2::ApiParse a =
      parse({{"prompt", {1, 50, 60}}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}});
  REQUIRE_FALSE(a.error);
  CHECK(a.request.scoring.echo);
  CHECK(a.request.scoring.echo_top == 1);
  CHECK(a.request.request.params.prompt_logprobs == 1);
  a = parse({{"prompt", "Hi"}, {"echo", true}, {"max_tokens", 0}});
  REQUIRE_FALSE(a.error);
  CHECK(a.request.scoring.echo_text == "Hi");
  CHECK(a.request.request.params.prompt_logprobs == 0);  // the prompt alone, unscored in the answer
  a = parse({{"prompt", "Hi"}, {"prompt_logprobs", 3}, {"echo", true}, {"logprobs", 5}});
  CHECK(a.request.request.params.prompt_logprobs == 5);
  const auto param = [](const llama2::ApiParse& p) { return p.error ? p.error->param : "(none)"; };
  CHECK(param(parse({{"prompt", "Hi"}, {"prompt_logprobs", 1000}})) == "prompt_logprobs");
  CHECK(parse({{"prompt", "Hi"}, {"prompt_logprobs", 1000}}).error->message ==
        "prompt_logprobs must be in [0, 20] (got 1000)");
  CHECK(param(parse({{"prompt", "Hi"}, {"prompt_logprobs", "2"}})) == "prompt_logprobs");
  CHECK(param(parse({{"prompt", "Hi"}, {"max_tokens", 0}})) == "max_tokens");
  CHECK(param(parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"echo", true}},
                    ApiKind::kChat)) == "echo");
  CHECK(param(parse({{"prompt", "Hi"}, {"echo", true}, {"logprobs", 1}, {"stream", true}})) ==
        "echo");
  a = parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"prompt_logprobs", 0}},
            ApiKind::kChat);
  REQUIRE_FALSE(a.error);
  CHECK(a.request.request.params.prompt_logprobs == 0);
}

TEST_CASE("HTTP echo logprobs and vLLM prompt_logprobs shapes") {
  llama2::Finished f;
  f.prompt_logprobs = {{50, -1.5f, 3, {{7, -0.5f}, {8, -1.0f}}},
                       {60, -0.25f, 1, {{60, -0.25f}, {9, -2.0f}}}};
  const std::vector<int> prompt = {1, 50, 60};
  const json generated =
      llama2::api_logprobs(ApiKind::kCompletion, {{70, -0.75f, {{70, -0.75f}}}}, tokenizer());
  const json e = llama2::api_echo_logprobs(prompt, f.prompt_logprobs, 1, generated, tokenizer());
  REQUIRE(e["tokens"].size() == 4);
  CHECK(e["token_logprobs"][0].is_null());
  CHECK(e["top_logprobs"][0].is_null());
  CHECK(e["token_logprobs"][1] == -1.5f);
  CHECK(e["token_logprobs"][3] == -0.75f);
  CHECK(e["top_logprobs"][1].size() == 1);  // echo_top 1 of the 2 scored
  CHECK(e["tokens"][0] == llama2::api_token_string(tokenizer(), 1));
  const json v = llama2::api_prompt_logprobs(f.prompt_logprobs, 1, tokenizer());
  REQUIRE(v.size() == 3);
  CHECK(v[0].is_null());
  CHECK(v[1].size() == 2);  // the prompt token (rank 3) and the best one
  CHECK(v[1]["50"]["rank"] == 3);
  CHECK(v[1]["7"]["rank"] == 1);
  CHECK(v[2].size() == 1);  // the prompt token is the best one
  CHECK(v[2]["60"]["logprob"] == -0.25f);
}

namespace {
struct FinishedOnly final : llama2::WireVisitor {
  std::vector<llama2::Finished> finished;
  std::vector<llama2::SubmitRequest> submits;
  void on_finished(llama2::Finished&& d) override { finished.push_back(std::move(d)); }
  void on_submit(llama2::SubmitRequest&& r) override { submits.push_back(std::move(r)); }
};
}  // namespace

TEST_CASE("prompt_logprobs cross the replica wire (request and result)") {
  llama2::WireWriter w;
  llama2::SubmitRequest r = scored(7, 3, 0, 4);
  w.submit(r);
  llama2::Finished f;
  f.id = 7;
  f.prompt_logprobs = {{50, -1.5f, 3, {{7, -0.5f}}}, {60, -0.25f, 1, {}}};
  w.finished(f);
  const std::string bytes = w.take();
  FinishedOnly c;
  llama2::read_wire(bytes.data(), bytes.size(), c);
  REQUIRE(c.submits.size() == 1);
  CHECK(c.submits[0].params.prompt_logprobs == 4);
  CHECK(c.submits[0].params.max_new_tokens == 0);
  REQUIRE(c.finished.size() == 1);
  REQUIRE(c.finished[0].prompt_logprobs.size() == 2);
  CHECK(c.finished[0].prompt_logprobs[0].rank == 3);
  CHECK(c.finished[0].prompt_logprobs[0].top[0].token == 7);
  CHECK(c.finished[0].prompt_logprobs[1].logprob == -0.25f);
}

TEST_CASE("prompt_logprobs survive a preemption mid-prompt: each row scored once, in order") {
  BlockAllocator blocks(6, 4);
  llama2::SchedulerOptions opts;
  opts.max_batch_size = 2;  // beside the decoding sequence: one scored row a step
  opts.prefix_caching = true;
  BatchScheduler s(tokenizer(), config(), blocks, opts);
  llama2::SubmitRequest a = scored(1, 4, 14, 0);
  a.params.prompt_logprobs.reset();
  a.params.ignore_eos = true;
  llama2::SubmitRequest b = scored(2, 12, 2, 3);
  const llama2::SubmitRequest copy = b;
  REQUIRE(s.try_admit(a));
  Events ev;
  const ScheduledStep first = s.schedule();
  s.apply(first, full_rows(first), ev);
  REQUIRE(s.try_admit(b));
  CHECK(run(s, ev) <= 2);
  CHECK(s.preemptions() >= 1);
  REQUIRE(ev.finished.size() == 2);
  const llama2::Finished& f = ev.finished[0].id == 2 ? ev.finished[0] : ev.finished[1];
  CHECK(f.tokens.size() == 2);
  check_scored(copy, f, 3);
}
