// llama2_reference_test's logprobs check (SamplingParams::logprobs): the log-probability the
// engine reports for a generated token and its top alternatives, against the log-softmax of
// Hugging Face's logits in the fixture. For every checked position p the fixture stores, a
// one-token request on the prompt ids[0, p] reports on the distribution at p. Three ways of
// sampling, which take the engine's two gather paths:
//   - greedy and top-k sampling: the ranks send candidates and slice summaries (run together);
//   - temperature + top-p sampling: the ranks send full rows (run apart, so that the first group's
//     steps are not turned into full-row steps).
// A sampled token's logprob is exact whatever was drawn. Tolerance: a logprob is logit - lse and
// each of the two is off by at most the logit tolerance, hence 2x the logit tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/check.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"
#include "rank/engine.h"

namespace reference {

struct LogprobStats {
  double max_diff = 0;  // max |ours - HF| over chosen tokens and alternatives
  long compared = 0;    // log-probabilities compared
  int failures = 0;     // missing or malformed reports, or diffs over the tolerance
};

inline std::vector<double> hf_log_softmax(const nlohmann::json& row) {
  const std::vector<double> x = row.get<std::vector<double>>();
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - m);
  std::vector<double> out;
  for (double v : x) out.push_back(v - m - std::log(sum));
  return out;
}

// rows: the fixture's logit rows; row_of: position -> row index (the positions it stores).
inline void check_logprobs(llama2::RankEngine& engine, const llama2::Tokenizer& tok,
                           const llama2::ModelConfig& config, llama2::BlockAllocator& blocks,
                           const std::vector<int>& ids, const nlohmann::json& rows,
                           const std::map<int, size_t>& row_of, double tolerance,
                           LogprobStats* stats) {
  const double tol = 2 * tolerance;
  const int top_n = std::min(llama2::kMaxTopLogprobs, config.vocab_size);
  // Every 4th stored position and the last one (CI time), each with one of the three ways.
  std::vector<int> positions;
  for (const auto& stored : row_of) {
    const int pos = stored.first;
    if (pos % 4 == 0 || pos == row_of.rbegin()->first) positions.push_back(pos);
  }
  struct Events final : llama2::RequestEvents {
    std::map<int64_t, llama2::TokenEvent> first;  // request id -> its one token
    void on_token(const llama2::TokenEvent& ev) override { first[ev.id] = ev; }
    void on_finished(const llama2::Finished&, const llama2::Timings&) override {}
  };
  const auto params_for = [&](int way) {
    llama2::SamplingParams p;
    p.max_new_tokens = 1;
    p.ignore_eos = true;
    p.logprobs = true;
    p.top_logprobs = top_n;
    p.seed = 1234;
    if (way == 0) p.temperature = 0;
    if (way == 1) p.top_k = 8;     // candidates, drawn from
    if (way == 2) p.top_p = 0.9f;  // full rows
    return p;
  };
  for (const bool full_rows : {false, true}) {
    Events events;
    llama2::Admission admission(llama2::AdmissionOptions{});
    llama2::BatchScheduler scheduler(tok, config, blocks, {4, 512});
    llama2::StepRunner runner(scheduler, engine);
    llama2::RequestOwner owner(admission, runner, events);
    std::map<int64_t, int> position_of;
    for (size_t i = 0; i < positions.size(); ++i) {
      const int way = static_cast<int>(i % 3);
      if ((way == 2) != full_rows) continue;
      const int64_t id = static_cast<int64_t>(i);
      const std::vector<int> prompt(ids.begin(), ids.begin() + positions[i] + 1);
      LLAMA2_CHECK(!owner.submit({id, prompt, params_for(way), 0}, admission.reserve(0)));
      position_of[id] = positions[i];
    }
    while (!owner.idle()) owner.step();
    for (const auto& [id, pos] : position_of) {
      const auto it = events.first.find(id);
      const std::vector<double> want = hf_log_softmax(rows.at(row_of.at(pos)));
      std::vector<double> sorted = want;
      std::sort(sorted.begin(), sorted.end(), std::greater<double>());
      const auto diff = [&](double ours, double hf) {
        const double d = std::isnan(ours) ? INFINITY : std::fabs(ours - hf);
        stats->max_diff = std::max(stats->max_diff, d);
        ++stats->compared;
        if (!(d <= tol)) ++stats->failures;
      };
      if (it == events.first.end() ||
          it->second.top_logprobs.size() != static_cast<size_t>(top_n)) {
        std::printf("logprobs at position %d: no token or %zu alternatives (want %d)\n", pos,
                    it == events.first.end() ? 0 : it->second.top_logprobs.size(), top_n);
        ++stats->failures;
        continue;
      }
      const llama2::TokenEvent& ev = it->second;
      diff(ev.logprob, want.at(static_cast<size_t>(ev.token)));
      for (int j = 0; j < top_n; ++j) {
        const llama2::TopLogprob& t = ev.top_logprobs[j];
        // The j-th best value (near-equal tokens may swap places at another rounding), and the
        // value of the id reported.
        diff(t.logprob, sorted[j]);
        diff(t.logprob, want.at(static_cast<size_t>(t.token)));
        if (j > 0 && t.logprob > ev.top_logprobs[j - 1].logprob) ++stats->failures;
      }
    }
  }
}

}  // namespace reference
