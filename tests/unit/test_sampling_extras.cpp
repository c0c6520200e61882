// vLLM's sampling extensions (issue 35, point 4): logit_bias, stop_token_ids, min_tokens, min_p,
// include_stop_str_in_output and skip_special_tokens. Their parsing and range errors, the min_p
// cut in the Sampler, the stop matcher keeping the stop string, and the scheduler's per-row
// VocabAdjust (biases and min_tokens' masks, one per row) and stop-id ends.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "common/step_plan.h"
#include "coordinator/requests/request.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/stop_matcher.h"
#include "coordinator/text/tokenizer.h"
#include "sampler_test_util.h"

namespace {

using llama2::SamplingParams;
using nlohmann::json;

constexpr int kEos = 2;
constexpr int kVocab = 512;

llama2::ModelConfig config() {
  llama2::ModelConfig c;
  c.vocab_size = kVocab;
  c.eos_token_id = kEos;
  c.max_position_embeddings = 4096;
  return c;
}

// The error of a request with `extra` keys ("" when it parses).
std::string request_error(const json& extra) {
  json obj = {{"prompt_tokens", {1, 5, 6}}};
  obj.update(extra);
  const llama2::ParsedRequest r = llama2::parse_request_fields(obj, SamplingParams{}, config(), {});
  return r.ok() ? "" : r.error_message;
}

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

struct Events final : llama2::SchedulerEvents {
  std::vector<llama2::TokenEvent> tokens;
  std::vector<llama2::Finished> finished;
  void on_token(const llama2::TokenEvent& ev) override { tokens.push_back(ev); }
  void on_finished(llama2::Finished&& done) override { finished.push_back(std::move(done)); }
};

// One greedy candidate per row: `tokens[r]` is row r's best.
llama2::StepLogits best_of(const std::vector<int>& tokens) {
  llama2::StepLogits l;
  l.rows = static_cast<int>(tokens.size());
  l.width = 1;
  for (int t : tokens) {
    l.values.push_back(1.0f);
    l.ids.push_back(t);
  }
  return l;
}

llama2::SubmitRequest greedy_request(int64_t id, const SamplingParams& extra) {
  llama2::SubmitRequest r;
  r.id = id;
  r.prompt = {1, 10, 11};
  r.params = extra;
  r.params.temperature = 0;
  return r;
}

bool allowed(const llama2::StepPlan& plan, const llama2::RowAdjust& a, int id) {
  if (a.mask_begin < 0) return true;
  return (plan.mask_words[static_cast<size_t>(a.mask_begin + id / 32)] >> (id % 32)) & 1u;
}

}  // namespace

TEST_SUITE("sampling_extras") {
  TEST_CASE("the new keys parse in requests and round-trip through sampling_to_json") {
    const json extra = {{"logit_bias", {{"7", 5}, {"300", -100}}},
                        {"stop_token_ids", {9, 13}},
                        {"min_tokens", 3},
                        {"min_p", 0.25},
                        {"include_stop_str_in_output", true},
                        {"skip_special_tokens", false}};
    json obj = {{"prompt_tokens", {1, 5}}};
    obj.update(extra);
    const llama2::ParsedRequest r =
        llama2::parse_request_fields(obj, SamplingParams{}, config(), {});
    REQUIRE(r.ok());
    const SamplingParams& p = r.params;
    using Bias = std::vector<std::pair<int32_t, float>>;
    CHECK(p.logit_bias == Bias{{7, 5.0f}, {300, -100.0f}});  // ascending ids
    CHECK(p.stop_token_ids == std::vector<int32_t>{9, 13});
    CHECK(p.min_tokens == 3);
    CHECK(p.min_p == 0.25f);
    CHECK(p.include_stop_str_in_output);
    CHECK_FALSE(p.skip_special_tokens);
    const SamplingParams back =
        llama2::sampling_from_json(llama2::sampling_to_json(p), SamplingParams{});
    CHECK(back.logit_bias == p.logit_bias);
    CHECK(back.stop_token_ids == p.stop_token_ids);
    CHECK(back.min_tokens == 3);
    CHECK(back.min_p == 0.25f);
    CHECK(back.include_stop_str_in_output);
    CHECK_FALSE(back.skip_special_tokens);
    // Defaults: nothing adjusted, special pieces skipped.
    CHECK(SamplingParams{}.skip_special_tokens);
  }

  TEST_CASE("bad values are refused naming the parameter and the allowed range") {
    CHECK(request_error({{"logit_bias", {{"7", 100.5}}}}) ==
          "logit_bias values must be in [-100, 100] (got 100.5 for token 7)");
    CHECK(request_error({{"logit_bias", {{"7", -101}}}}) ==
          "logit_bias values must be in [-100, 100] (got -101 for token 7)");
    CHECK(request_error({{"logit_bias", {{"512", 1}}}}) ==
          "logit_bias key 512 is not a token id in [0, 512)");
    CHECK(request_error({{"logit_bias", {{"abc", 1}}}}) ==
          "\"logit_bias\" keys must be token ids written in decimal (got \"abc\")");
    CHECK(request_error({{"logit_bias", {{"-1", 1}}}}) ==
          "\"logit_bias\" keys must be token ids written in decimal (got \"-1\")");
    CHECK(request_error({{"logit_bias", {{"7", 1}, {"07", 2}}}}) ==
          "\"logit_bias\" names token id 7 twice");
    CHECK(request_error({{"logit_bias", {{"7", "x"}}}}) ==
          "\"logit_bias\"[\"7\"] must be a number in [-100, 100] (got string)");
    CHECK(request_error({{"logit_bias", {1, 2}}}) ==
          "\"logit_bias\" must be an object of token id -> bias (got array)");
    CHECK(request_error({{"stop_token_ids", {3, 512}}}) ==
          "stop_token_ids entry 512 is not a token id in [0, 512)");
    CHECK(request_error({{"stop_token_ids", {-1}}}) ==
          "\"stop_token_ids\" must be an integer in [0, 2147483647] (got -1)");
    CHECK(request_error({{"stop_token_ids", 3}}) ==
          "\"stop_token_ids\" must be an array of token ids (got number)");
    CHECK(request_error({{"min_tokens", -1}}) == "min_tokens must be >= 0 (got -1)");
    CHECK(request_error({{"min_p", 1.5}}) == "min_p must be in [0, 1] (got 1.5)");
    CHECK(request_error({{"min_p", -0.1}}) == "min_p must be in [0, 1] (got -0.1)");
    CHECK(request_error({{"include_stop_str_in_output", 1}}) ==
          "\"include_stop_str_in_output\" must be a boolean (got number)");
    CHECK(request_error({{"skip_special_tokens", "no"}}) ==
          "\"skip_special_tokens\" must be a boolean (got string)");
    CHECK(request_error({{"logit_bias", {{"7", -100}, {"8", 100}}}, {"min_p", 1}}).empty());
  }

  TEST_CASE("min_p drops the tokens below min_p times the top probability, after temperature") {
    // Probabilities at T = 1: 0.5, 0.3, 0.15, 0.05. min_p 0.2 keeps p >= 0.1: the first three.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                       std::log(0.05f)};
    SamplingParams p = llama2::test::sampling(1.0f);
    p.min_p = 0.2f;
    const int n = 20000;
    std::vector<int> counts = llama2::test::histogram(p, logits, n, 7);
    CHECK(counts[3] == 0);
    llama2::test::check_frequencies(counts, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
    // At T = 2 the relative probabilities are the square roots: sqrt(0.05 / 0.5) = 0.32 >= 0.2,
    // so every token stays; min_p 0.5 keeps those >= 0.5: sqrt(0.3/0.5) = 0.77, sqrt(0.3) = 0.55.
    p.temperature = 2.0f;
    counts = llama2::test::histogram(p, logits, 4000, 8);
    CHECK(counts[3] > 0);
    p.min_p = 0.5f;
    counts = llama2::test::histogram(p, logits, 4000, 9);
    CHECK(counts[0] > 0);
    CHECK(counts[1] > 0);
    CHECK(counts[2] > 0);
    CHECK(counts[3] == 0);
    // min_p 1 keeps only the top token (and a group tied with it).
    p.min_p = 1.0f;
    counts = llama2::test::histogram(p, logits, 500, 10);
    CHECK(counts[0] == 500);
    // The candidate path cuts the same way.
    p.min_p = 0.2f;
    p.temperature = 1.0f;
    p.top_k = 3;
    llama2::Sampler s(p, 11);
    // kMaxCandidates entries, the slice's padding (id -1, -inf) after the three real ones.
    std::vector<float> values(llama2::kMaxCandidates, -std::numeric_limits<float>::infinity());
    std::vector<int32_t> ids(llama2::kMaxCandidates, -1);
    values[0] = std::log(0.5f), values[1] = std::log(0.3f), values[2] = std::log(0.01f);
    ids[0] = 40, ids[1] = 41, ids[2] = 42;
    int seen41 = 0;
    for (int i = 0; i < 300; ++i) {
      const int t = s.sample_candidates(values.data(), ids.data(), llama2::kMaxCandidates);
      CHECK(t != 42);
      seen41 += t == 41 ? 1 : 0;
    }
    CHECK(seen41 > 0);
  }

  TEST_CASE("include_stop_str_in_output keeps the matched stop string, also across pieces") {
    llama2::StopMatcher keep({"END", "EN"}, /*keep_stop=*/true);
    CHECK(keep.push("abc E").emit == "abc ");
    const llama2::StopMatcher::Result r = keep.push("ND more");
    CHECK(r.stopped);
    CHECK(r.emit == "END");  // the longest stop string at the match
    llama2::StopMatcher drop({"END"});
    CHECK(drop.push("abc END").emit == "abc ");
  }

  TEST_CASE("skip_special_tokens false shows control pieces in the streamed text") {
    llama2::StreamingDetokenizer skip(tokenizer()), keep(tokenizer(), /*keep_special=*/true);
    CHECK(skip.push(kEos).empty());
    CHECK(keep.push(kEos) == tokenizer().id_to_piece(kEos));
  }

  TEST_CASE("scheduler: logit_bias and min_tokens become one VocabAdjust per row; stop ids end") {
    llama2::BlockAllocator blocks(64, 4);
    llama2::BatchScheduler sched(tokenizer(), config(), blocks, {8, 16});
    SamplingParams a;
    a.max_new_tokens = 10;
    a.logit_bias = {{7, 100.0f}};
    a.stop_token_ids = {9};
    a.min_tokens = 2;
    SamplingParams plain;
    plain.max_new_tokens = 10;
    llama2::SubmitRequest ra = greedy_request(1, a), rb = greedy_request(2, plain);
    REQUIRE(sched.try_admit(ra));
    REQUIRE(sched.try_admit(rb));
    Events ev;
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const llama2::ScheduledStep s = sched.schedule();
      // Only request 1's row (row 0) is adjusted: the bias always, the mask while fewer than
      // min_tokens tokens were generated, with EOS and the stop id masked out.
      REQUIRE(s.plan.adjust.size() == 1);
      const llama2::RowAdjust& adj = s.plan.adjust[0];
      CHECK(adj.row == 0);
      REQUIRE(adj.bias_count == 1);
      CHECK(s.plan.bias_ids[static_cast<size_t>(adj.bias_begin)] == 7);
      CHECK(s.plan.bias_values[static_cast<size_t>(adj.bias_begin)] == 100.0f);
      CHECK((adj.mask_begin >= 0) == (step < 2));
      CHECK(allowed(s.plan, adj, kEos) == (step >= 2));
      CHECK(allowed(s.plan, adj, 9) == (step >= 2));
      CHECK(allowed(s.plan, adj, 7));
      CHECK(allowed(s.plan, adj, kVocab - 1));
      sched.apply(s, best_of({step < 2 ? 7 : 9, 50}), ev);
    }
    // The stop id ends request 1 with finish stop; it is reported but adds no text.
    REQUIRE(ev.finished.size() == 1);
    CHECK(ev.finished[0].id == 1);
    CHECK(ev.finished[0].finish_reason == llama2::FinishReason::kStop);
    CHECK(ev.finished[0].tokens == std::vector<int>{7, 7, 9});
    const auto last = std::find_if(ev.tokens.rbegin(), ev.tokens.rend(),
                                   [](const llama2::TokenEvent& t) { return t.id == 1; });
    REQUIRE(last != ev.tokens.rend());
    CHECK(last->token == 9);
    CHECK(last->text.empty());
    // Request 2 alone: no adjustment pass.
    CHECK(sched.schedule().plan.adjust.empty());
  }
}
