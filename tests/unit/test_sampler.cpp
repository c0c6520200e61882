// Sampling (HF `transformers` semantics), parameter validation and JSON, and stop strings.
// Expected values are worked out by hand in the comments; the sampler is only ever the thing
// checked, never the source of an expectation. Every random test uses a fixed seed, so a pass or
// a failure is reproducible; tolerances are >= 4 standard deviations so a correct sampler passes.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/sampling_params.h"
#include "coordinator/scheduler/sampler.h"
#include "coordinator/text/stop_matcher.h"
#include "sampler_test_util.h"

using llama2::Sampler;
using llama2::SamplingParams;
using llama2::StopMatcher;
using llama2::test::check_frequencies;
using llama2::test::histogram;
using llama2::test::sampling;

namespace {

constexpr uint64_t kSeed = 1234;  // every histogram draws from this seed

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

TEST_SUITE("sampling") {
  TEST_CASE("greedy is argmax with ties to the lowest id") {
    Sampler s(sampling(0.0f), 7);
    std::vector<float> a = {0.1f, 2.5f, -1.0f, 2.4f};
    CHECK(s.sample(a, {}) == 1);
    std::vector<float> tie = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
    CHECK(s.sample(tie, {}) == 1);
    std::vector<float> flat = {-2.0f, -2.0f, -2.0f};
    CHECK(s.sample(flat, {}) == 0);
    std::vector<float> masked = {-INFINITY, -INFINITY, -5.0f};
    CHECK(s.sample(masked, {}) == 2);
  }

  TEST_CASE("repetition penalty divides positive, multiplies negative, once per id") {
    // penalty 2, context has id 0 three times and id 1 once:
    //   id 0: 4 > 0 -> 4 / 2 = 2 (once, not 4 / 8); id 1: -2 < 0 -> -2 * 2 = -4;
    //   ids 2, 3 untouched. The argmax moves from id 0 (4) to id 3 (3), also when greedy.
    Sampler s(sampling(0.0f, 0, 1.0f, 2.0f), 1);
    std::vector<float> l = {4.0f, -2.0f, 1.0f, 3.0f};
    CHECK(s.sample(l, {0, 1, 0, 0}) == 3);
    CHECK(l == std::vector<float>{2.0f, -4.0f, 1.0f, 3.0f});

    // A penalty < 1 favours repeats: 1 / 0.5 = 2, -2 * 0.5 = -1.
    Sampler favour(sampling(0.0f, 0, 1.0f, 0.5f), 1);
    std::vector<float> f = {1.0f, -2.0f, 1.5f};
    CHECK(favour.sample(f, {0, 1}) == 0);
    CHECK(f == std::vector<float>{2.0f, -1.0f, 1.5f});

    // Penalty 1 is off.
    Sampler off(sampling(0.0f), 1);
    std::vector<float> o = {4.0f, -2.0f};
    CHECK(off.sample(o, {0, 1}) == 0);
    CHECK(o == std::vector<float>{4.0f, -2.0f});
  }

  TEST_CASE("repetition penalty applies when sampling and checks ids") {
    // top_k 1 keeps one token: 4 / 2 = 2 < 3, so id 1 on every draw.
    Sampler s(sampling(1.0f, 1, 1.0f, 2.0f), 5);
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l = {4.0f, 3.0f};
      CHECK(s.sample(l, {0}) == 1);
    }
    std::vector<float> l = {1.0f, 2.0f};
    CHECK_THROWS_AS(s.sample(l, {2}), llama2::Error);
    CHECK_THROWS_AS(s.sample(l, {-1}), llama2::Error);
  }

  TEST_CASE("bad logits are reported, not sampled") {
    Sampler s(sampling(1.0f), 1);
    std::vector<float> nan = {0.0f, NAN};
    CHECK_THROWS_WITH_AS(s.sample(nan, {}), "logit of token 1 is NaN; cannot sample",
                         llama2::Error);
    std::vector<float> all_masked = {-INFINITY, -INFINITY};
    CHECK_THROWS_AS(s.sample(all_masked, {}), llama2::Error);
  }

  TEST_CASE("temperature: near zero is greedy, large spreads") {
    // T = 1e-3: p(id 0) / p(id 1) = exp(-0.5 / 1e-3) = exp(-500), i.e. 0 in double.
    const auto cold = histogram(sampling(1e-3f), {1.0f, 1.5f, 0.5f}, 2000, kSeed);
    CHECK(cold[1] == 2000);
    // T = 1e-30 would overflow a float logit / T; the result must still be the argmax.
    const auto colder = histogram(sampling(1e-30f), {1.0f, 2.0f}, 200, kSeed);
    CHECK(colder[1] == 200);

    // logits 0..3. T = 1: p = e^i / (1 + e + e^2 + e^3) = 0.0321, 0.0871, 0.2369, 0.6439.
    // T = 100: p = e^(i/100) / sum = 0.2463, 0.2487, 0.2512, 0.2538.
    const std::vector<float> l = {0.0f, 1.0f, 2.0f, 3.0f};
    const int n = 8000;
    check_frequencies(histogram(sampling(1.0f), l, n, kSeed), {0.0321, 0.0871, 0.2369, 0.6439}, n);
    check_frequencies(histogram(sampling(100.0f), l, n, kSeed), {0.2463, 0.2487, 0.2512, 0.2538},
                      n);
    // T = 0.5 doubles the logits: p = e^(2i) / sum = 0.0021, 0.0158, 0.1171, 0.8650.
    check_frequencies(histogram(sampling(0.5f), l, n, kSeed), {0.0021, 0.0158, 0.1171, 0.8650}, n);
  }

  TEST_CASE("top_k = 1 is greedy, except that ties with the most probable token stay") {
    std::vector<float> l;
    for (int i = 0; i < 50; ++i) l.push_back(std::sin(i * 1.7f) * 3.0f);
    int best = 0;
    for (int i = 1; i < 50; ++i) {
      if (l[i] > l[best]) best = i;
    }
    CHECK(histogram(sampling(1.5f, 1), l, 500, kSeed)[best] == 500);

    // {3, 3, 0}, top_k 1: HF removes logits < the 1st largest (3), so ids 0 and 1 both stay,
    // each with probability 1/2.
    const auto tie = histogram(sampling(1.0f, 1), {3.0f, 3.0f, 0.0f}, 4000, kSeed);
    CHECK(tie[2] == 0);
    check_frequencies(tie, {0.5, 0.5, 0.0}, 4000);
    // {5, 4, 4, 4, 1}, top_k 2: the 2nd largest is 4, tied with the 3rd and 4th. HF keeps ids
    // 0..3; here a group of equal (or near-equal) logits that straddles the cut goes whole unless
    // it holds the most probable token (test_sampler_ties.cpp): only id 0.
    const auto tie4 = histogram(sampling(1.0f, 2), {5.0f, 4.0f, 4.0f, 4.0f, 1.0f}, 500, kSeed);
    CHECK(tie4[0] == 500);
  }

  TEST_CASE("top_k = 3 keeps exactly the three largest, renormalised") {
    // Top 3: id 1 (2.0), id 4 (1.9), id 3 (1.8). Renormalised: e^0, e^-0.1, e^-0.2 over their
    // sum 2.72355 = 0.3672, 0.3322, 0.3006.
    const std::vector<float> l = {0.5f, 2.0f, 1.0f, 1.8f, 1.9f, -1.0f, 0.9f};
    const int n = 5000;
    const auto counts = histogram(sampling(1.0f, 3), l, n, kSeed);
    CHECK(counts[0] + counts[2] + counts[5] + counts[6] == 0);
    CHECK(counts[1] > 0);
    CHECK(counts[3] > 0);
    CHECK(counts[4] > 0);
    check_frequencies(counts, {0, 0.3672, 0, 0.3006, 0.3322, 0, 0}, n);
    // top_k >= vocab changes nothing.
    const auto all = histogram(sampling(1.0f, 100), {0.0f, 0.0f}, 2000, kSeed);
    check_frequencies(all, {0.5, 0.5}, 2000);
  }

  TEST_CASE("top_p follows HF's rule, boundary included") {
    // HF sorts ascending, takes cumulative probabilities and removes every token whose cumulative
    // probability is <= 1 - top_p; the most probable token always stays.
    // probs 0.5, 0.3, 0.15, 0.05 -> ascending 0.05, 0.15, 0.3, 0.5 -> cumulative 0.05, 0.2, 0.5, 1.
    const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
    const int n = 6000;
    // top_p 0.8: remove cumulative <= 0.2, i.e. 0.05 and 0.15 (0.2 <= 0.2: the boundary token
    // goes). Survivors 0.5, 0.3 -> 0.625, 0.375.
    check_frequencies(histogram(sampling(1.0f, 0, 0.8f), l, n, kSeed), {0.625, 0.375, 0, 0}, n);
    check_frequencies(histogram(sampling(1.0f, 0, 0.79f), l, n, kSeed), {0.625, 0.375, 0, 0}, n);
    // top_p 0.81: remove cumulative <= 0.19, only 0.05. Survivors /0.95.
    check_frequencies(histogram(sampling(1.0f, 0, 0.81f), l, n, kSeed),
                      {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
    // top_p 0.5: remove cumulative <= 0.5, everything but the top token.
    CHECK(histogram(sampling(1.0f, 0, 0.5f), l, 500, kSeed)[0] == 500);
    // top_p 0.51: 0.5 > 0.49 keeps id 1 too.
    check_frequencies(histogram(sampling(1.0f, 0, 0.51f), l, n, kSeed), {0.625, 0.375, 0, 0}, n);
    // Tiny top_p: the most probable token always stays.
    CHECK(histogram(sampling(1.0f, 0, 1e-6f), l, 500, kSeed)[0] == 500);
    // top_p 1: off.
    check_frequencies(histogram(sampling(1.0f), l, n, kSeed), {0.5, 0.3, 0.15, 0.05}, n);
    // Positions do not matter: the same distribution shuffled, top_p 0.8 keeps ids 1 and 3.
    const auto shuffled = log_probs({0.15, 0.5, 0.05, 0.3});
    check_frequencies(histogram(sampling(1.0f, 0, 0.8f), shuffled, n, kSeed), {0, 0.625, 0, 0.375},
                      n);
  }

  TEST_CASE("top_p boundary on exactly representable probabilities") {
    // Four equal logits: probabilities are exactly 0.25 and cumulative sums exactly 0.25, 0.5,
    // 0.75, 1. HF's rule removes two tokens at top_p 0.5 and one at 0.75, chosen by its sort;
    // the four are one group of equal logits at the cut, which top-p keeps whole.
    const std::vector<float> flat = {0.0f, 0.0f, 0.0f, 0.0f};
    const int n = 6000;
    check_frequencies(histogram(sampling(1.0f, 0, 0.5f), flat, n, kSeed), {0.25, 0.25, 0.25, 0.25},
                      n);
    check_frequencies(histogram(sampling(1.0f, 0, 0.75f), flat, n, kSeed), {0.25, 0.25, 0.25, 0.25},
                      n);
    // Exactly representable and distinct: 0.5, 0.25, 0.125, 0.125 (logits log2-spaced). top_p
    // 0.75: remove ascending cumulative sums <= 0.25: both 0.125s (one group) go; 0.5, 0.25 stay.
    const std::vector<float> halves = {0.0f, -0.6931472f, -1.3862944f, -1.3862944f};
    check_frequencies(histogram(sampling(1.0f, 0, 0.75f), halves, n, kSeed),
                      {2.0 / 3, 1.0 / 3, 0, 0}, n);
  }

  TEST_CASE("top_k runs before top_p") {
    // probs 0.5, 0.3, 0.15, 0.05. top_k 2 first: 0.625, 0.375. Then top_p 0.6 removes cumulative
    // <= 0.4, i.e. 0.375: only id 0 remains. Without top_k, top_p 0.6 removes 0.05 and 0.2 (<=
    // 0.4) but keeps 0.5: ids 0 and 1.
    const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
    CHECK(histogram(sampling(1.0f, 2, 0.6f), l, 500, kSeed)[0] == 500);
    const int n = 6000;
    check_frequencies(histogram(sampling(1.0f, 0, 0.6f), l, n, kSeed), {0.625, 0.375, 0, 0}, n);
  }

  TEST_CASE("empirical frequencies match the softmax") {
    // T = 0.7 over 5 logits; p_i = exp(l_i / 0.7) / sum, computed here from the definition.
    const std::vector<float> l = {1.0f, 0.0f, -0.5f, 2.0f, 0.3f};
    std::vector<double> p;
    double z = 0;
    for (float x : l) z += std::exp(x / 0.7);
    for (float x : l) p.push_back(std::exp(x / 0.7) / z);
    const int n = 20000;
    const auto counts = histogram(sampling(0.7f), l, n, 99);
    double chi2 = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      const double e = p[i] * n;
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    CHECK(chi2 < 18.47);  // chi-square, 4 degrees of freedom, p = 0.001
    check_frequencies(counts, p, n);
  }

  TEST_CASE("large vocabularies: the walk is in id order, the nucleus reaches past 64 ids") {
    // 1000 logits falling by 0.01 per rank: the 64 most probable hold only ~47% of the mass.
    // The expected token is the first id whose cumulative probability, in id order, exceeds u
    // (u = (next 64 bits >> 11) * 2^-53). Both id orders: most probable first and last.
    for (const bool ascending_ids : {false, true}) {
      CAPTURE(ascending_ids);
      const int vocab = 1000;
      std::vector<float> l(vocab);
      for (int r = 0; r < vocab; ++r) l[ascending_ids ? vocab - 1 - r : r] = -0.01f * r;
      std::vector<double> p(vocab);  // by id
      double z = 0;
      for (int id = 0; id < vocab; ++id) z += p[id] = std::exp(static_cast<double>(l[id]));
      std::mt19937_64 ref(77);
      Sampler s(sampling(1.0f), 77);
      int beyond_head = 0;
      for (int i = 0; i < 300; ++i) {
        const double u = static_cast<double>(ref() >> 11) * 0x1.0p-53;
        int id = 0;
        for (double c = p[0] / z; id + 1 < vocab && u >= c; c += p[++id] / z) {
        }
        beyond_head += (ascending_ids ? vocab - 1 - id : id) >= 64;
        std::vector<float> step = l;
        CHECK(s.sample(step, {}) == id);
      }
      CHECK(beyond_head > 100);
    }

    // 1000 equal logits, top_p 0.5: HF keeps 500 of them by its sort; they are one group of
    // equal logits at the cut, kept whole: every id is drawn (20 expected draws each:
    // P(some id never drawn) ~ 1000 e^-20).
    const auto counts =
        histogram(sampling(1.0f, 0, 0.5f), std::vector<float>(1000, 0.0f), 20000, kSeed);
    int drawn = 0;
    for (int id = 0; id < 1000; ++id) drawn += counts[id] > 0;
    CHECK(drawn == 1000);

    // ids 0..63 at logit 0 (weight 1), ids 64..999 at -3 (weight e^-3 = 0.049787): Z = 64 +
    // 936 * 0.049787 = 110.601. top_p 0.57: remove cumulative <= 0.43. The 936 low ids sum to
    // 46.601 / 110.601 = 0.4213 (removed); adding one weight-1 id gives 0.4304 (kept).
    std::vector<float> two_level(1000, -3.0f);
    for (int id = 0; id < 64; ++id) two_level[id] = 0.0f;
    const auto nucleus = histogram(sampling(1.0f, 0, 0.57f), two_level, 6400, kSeed);
    int inside = 0, outside = 0;
    for (int id = 0; id < 1000; ++id) (id < 64 ? inside : outside) += nucleus[id] > 0;
    CHECK(outside == 0);
    CHECK(inside == 64);
  }

  TEST_CASE("same seed, same sequence; another seed, another sequence") {
    const auto run = [](uint64_t seed) {
      Sampler s(sampling(0.9f, 40, 0.95f, 1.1f), seed);
      std::vector<int> context = {3, 1, 4};
      std::vector<int> out;
      for (int step = 0; step < 200; ++step) {
        std::vector<float> l(64);
        for (int i = 0; i < 64; ++i) l[i] = 2.0f * std::sin(0.7f * i + 0.3f * step);
        const int id = s.sample(l, context);
        context.push_back(id);
        out.push_back(id);
      }
      return out;
    };
    const auto a = run(42);
    CHECK(a == run(42));
    CHECK(a != run(43));
  }
}

TEST_SUITE("sampling") {
  TEST_CASE("validation names the parameter, the value and the range") {
    using llama2::validate_sampling;
    CHECK(validate_sampling(SamplingParams{}, 30, 4096) == "");
    const auto bad = [](auto set) {
      SamplingParams p;
      set(p);
      return validate_sampling(p, 30, 4096);
    };
    CHECK(bad([](SamplingParams& p) { p.temperature = -0.5f; }) ==
          "temperature must be >= 0 (got -0.5)");
    CHECK(bad([](SamplingParams& p) { p.temperature = NAN; }) ==
          "temperature must be a finite number >= 0 (got nan)");
    CHECK(bad([](SamplingParams& p) { p.temperature = INFINITY; }) ==
          "temperature must be a finite number >= 0 (got inf)");
    CHECK(bad([](SamplingParams& p) { p.temperature = 0.0f; }) == "");
    CHECK(bad([](SamplingParams& p) { p.top_p = 1.5f; }) == "top_p must be in (0, 1] (got 1.5)");
    CHECK(bad([](SamplingParams& p) { p.top_p = 0.0f; }) == "top_p must be in (0, 1] (got 0)");
    CHECK(bad([](SamplingParams& p) { p.top_p = NAN; }) == "top_p must be in (0, 1] (got nan)");
    CHECK(bad([](SamplingParams& p) { p.top_k = -3; }) ==
          "top_k must be >= 0 (0, or -1 in a request: off) (got -3)");
    CHECK(bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }) ==
          "repetition_penalty must be > 0 (got 0)");
    CHECK(bad([](SamplingParams& p) { p.repetition_penalty = -INFINITY; }) ==
          "repetition_penalty must be a finite number > 0 (got -inf)");
    CHECK(bad([](SamplingParams& p) { p.max_new_tokens = 0; }) ==
          "max_new_tokens must be >= 1 (got 0)");
    CHECK(bad([](SamplingParams& p) {
            p.stop = {"a", ""};
          }) == "stop strings must be non-empty (got \"\" at stop[1])");
    CHECK(bad([](SamplingParams& p) { p.stop = {"\xC3"}; }) ==
          "stop strings must be valid UTF-8 (stop[0] is not)");
    CHECK(bad([](SamplingParams& p) { p.stop = {"\xED\xA0\x80"}; }) != "");  // a surrogate
    CHECK(bad([](SamplingParams& p) { p.stop = {"\xE3\x80\x82"}; }) == "");  // U+3002

    SamplingParams p;
    p.max_new_tokens = 100;
    CHECK(validate_sampling(p, 30, 64) ==
          "prompt (30 tokens) + max_new_tokens (100) = 130 exceeds max_position_embeddings (64)");
    CHECK(validate_sampling(p, 30, 130) == "");  // exactly at the limit is allowed
    CHECK(validate_sampling(p, 0, 4096) == "prompt must have >= 1 token (got 0)");
    p.max_new_tokens = 2147483647;  // the sum must not overflow int
    CHECK(validate_sampling(p, 2, 4096) ==
          "prompt (2 tokens) + max_new_tokens (2147483647) = 2147483649 exceeds "
          "max_position_embeddings (4096)");
  }

  TEST_CASE("sampling_from_json overrides only the keys given") {
    SamplingParams d;
    d.temperature = 0.7f;
    d.seed = 5;
    d.stop = {"###"};
    const auto p = llama2::sampling_from_json(
        {{"top_k", 40}, {"top_p", 0.9}, {"stop", "\n\n"}, {"prompt", "ignored"}}, d);
    CHECK(p.temperature == 0.7f);
    CHECK(p.top_k == 40);
    CHECK(p.top_p == 0.9f);
    CHECK(p.stop == std::vector<std::string>{"\n\n"});
    CHECK(p.seed == std::optional<uint64_t>(5));
    CHECK(p.max_new_tokens == 128);

    const auto q = llama2::sampling_from_json(
        {{"temperature", 0},
         {"repetition_penalty", 1.3},
         {"max_new_tokens", 64.0},  // integral double: fine for an int key
         {"seed", 18446744073709551615ull},
         {"stop", {"a", "b"}},
         {"ignore_eos", true},
         {"top_k", nullptr}},  // null: not given
        d);
    CHECK(q.temperature == 0.0f);
    CHECK(q.repetition_penalty == 1.3f);
    CHECK(q.max_new_tokens == 64);
    CHECK(q.seed == std::optional<uint64_t>(18446744073709551615ull));
    CHECK(q.stop == std::vector<std::string>{"a", "b"});
    CHECK(q.ignore_eos);
    CHECK(q.top_k == 0);
    // Range errors are validate_sampling's: -3 parses.
    CHECK(llama2::sampling_from_json({{"top_k", -3}}, d).top_k == -3);
  }

  TEST_CASE("sampling_from_json names the key and the expected type") {
    using nlohmann::json;
    const SamplingParams d;
    const auto err = [&](const json& j) {
      try {
        llama2::sampling_from_json(j, d);
      } catch (const llama2::Error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK(err({{"top_k", "3"}}) == "\"top_k\" must be an integer (got string)");
    CHECK(err({{"top_k", 3.5}}) == "\"top_k\" must be an integer (got 3.5)");
    CHECK(err({{"max_new_tokens", 1e10}}) ==
          "\"max_new_tokens\" must be an integer in [-2147483648, 2147483647] (got 10000000000.0)");
    CHECK(err({{"temperature", "hot"}}) == "\"temperature\" must be a number (got string)");
    CHECK(err({{"top_p", true}}) == "\"top_p\" must be a number (got boolean)");
    CHECK(err({{"repetition_penalty", json::array()}}) ==
          "\"repetition_penalty\" must be a number (got array)");
    CHECK(err({{"seed", -1}}) == "\"seed\" must be a non-negative integer (got -1)");
    CHECK(err({{"seed", 1.5}}) == "\"seed\" must be an integer (got 1.5)");
    CHECK(err({{"seed", "7"}}) == "\"seed\" must be a non-negative integer (got string)");
    CHECK(err({{"stop", 3}}) == "\"stop\" must be a string or an array of strings (got number)");
    CHECK(err({{"stop", {"a", 1}}}) == "\"stop\"[1] must be a string (got number)");
    CHECK(err({{"ignore_eos", 1}}) == "\"ignore_eos\" must be a boolean (got number)");
    CHECK(err(json::array({1, 2})) == "sampling parameters must be a JSON object (got array)");
  }

  TEST_CASE("sampling_to_json round-trips") {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.95f;
    p.top_k = 50;
    p.repetition_penalty = 1.1f;
    p.max_new_tokens = 17;
    p.stop = {"x", "\xE3\x80\x82"};
    p.ignore_eos = true;
    auto j = llama2::sampling_to_json(p);
    CHECK(j["seed"].is_null());
    CHECK(j["temperature"].dump() == "0.8");  // the float's shortest form, not 0.800000011920929
    p.seed = 12345;
    j = llama2::sampling_to_json(p);
    const auto back = llama2::sampling_from_json(j, SamplingParams{});
    CHECK(back.temperature == p.temperature);
    CHECK(back.top_p == p.top_p);
    CHECK(back.top_k == p.top_k);
    CHECK(back.repetition_penalty == p.repetition_penalty);
    CHECK(back.max_new_tokens == p.max_new_tokens);
    CHECK(back.seed == p.seed);
    CHECK(back.stop == p.stop);
    CHECK(back.ignore_eos == p.ignore_eos);
  }
}

TEST_SUITE("sampling") {
  TEST_CASE("StopMatcher without stop strings passes text through") {
    StopMatcher m({});
    CHECK(m.push("Hello").emit == "Hello");
    CHECK(m.push(", world").emit == ", world");
    CHECK(m.finish() == "");
  }

  TEST_CASE("StopMatcher finds a stop string inside one piece") {
    StopMatcher m({"###"});
    const auto r = m.push("abc###def");
    CHECK(r.emit == "abc");
    CHECK(r.stopped);
    // Later pieces and finish() add nothing.
    const auto after = m.push("more");
    CHECK(after.emit == "");
    CHECK(after.stopped);
    CHECK(m.finish() == "");
  }

  TEST_CASE("StopMatcher finds a stop string spanning pieces") {
    StopMatcher m({"###"});
    auto r = m.push("abc#");
    CHECK(r.emit == "abc");  // "#" might start "###"
    CHECK_FALSE(r.stopped);
    r = m.push("#");
    CHECK(r.emit == "");
    CHECK_FALSE(r.stopped);
    r = m.push("#xyz");
    CHECK(r.emit == "");
    CHECK(r.stopped);

    // Overlap: "aa" is held, then "aaaab" holds "aab" at offset 2.
    StopMatcher o({"aab"});
    CHECK(o.push("aa").emit == "");
    r = o.push("aab");
    CHECK(r.emit == "aa");
    CHECK(r.stopped);
  }

  TEST_CASE("StopMatcher releases a held prefix when it diverges") {
    StopMatcher m({"###"});
    CHECK(m.push("ab#").emit == "ab");
    const auto r = m.push("#c");
    CHECK(r.emit == "##c");
    CHECK_FALSE(r.stopped);
    CHECK(m.push("x#").emit == "x");
    CHECK(m.finish() == "#");  // end of generation: the held "#" was text after all
    CHECK(m.finish() == "");
  }

  TEST_CASE("StopMatcher: the earliest of several stop strings wins") {
    for (const auto& stops :
         {std::vector<std::string>{"END", "STOP"}, std::vector<std::string>{"STOP", "END"}}) {
      StopMatcher m(stops);
      const auto r = m.push("xx STOP yy END");
      CHECK(r.emit == "xx ");
      CHECK(r.stopped);
    }
    // The longest held suffix over all stop strings: "ab" (of "abc") beats "b" (of "bcd").
    StopMatcher m({"bcd", "abc"});
    CHECK(m.push("xab").emit == "x");
    const auto r = m.push("cd");
    CHECK(r.emit == "");
    CHECK(r.stopped);
  }

  TEST_CASE("StopMatcher with UTF-8 stop strings keeps chunks valid UTF-8") {
    const std::string stop = "\xE3\x80\x82\n";  // "。\n"
    StopMatcher m({stop});
    auto r = m.push("\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82");  // "你好。"
    CHECK(r.emit == "\xE4\xBD\xA0\xE5\xA5\xBD");
    CHECK(valid_utf8(r.emit));
    r = m.push("\n\xE4\xB8\x96");  // "\n世"
    CHECK(r.emit == "");
    CHECK(r.stopped);

    StopMatcher d({stop});
    CHECK(d.push("\xE3\x80\x82").emit == "");
    r = d.push("\xE5\x86\x8D");  // "再": the held "。" is released whole
    CHECK(r.emit == "\xE3\x80\x82\xE5\x86\x8D");
    CHECK(valid_utf8(r.emit));

    // "è" (C3 A8) shares its lead byte with "é" (C3 A9) but is not held for a stop "éa".
    StopMatcher e(
        {"\xC3\xA9"
         "a"});
    CHECK(e.push("caf\xC3\xA8").emit == "caf\xC3\xA8");
    r = e.push("x\xC3\xA9");
    CHECK(r.emit == "x");
    CHECK(e.finish() == "\xC3\xA9");
  }
}
