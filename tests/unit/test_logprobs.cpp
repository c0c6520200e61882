// Logprobs (SamplingParams::logprobs / top_logprobs): the parameters' validation, and the rank-0
// assembly of a token's log-probability and its alternatives from what a step gathers, checked
// against a direct log-softmax of the same logits. The fake engine below computes known logits and
// hands them to the scheduler the way a TP group of 1, 2 or 3 ranks with uneven vocabulary slices
// would: candidates (local_candidates per rank, merge_candidates) with each rank's slice summary
// (slice_logsumexp, lse_from_slices), or full rows (stitched, lse_from_full_rows). The real
// engine's use of the same functions is checked against Hugging Face by llama2_reference_test.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/sampling_params.h"
#include "common/shard_plan.h"
#include "common/step_executor.h"
#include "coordinator/requests/request.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/logprobs.h"
#include "coordinator/scheduler/step_runner.h"
#include "coordinator/text/tokenizer.h"
#include "rank/logits_gather.h"

namespace {

using llama2::SamplingParams;
using llama2::StepLogits;
using llama2::StepPlan;
using llama2::TopLogprob;

constexpr int kVocab = 512;  // the tiny test models' vocabulary

// Logits of (sequence, position): smooth values plus a few exact ties, so the order of equal
// logits (lower id first) is exercised too.
float logit_of(int64_t seq, int pos, int v) {
  if (v % 97 == 5) return 4.0f;  // ties at a high value: ids 5, 102, 199, ... all 4.0
  return 3.0f * std::sin(0.37f * static_cast<float>(v) + 1.3f * static_cast<float>(seq) +
                         0.71f * static_cast<float>(pos));
}

// The direct log-softmax of a row, in double.
std::vector<double> log_softmax(const std::vector<float>& row) {
  double m = -INFINITY, sum = 0;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  for (float x : row) sum += std::exp(x - m);
  std::vector<double> out;
  for (float x : row) out.push_back(x - m - std::log(sum));
  return out;
}

std::vector<llama2::ShardPlan> shards_of(const std::vector<int>& sizes) {
  std::vector<llama2::ShardPlan> out;
  int begin = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    llama2::ShardPlan s;
    s.tp = static_cast<int>(sizes.size());
    s.rank = static_cast<int>(r);
    s.vocab_begin = begin;
    s.vocab_size = sizes[r];
    begin += sizes[r];
    out.push_back(s);
  }
  return out;
}

// What a TP group returns for `rows` full logit rows [rows, V], as the runners build it.
StepLogits gather_like_ranks(const std::vector<float>& rows_logits, int rows, int candidates,
                             const std::vector<int32_t>& flags,
                             const std::vector<llama2::ShardPlan>& shards) {
  StepLogits out;
  const int V = kVocab;
  if (candidates == 0) {
    std::vector<float> gathered;  // every rank's [rows, vocab_local] block, rank order
    for (const auto& s : shards) {
      for (int r = 0; r < rows; ++r) {
        const float* row = rows_logits.data() + static_cast<int64_t>(r) * V + s.vocab_begin;
        gathered.insert(gathered.end(), row, row + s.vocab_size);
      }
    }
    llama2::stitch_vocab_slices(gathered.data(), shards, rows, V, &out);
    if (std::count(flags.begin(), flags.end(), 1) > 0) llama2::lse_from_full_rows(flags, &out);
    return out;
  }
  std::vector<float> values, lse_parts;
  std::vector<int32_t> ids;
  for (const auto& s : shards) {
    std::vector<float> slice;
    for (int r = 0; r < rows; ++r) {
      const float* row = rows_logits.data() + static_cast<int64_t>(r) * V + s.vocab_begin;
      slice.insert(slice.end(), row, row + s.vocab_size);
    }
    std::vector<float> v(static_cast<size_t>(rows) * candidates);
    std::vector<int32_t> i(v.size());
    llama2::local_candidates(slice.data(), rows, s.vocab_size, s.vocab_begin, candidates, v.data(),
                             i.data());
    values.insert(values.end(), v.begin(), v.end());
    ids.insert(ids.end(), i.begin(), i.end());
    std::vector<float> part(static_cast<size_t>(rows) * llama2::kSliceLseFields);
    llama2::slice_logsumexp(slice.data(), rows, s.vocab_size, s.vocab_begin, nullptr, part.data());
    lse_parts.insert(lse_parts.end(), part.begin(), part.end());
  }
  llama2::merge_candidates(values.data(), ids.data(), static_cast<int>(shards.size()), rows,
                           candidates, &out);
  if (std::count(flags.begin(), flags.end(), 1) > 0) {
    llama2::lse_from_slices(lse_parts.data(), shards, flags, &out);
  }
  return out;
}

// An engine whose logits are logit_of(seq, position of the row's last token), gathered as a TP
// group with vocabulary slices `sizes` would.
class SliceEngine final : public llama2::StepExecutor {
 public:
  explicit SliceEngine(std::vector<int> sizes) : shards_(shards_of(sizes)) {}
  std::vector<StepPlan> plans;

  void execute(const StepPlan& plan, StepLogits* out) override {
    plans.push_back(plan);
    std::vector<float> rows;
    for (const auto& s : plan.seqs) {
      if (!s.n_logits) continue;
      for (int v = 0; v < kVocab; ++v) {
        rows.push_back(logit_of(s.seq_id, s.pos_begin + s.n_tokens - 1, v));
      }
    }
    *out =
        gather_like_ranks(rows, plan.logit_rows(), plan.candidates, plan.logprob_flags(), shards_);
  }
  int vocab_size() const override { return kVocab; }

 private:
  std::vector<llama2::ShardPlan> shards_;
};

struct Collect final : llama2::SchedulerEvents {
  std::vector<llama2::TokenEvent> tokens;
  std::map<int64_t, llama2::Finished> done;
  void on_token(const llama2::TokenEvent& ev) override { tokens.push_back(ev); }
  void on_finished(llama2::Finished&& f) override { done[f.id] = std::move(f); }
};

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

// The expected alternatives: the n largest log-probabilities, equal values by lower id.
std::vector<int> top_ids(const std::vector<double>& lp, int n) {
  std::vector<int> order(lp.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return lp[a] != lp[b] ? lp[a] > lp[b] : a < b; });
  order.resize(static_cast<size_t>(n));
  return order;
}

std::string validation(const SamplingParams& p) {
  return llama2::validate_sampling(p, 5, 4096);
}

}  // namespace

TEST_SUITE("logprobs") {
  TEST_CASE("top_logprobs is validated in one place and names the allowed range") {
    SamplingParams p;
    p.logprobs = true;
    for (int k : {0, 1, 20}) {
      p.top_logprobs = k;
      CHECK(validation(p) == "");
    }
    p.top_logprobs = 21;
    CHECK(validation(p) == "top_logprobs must be in [0, 20] (got 21)");
    p.top_logprobs = -1;
    CHECK(validation(p) == "top_logprobs must be in [0, 20] (got -1)");
    p.logprobs = false;
    p.top_logprobs = 3;
    CHECK(validation(p) ==
          "top_logprobs needs logprobs set to true (got top_logprobs 3 with logprobs false)");
    p.top_logprobs = 0;
    CHECK(validation(p) == "");
  }

  TEST_CASE("logprobs and top_logprobs from JSON: types checked, defaults off, round trip") {
    const SamplingParams d;
    CHECK_FALSE(d.logprobs);
    CHECK(d.top_logprobs == 0);
    const auto p = llama2::sampling_from_json({{"logprobs", true}, {"top_logprobs", 5}}, d);
    CHECK(p.logprobs);
    CHECK(p.top_logprobs == 5);
    const auto back = llama2::sampling_from_json(llama2::sampling_to_json(p), d);
    CHECK(back.logprobs);
    CHECK(back.top_logprobs == 5);
    CHECK_THROWS_WITH(llama2::sampling_from_json({{"logprobs", 1}}, d),
                      "\"logprobs\" must be a boolean (got number)");
    CHECK_THROWS_WITH(llama2::sampling_from_json({{"top_logprobs", "5"}}, d),
                      "\"top_logprobs\" must be an integer (got string)");
    CHECK(llama2::kRequestKeys.count("logprobs") == 1);
    CHECK(llama2::kRequestKeys.count("top_logprobs") == 1);
  }

  TEST_CASE("the slices of 1, 2 and 3 ranks give the direct log-softmax, candidates or full") {
    const int rows = 3, n = 7;
    std::vector<float> logits;
    for (int r = 0; r < rows; ++r) {
      for (int v = 0; v < kVocab; ++v) logits.push_back(logit_of(r, 10 + r, v));
    }
    logits[1 * kVocab + 300] = 25.f;  // one dominant logit in a later slice
    const std::vector<int32_t> flags = {1, 0, 1};
    for (const std::vector<int>& sizes :
         std::vector<std::vector<int>>{{512}, {256, 256}, {100, 300, 112}, {1, 510, 1}}) {
      for (int candidates : {0, 1, n, llama2::kMaxCandidates}) {
        CAPTURE(sizes.size());
        CAPTURE(sizes[0]);
        CAPTURE(candidates);
        const StepLogits got = gather_like_ranks(logits, rows, candidates, flags, shards_of(sizes));
        REQUIRE(got.lse.size() == static_cast<size_t>(rows));
        CHECK(std::isnan(got.lse[1]));  // a row that did not ask
        for (int r : {0, 2}) {
          CAPTURE(r);
          const std::vector<float> row(logits.begin() + r * kVocab,
                                       logits.begin() + (r + 1) * kVocab);
          const std::vector<double> want = log_softmax(row);
          const int top_n = candidates == 1 ? 1 : n;
          const std::vector<int> best = top_ids(want, top_n);
          // The greedy token, and (full rows or candidates) a token further down the ranking.
          for (int token : {best[0], best[top_n - 1]}) {
            float lp = 0;
            std::vector<TopLogprob> top;
            llama2::row_logprobs(got, r, token, top_n, &lp, &top);
            CHECK(lp == doctest::Approx(want[token]).epsilon(1e-6));
            REQUIRE(top.size() == static_cast<size_t>(top_n));
            for (int j = 0; j < top_n; ++j) {
              CHECK(top[j].token == best[j]);
              CHECK(top[j].logprob == doctest::Approx(want[best[j]]).epsilon(1e-6));
            }
            CHECK(lp <= top[0].logprob);
          }
          if (candidates > 0) {
            // A token outside the candidates cannot be reported: the sampler never picks one.
            const int outside = top_ids(want, kVocab).back();
            float lp = 0;
            std::vector<TopLogprob> top;
            CHECK_THROWS_AS(llama2::row_logprobs(got, r, outside, top_n, &lp, &top), llama2::Error);
          }
        }
      }
    }
  }

  TEST_CASE("the scheduler reports logprobs only to requests that ask, exactly, any sampling") {
    for (const std::vector<int>& sizes :
         std::vector<std::vector<int>>{{512}, {256, 256}, {100, 300, 112}}) {
      CAPTURE(sizes.size());
      SliceEngine engine(sizes);
      llama2::ModelConfig config;
      config.vocab_size = kVocab;
      config.eos_token_id = 2;
      llama2::BlockAllocator blocks(64, 16);
      llama2::BatchScheduler scheduler(tokenizer(), config, blocks, {8, 512});
      llama2::StepRunner runner(scheduler, engine);
      // id -> params: greedy with alternatives, greedy without logprobs, top-k sampling with
      // logprobs (candidate rows), top-p sampling and a repetition penalty (full rows).
      std::map<int64_t, SamplingParams> params;
      SamplingParams p;
      p.max_new_tokens = 4;
      p.ignore_eos = true;
      p.temperature = 0;
      p.logprobs = true;
      p.top_logprobs = 5;
      params[1] = p;
      p.logprobs = false;
      p.top_logprobs = 0;
      params[2] = p;
      p.temperature = 0.9f;
      p.top_k = 10;
      p.logprobs = true;
      p.top_logprobs = 20;
      params[3] = p;
      p.top_k = 0;
      p.top_p = 0.8f;
      p.top_logprobs = 0;
      p.repetition_penalty = 1.3f;
      params[4] = p;
      Collect events;
      for (const auto& [id, q] : params) {
        llama2::SubmitRequest req{id, {1, 50, 60, static_cast<int>(id) + 70}, q, 7};
        REQUIRE(scheduler.try_admit(req));
      }
      // Greedy and top-k alone: candidates, enough for 20 alternatives; then with the penalty's
      // full rows.
      while (!scheduler.idle()) runner.step(events);
      for (const StepPlan& plan : engine.plans) {
        for (size_t i = 0; i < plan.seqs.size(); ++i) {
          const auto& s = plan.seqs[i];
          CHECK(s.want_logprobs == (s.n_logits && params[s.seq_id].logprobs ? 1 : 0));
        }
        CHECK(plan.candidates == 0);  // request 4 forces full rows in every step it runs
      }
      REQUIRE(events.tokens.size() == 16);
      for (const auto& ev : events.tokens) {
        CAPTURE(ev.id);
        CAPTURE(ev.index);
        const SamplingParams& q = params.at(ev.id);
        if (!q.logprobs) {
          CHECK(ev.logprob == 0);
          CHECK(ev.top_logprobs.empty());
          continue;
        }
        std::vector<float> row;
        for (int v = 0; v < kVocab; ++v) row.push_back(logit_of(ev.id, 3 + ev.index, v));
        const std::vector<double> want = log_softmax(row);
        CHECK(ev.logprob == doctest::Approx(want[ev.token]).epsilon(1e-6));
        const std::vector<int> best = top_ids(want, q.top_logprobs);
        REQUIRE(ev.top_logprobs.size() == static_cast<size_t>(q.top_logprobs));
        for (int j = 0; j < q.top_logprobs; ++j) {
          CHECK(ev.top_logprobs[j].token == best[j]);
          CHECK(ev.top_logprobs[j].logprob == doctest::Approx(want[best[j]]).epsilon(1e-6));
        }
      }
      for (const auto& [id_, f] : events.done) {
        const auto id = id_;  // CAPTURE's lambda takes a variable, not a structured binding (C++17)
        CAPTURE(id);
        const size_t n = params.at(id).logprobs ? f.tokens.size() : 0;
        CHECK(f.logprobs.size() == n);
        CHECK(f.top_logprobs.size() == n);
      }
    }
  }

  TEST_CASE("without the full-row request, candidates cover top_logprobs; no logprob rows, none") {
    SliceEngine engine({200, 312});
    llama2::ModelConfig config;
    config.vocab_size = kVocab;
    config.eos_token_id = 2;
    llama2::BlockAllocator blocks(64, 16);
    llama2::BatchScheduler scheduler(tokenizer(), config, blocks, {8, 512});
    llama2::StepRunner runner(scheduler, engine);
    SamplingParams p;
    p.max_new_tokens = 2;
    p.ignore_eos = true;
    p.temperature = 0;
    llama2::SubmitRequest plain{1, {1, 50, 60}, p, 7};
    REQUIRE(scheduler.try_admit(plain));
    Collect events;
    while (!scheduler.idle()) runner.step(events);
    for (const StepPlan& plan : engine.plans) {
      CHECK(plan.candidates == 1);  // greedy alone: the argmax path, untouched
      CHECK_FALSE(plan.any_logprobs());
    }
    engine.plans.clear();
    p.logprobs = true;
    p.top_logprobs = 12;
    llama2::SubmitRequest asking{2, {1, 50, 60}, p, 7};
    REQUIRE(scheduler.try_admit(asking));
    while (!scheduler.idle()) runner.step(events);
    for (const StepPlan& plan : engine.plans) {
      CHECK(plan.candidates == 12);
      CHECK(plan.any_logprobs());
    }
    // The greedy token is the most probable one: its logprob is the first alternative's.
    for (const auto& ev : events.tokens) {
      if (ev.id != 2) continue;
      REQUIRE(!ev.top_logprobs.empty());
      CHECK(ev.top_logprobs[0].token == ev.token);
      CHECK(ev.top_logprobs[0].logprob == ev.logprob);
    }
  }

  TEST_CASE("output JSON: per-token arrays and the token event's keys") {
    llama2::Finished f;
    f.tokens = {5, 6};
    f.logprobs = {-0.5f, -1.25f};
    f.top_logprobs = {{{5, -0.5f}, {9, -2.f}}, {{7, -1.f}, {6, -1.25f}}};
    nlohmann::json j;
    llama2::add_logprobs_json(f, &j);
    CHECK(j.dump() == R"({"logprobs":[-0.5,-1.25],"top_logprobs":[[{"logprob":-0.5,"token_id":5},)"
                      R"({"logprob":-2.0,"token_id":9}],[{"logprob":-1.0,"token_id":7},)"
                      R"({"logprob":-1.25,"token_id":6}]]})");
  }
}
