// Helpers shared by the sampler's unit tests (test_sampler.cpp, test_sampler_ties.cpp).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/sampling_params.h"
#include "coordinator/scheduler/sampler.h"

namespace llama2::test {

inline SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1.0f,
                               float repetition_penalty = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repetition_penalty = repetition_penalty;
  return p;
}

// Token counts over `n` draws (one Sampler seeded with `seed`) from the same logits with an empty
// context.
inline std::vector<int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n,
                                  uint64_t seed) {
  Sampler s(p, seed);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    ++counts[s.sample(l, {})];
  }
  return counts;
}

// The frequency of each bin is within 4.5 standard deviations of `expected` (a probability per
// bin): a correct sampler fails this with probability ~1e-5 per bin, and every test's seed is
// fixed.
inline void check_frequencies(const std::vector<int>& counts, const std::vector<double>& expected,
                              int n) {
  REQUIRE(counts.size() == expected.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    const double sigma = std::sqrt(expected[i] * (1 - expected[i]) / n);
    CAPTURE(i);
    CHECK(std::abs(static_cast<double>(counts[i]) / n - expected[i]) <= 4.5 * sigma + 1e-12);
  }
}

}  // namespace llama2::test
