// Seeded sampling that does not depend on the rank count (issue 14, item 6): the rank count changes
// logits in their last bits, so a draw may depend on them only through quantities such a change
// moves by a last bit. The survivors are walked in id order, and the top-k / top-p cuts keep or
// drop a group of near-equal logits whole (Sampler::kTieTolerance). Expected values are worked out
// in the comments; every random test has a fixed seed.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/sampling_params.h"
#include "common/step_plan.h"
#include "coordinator/scheduler/sampler.h"
#include "rank/logits_gather.h"
#include "sampler_test_util.h"

using llama2::Sampler;
using llama2::SamplingParams;
using llama2::test::check_frequencies;
using llama2::test::histogram;
using llama2::test::sampling;

namespace {

constexpr uint64_t kSeed = 4321;  // every histogram draws from this seed

double u01(std::mt19937_64& g) {
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}

}  // namespace

TEST_SUITE("sampling") {
  TEST_CASE("the draw walks the survivors in id order") {
    // probs 0.2, 0.7, 0.1 in id order: u < 0.2 -> id 0, u < 0.9 -> id 1, else id 2, with
    // u = (next 64 bits >> 11) * 2^-53 of mt19937_64(seed). Full logits and candidates given
    // best first must agree.
    const std::vector<float> l = {std::log(0.2f), std::log(0.7f), std::log(0.1f)};
    const std::vector<float> cand_values = {l[1], l[0], l[2]};
    const std::vector<int32_t> cand_ids = {1, 0, 2};
    std::mt19937_64 ref(2024);
    Sampler full(sampling(1.0f), 2024);
    for (int i = 0; i < 300; ++i) {
      const double u = u01(ref);
      const int expected = u < 0.2 ? 0 : u < 0.9 ? 1 : 2;
      std::vector<float> step = l;
      CHECK(full.sample(step, {}) == expected);
    }
    // top-k sampling through candidates: top_k 3 keeps all three, the same mapping.
    Sampler topk(sampling(1.0f, 3), 2024);
    std::mt19937_64 ref2(2024);
    std::vector<float> values(llama2::kMaxCandidates, -INFINITY);
    std::vector<int32_t> ids(llama2::kMaxCandidates, -1);
    for (int j = 0; j < 3; ++j) {
      values[j] = cand_values[j];
      ids[j] = cand_ids[j];
    }
    for (int i = 0; i < 300; ++i) {
      const double u = u01(ref2);
      const int expected = u < 0.2 ? 0 : u < 0.9 ? 1 : 2;
      CHECK(topk.sample_candidates(values.data(), ids.data(), llama2::kMaxCandidates) == expected);
    }
  }

  TEST_CASE("top-k drops a group of near-equal logits that straddles the cut whole") {
    // Largest logit 5: tolerance 5e-5 (1e-5 of max(|5|, |cut value|)). Sorted: 5, 4.0001,
    // 4.00002, 4, 3.99998, 1 (ids 0..5); 4.00002, 4 and 3.99998 are one group.
    const std::vector<float> l = {5.0f, 4.0001f, 4.00002f, 4.0f, 3.99998f, 1.0f};
    const double z2 = std::exp(5.0) + std::exp(4.0001);
    const std::vector<double> two = {std::exp(5.0) / z2, std::exp(4.0001) / z2, 0, 0, 0, 0};
    const int n = 6000;
    // top_k 1 and 2: the next logit is outside the cut value's group: the k best, as HF.
    check_frequencies(histogram(sampling(1.0f, 1), l, n, kSeed), {1, 0, 0, 0, 0, 0}, n);
    check_frequencies(histogram(sampling(1.0f, 2), l, n, kSeed), two, n);
    // top_k 3 and 4: the cut (4.00002, then 4) splits the group: all three go (HF would keep 1
    // or 2 of them, chosen by rounding).
    check_frequencies(histogram(sampling(1.0f, 3), l, n, kSeed), two, n);
    check_frequencies(histogram(sampling(1.0f, 4), l, n, kSeed), two, n);
    // top_k 5: the group lies wholly above the cut: the 5 best, as HF.
    std::vector<double> five;
    double z5 = 0;
    for (int i = 0; i < 5; ++i) z5 += std::exp(static_cast<double>(l[i]));
    for (int i = 0; i < 6; ++i)
      five.push_back(i < 5 ? std::exp(static_cast<double>(l[i])) / z5 : 0);
    check_frequencies(histogram(sampling(1.0f, 5), l, n, kSeed), five, n);
    // Exact ties are such a group too: {5, 4, 4, 4, 1}, top_k 2 keeps only id 0 (HF: ids 0..3).
    check_frequencies(histogram(sampling(1.0f, 2), {5.0f, 4.0f, 4.0f, 4.0f, 1.0f}, 500, kSeed),
                      {1, 0, 0, 0, 0}, 500);
  }

  TEST_CASE("top-k keeps the group that holds the most probable token whole, at most 64") {
    // top_k 1 on 3, 3 + 2e-6, 3 - 2e-6, 0: the group of the cut value 3.000002 straddles the cut
    // and holds the most probable token: ids 0..2 stay (tolerance 3e-5), each ~1/3; id 3 never.
    const int n = 6000;
    const std::vector<float> l = {3.0f, 3.000002f, 2.999998f, 0.0f};
    check_frequencies(histogram(sampling(1.0f, 1), l, n, kSeed), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0}, n);
    // 100 equal logits, top_k 1: the group is capped at the 64 best (ties by id): ids 0..63,
    // which the 64 candidates the ranks send hold.
    const auto capped = histogram(sampling(1.0f, 1), std::vector<float>(100, 0.0f), 12800, kSeed);
    int inside = 0, outside = 0;
    for (int id = 0; id < 100; ++id) (id < 64 ? inside : outside) += capped[id] > 0;
    CHECK(inside == 64);  // 200 expected draws each
    CHECK(outside == 0);
    // top_k 64 = kMaxCandidates reads full logits: no cap.
    CHECK(Sampler::candidates_needed(sampling(1.0f, 64)) == 0);
    const auto uncapped =
        histogram(sampling(1.0f, 64), std::vector<float>(100, 0.0f), 20000, kSeed);
    int drawn = 0;
    for (int c : uncapped) drawn += c > 0;
    CHECK(drawn == 100);
  }

  TEST_CASE("top-p keeps the group of near-equal logits at the cut whole") {
    // p: id 0 0.4996; ids 1..10 0.05 each, logits spread by 1e-7 (a near-tie); id 11 0.0004.
    // top_p 0.6: HF removes ascending cumulative sums <= 0.4: id 11 and 7 of the 0.05s
    // (0.3504), keeping 3 of them chosen by rounding. The cut value is log 0.05 = -3.0, the
    // tolerance 1e-5 * max(|log 0.4996|, 3.0) = 3e-5: the group is all ten, kept. id 11 is 4.8
    // below: removed. Survivors renormalised by 0.9996.
    std::vector<double> p = {0.4996};
    for (int i = 0; i < 10; ++i) p.push_back(0.05);
    p.push_back(0.0004);
    std::vector<float> l;
    for (size_t i = 0; i < p.size(); ++i) {
      l.push_back(static_cast<float>(std::log(p[i]) + (i >= 1 && i <= 10 ? 1e-7 * i : 0)));
    }
    std::vector<double> expected;
    for (size_t i = 0; i < p.size(); ++i) expected.push_back(i == 11 ? 0 : p[i] / 0.9996);
    const int n = 12000;
    check_frequencies(histogram(sampling(1.0f, 0, 0.6f), l, n, kSeed), expected, n);
    // Four exactly equal logits, top_p 0.5 (HF keeps two of them, by its sort): all four.
    check_frequencies(histogram(sampling(1.0f, 0, 0.5f), {0.0f, 0.0f, 0.0f, 0.0f}, n, kSeed),
                      {0.25, 0.25, 0.25, 0.25}, n);
    // Distinct logits: HF's rule exactly (0.5, 0.3, 0.15, 0.05 at top_p 0.8 keep 0.5 and 0.3).
    const std::vector<float> d = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
    check_frequencies(histogram(sampling(1.0f, 0, 0.8f), d, n, kSeed), {0.625, 0.375, 0, 0}, n);
  }

  TEST_CASE("a last-bit change of any logit never changes the token (random near-tie rows)") {
    // Rows of 300 logits made of clusters of near-equal values (spread 1e-6 of their size, as
    // duplicated LM-head rows or byte-fallback tokens give), some exact ties. For each row, a
    // sampler on the row and one on a copy with one logit moved by one ulp, and one on a copy
    // with every logit moved by -1, 0 or +1 ulp at random (the rank-count noise), with the same
    // seed, must draw the same token for top-p, top-k, top-k + top-p and plain temperature.
    // The descending-probability walk fails this: a moved logit reorders its cluster.
    std::mt19937_64 g(99);
    std::normal_distribution<double> normal(0.0, 1.0);
    const std::vector<SamplingParams> modes = {sampling(1.0f, 0, 0.9f), sampling(0.7f, 0, 0.5f),
                                               sampling(1.0f, 20),      sampling(1.3f, 5, 0.8f),
                                               sampling(1.0f),          sampling(0.6f)};
    int reordered = 0;
    for (int row = 0; row < 400; ++row) {
      CAPTURE(row);
      std::vector<float> l(300);
      const double scale = 1.0 + 4.0 * u01(g);
      for (size_t i = 0; i < l.size();) {
        const double centre = scale * normal(g);
        const size_t size = 1 + g() % 8;
        const bool exact = g() % 4 == 0;
        for (size_t j = 0; j < size && i < l.size(); ++j, ++i) {
          l[i] = static_cast<float>(centre * (1 + (exact ? 0 : 1e-6 * normal(g))));
        }
      }
      std::vector<float> one = l, all = l;
      const size_t moved = g() % l.size();
      one[moved] = std::nextafter(one[moved], g() % 2 ? INFINITY : -INFINITY);
      for (float& x : all) {
        const int step = static_cast<int>(g() % 3) - 1;
        if (step != 0) x = std::nextafter(x, step > 0 ? INFINITY : -INFINITY);
      }
      for (size_t i = 0; i + 1 < l.size(); ++i) {
        reordered += (l[i] < l[i + 1]) != (all[i] < all[i + 1]);
      }
      for (size_t m = 0; m < modes.size(); ++m) {
        CAPTURE(m);
        const uint64_t seed = g();
        for (int draw = 0; draw < 5; ++draw) {
          Sampler a(modes[m], seed + draw), b(modes[m], seed + draw), c(modes[m], seed + draw);
          std::vector<float> la = l, lb = one, lc = all;
          const int ta = a.sample(la, {});
          CHECK(b.sample(lb, {}) == ta);
          CHECK(c.sample(lc, {}) == ta);
        }
      }
    }
    CHECK(reordered > 1000);  // the noise does reorder near-equal neighbours
  }

  TEST_CASE("candidates and full logits give the same token on near-tie rows") {
    // The candidate path (the 64 best per row, merged over 1, 2 or 4 vocabulary slices) must
    // draw exactly what the full logits draw, also when groups straddle the k-th value.
    std::mt19937_64 g(5);
    std::normal_distribution<double> normal(0.0, 2.0);
    const int vocab = 300, K = llama2::kMaxCandidates;
    for (int trial = 0; trial < 300; ++trial) {
      CAPTURE(trial);
      std::vector<float> l(vocab);
      for (int i = 0; i < vocab; i += 4) {
        const double centre = normal(g);
        for (int j = i; j < i + 4; ++j) l[j] = static_cast<float>(centre * (1 + 1e-6 * (j - i)));
      }
      if (trial % 10 == 0) std::fill(l.begin(), l.begin() + 80, 9.0f);  // > 64 tied at the top
      const SamplingParams p =
          sampling(trial % 2 ? 0.8f : 1.2f, 1 + trial % 63, trial % 3 ? 1 : 0.7f);
      REQUIRE(Sampler::candidates_needed(p) == K);
      const int ranks = 1 << (trial % 3);
      std::vector<float> values(static_cast<size_t>(ranks) * K);
      std::vector<int32_t> ids(values.size());
      const int slice = vocab / ranks;
      for (int r = 0; r < ranks; ++r) {
        llama2::local_candidates(l.data() + r * slice, 1, slice, r * slice, K,
                                 values.data() + r * K, ids.data() + r * K);
      }
      llama2::StepLogits merged;
      llama2::merge_candidates(values.data(), ids.data(), ranks, 1, K, &merged);
      for (int draw = 0; draw < 4; ++draw) {
        Sampler full(p, 77 + draw), cand(p, 77 + draw);
        std::vector<float> copy = l;
        CHECK(full.sample(copy, {}) ==
              cand.sample_candidates(merged.values.data(), merged.ids.data(), K));
      }
    }
  }
}
