// The per-slice log-sum-exp (rank/logits_gather.h): a row's log-softmax assembled from several
// ranks' slice summaries equals the log-softmax computed over the whole row, whatever the split,
// and the target's log-probability comes from the rank that owns it.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/shard_plan.h"
#include "rank/logits_gather.h"

namespace {

// The slices [begin, begin + size) of `splits` as the shard plans of a TP group.
std::vector<llama2::ShardPlan> shards(const std::vector<int>& sizes) {
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

}  // namespace

TEST_SUITE("logsumexp") {
  TEST_CASE("slices combine to the whole row's log-softmax, at every split") {
    const int V = 1000, rows = 5;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-20.f, 20.f);
    std::vector<float> logits(static_cast<size_t>(rows) * V);
    for (float& x : logits) x = dist(rng);
    logits[2 * V + 17] = -std::numeric_limits<float>::infinity();  // contributes nothing
    logits[3 * V + 999] = 60.f;                                    // one dominant logit
    const std::vector<int32_t> targets = {0, 999, 17, 999, 500};
    std::vector<double> want(rows), want_lse(rows);
    for (int r = 0; r < rows; ++r) {
      double m = -INFINITY, sum = 0;
      for (int j = 0; j < V; ++j) m = std::max(m, double(logits[r * V + j]));
      for (int j = 0; j < V; ++j) sum += std::exp(double(logits[r * V + j]) - m);
      want_lse[r] = m + std::log(sum);
      want[r] = logits[r * V + targets[r]] - want_lse[r];
    }
    for (const std::vector<int>& sizes :
         std::vector<std::vector<int>>{{1000}, {500, 500}, {1, 998, 1}, {250, 250, 250, 250}}) {
      CAPTURE(sizes.size());
      const auto plan = shards(sizes);
      // Each rank's summaries [rows, 3] from its columns, back to back in rank order.
      std::vector<float> gathered;
      for (const auto& s : plan) {
        std::vector<float> slice(static_cast<size_t>(rows) * s.vocab_size);
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < s.vocab_size; ++j) {
            slice[r * s.vocab_size + j] = logits[r * V + s.vocab_begin + j];
          }
        }
        std::vector<float> part(static_cast<size_t>(rows) * llama2::kSliceLseFields);
        llama2::slice_logsumexp(slice.data(), rows, s.vocab_size, s.vocab_begin, targets.data(),
                                part.data());
        gathered.insert(gathered.end(), part.begin(), part.end());
      }
      std::vector<double> lse(rows), logprob(rows);
      llama2::combine_logsumexp(gathered.data(), plan, rows, targets.data(), lse.data(),
                                logprob.data());
      for (int r = 0; r < rows; ++r) {
        CAPTURE(r);
        CHECK(lse[r] == doctest::Approx(want_lse[r]).epsilon(1e-6));
        if (std::isinf(want[r])) {
          CHECK(logprob[r] == want[r]);
        } else {
          CHECK(logprob[r] == doctest::Approx(want[r]).epsilon(1e-6));
        }
      }
      CHECK(std::isinf(logprob[2]));  // the target's logit is -inf: log p = -inf, not NaN
    }
  }

  TEST_CASE("no targets: the third field is 0 and only the log-sum-exp is combined") {
    const std::vector<float> row = {1.f, 2.f, 3.f};
    std::vector<float> part(3);
    llama2::slice_logsumexp(row.data(), 1, 3, 10, nullptr, part.data());
    CHECK(part[0] == 3.f);
    CHECK(part[1] == doctest::Approx(1 + std::exp(-1.0) + std::exp(-2.0)));
    CHECK(part[2] == 0.f);
    double lse = 0;
    llama2::combine_logsumexp(part.data(), shards({3}), 1, nullptr, &lse, nullptr);
    CHECK(lse == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  }

  TEST_CASE("a target outside every slice gives NaN, never another token's probability") {
    const std::vector<float> row = {0.f, 0.f};
    std::vector<float> part(3);
    const int32_t target = 7;
    llama2::slice_logsumexp(row.data(), 1, 2, 0, &target, part.data());
    double logprob = 0;
    llama2::combine_logsumexp(part.data(), shards({2}), 1, &target, nullptr, &logprob);
    CHECK(std::isnan(logprob));
  }
}
