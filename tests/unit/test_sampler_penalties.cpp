// OpenAI's presence and frequency penalties (SamplingParams::presence_penalty / frequency_penalty):
// applied to the logits of the tokens this request generated so far, not of its prompt. Expected
// token sequences are worked out by hand in the comments.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/requests/request.h"
#include "coordinator/scheduler/sampler.h"
#include "sampler_test_util.h"

using llama2::Sampler;
using llama2::SamplingParams;
using llama2::test::sampling;

namespace {

SamplingParams penalised(float temperature, float presence, float frequency) {
  SamplingParams p = sampling(temperature);
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  return p;
}

// `steps` greedy/seeded draws from the same fresh logits each step, with `context` as the prompt.
std::vector<int> run(Sampler& s, const std::vector<float>& logits, int steps,
                     std::vector<int> context = {}) {
  std::vector<int> out;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> l = logits;
    const int id = s.sample(l, context);
    context.push_back(id);
    out.push_back(id);
  }
  return out;
}

}  // namespace

TEST_SUITE("sampling") {
  TEST_CASE("frequency penalty: each repeat lowers the logit once more") {
    // logits {5, 4.5, 0}, frequency 1: 5 > 4.5 -> 0; then 4 < 4.5 -> 1; then 4 > 3.5 -> 0;
    // then 3 < 3.5 -> 1; then 3 > 2.5 -> 0.
    Sampler s(penalised(0.0f, 0.0f, 1.0f), 1);
    CHECK(run(s, {5.0f, 4.5f, 0.0f}, 5) == std::vector<int>{0, 1, 0, 1, 0});
  }

  TEST_CASE("presence penalty: a token pays once, however often it came") {
    // logits {5, 4.5, 4.2}, presence 0.6: 0; then 4.4 < 4.5 -> 1; then {4.4, 3.9, 4.2} -> 0; and
    // 0 again (its penalty does not grow); 2 is never reached.
    Sampler s(penalised(0.0f, 0.6f, 0.0f), 1);
    CHECK(run(s, {5.0f, 4.5f, 4.2f}, 5) == std::vector<int>{0, 1, 0, 0, 0});
  }

  TEST_CASE("negative penalties favour repeats; both penalties add up") {
    // {5, 5.5}: 1 first, then 5.5 + 1 > 5 for ever.
    Sampler favour(penalised(0.0f, 0.0f, -1.0f), 1);
    CHECK(run(favour, {5.0f, 5.5f}, 4) == std::vector<int>{1, 1, 1, 1});
    // presence 0.3 + frequency 0.3 on {5, 4.5}: 0; then 5 - 0.6 = 4.4 < 4.5 -> 1; then
    // 4.4 > 4.5 - 0.6 = 3.9 -> 0; then 5 - 0.3 - 0.6 = 4.1 > 3.9 -> 0; then 3.8 < 3.9 -> 1.
    Sampler both(penalised(0.0f, 0.3f, 0.3f), 1);
    CHECK(run(both, {5.0f, 4.5f}, 5) == std::vector<int>{0, 1, 0, 0, 1});
  }

  TEST_CASE("the prompt is not penalised, only generated tokens are") {
    // Token 0 fills the prompt; with presence 2 it would lose to 1 if the prompt counted.
    Sampler s(penalised(0.0f, 2.0f, 2.0f), 1);
    CHECK(run(s, {5.0f, 4.0f}, 1, {0, 0, 0, 0}) == std::vector<int>{0});
  }

  TEST_CASE("penalties change the distribution a seeded draw samples from") {
    // Two equal logits at T = 1: without a penalty each is drawn about half the time; with
    // frequency 2 a token drawn k times more than the other has e^{-2k} of its weight, so the
    // counts over 2000 draws stay within a handful of each other.
    Sampler s(penalised(1.0f, 0.0f, 2.0f), 77);
    const std::vector<int> ids = run(s, {0.0f, 0.0f}, 2000);
    int ones = 0;
    for (int id : ids) ones += id;
    CHECK(std::abs(ones - 1000) <= 10);
  }

  TEST_CASE("penalties need the full logits (candidates_needed 0)") {
    CHECK(Sampler::candidates_needed(penalised(0.0f, 0.0f, 0.0f)) == 1);
    CHECK(Sampler::candidates_needed(penalised(0.0f, 0.5f, 0.0f)) == 0);
    CHECK(Sampler::candidates_needed(penalised(0.0f, 0.0f, -0.5f)) == 0);
  }

  TEST_CASE("penalties are validated in [-2, 2] and read from JSON") {
    using llama2::validate_sampling;
    CHECK(validate_sampling(penalised(1.0f, 2.0f, -2.0f), 3, 1000) == "");
    CHECK(validate_sampling(penalised(1.0f, 2.5f, 0.0f), 3, 1000) ==
          "presence_penalty must be in [-2, 2] (got 2.5)");
    CHECK(validate_sampling(penalised(1.0f, 0.0f, NAN), 3, 1000) ==
          "frequency_penalty must be in [-2, 2] (got nan)");
    const auto p = llama2::sampling_from_json(
        nlohmann::json{{"presence_penalty", 0.5}, {"frequency_penalty", nullptr}},
        SamplingParams{});
    CHECK(p.presence_penalty == 0.5f);
    CHECK(p.frequency_penalty == 0.0f);
    try {
      llama2::sampling_from_json(nlohmann::json{{"frequency_penalty", "high"}}, SamplingParams{});
      FAIL("a string penalty was accepted");
    } catch (const llama2::Error& e) {
      CHECK(std::string(e.what()) == "\"frequency_penalty\" must be a number (got string)");
    }
    const auto back = llama2::sampling_from_json(
        llama2::sampling_to_json(penalised(0.7f, -1.25f, 0.1f)), SamplingParams{});
    CHECK(back.presence_penalty == -1.25f);
    CHECK(back.frequency_penalty == 0.1f);
  }
}

TEST_SUITE("sampling") {
  TEST_CASE("requests (socket protocol, batch lines) carry the penalties") {
    const llama2::ModelConfig config = llama2::preset_config("7b");
    const auto r = llama2::parse_request_fields(
        nlohmann::json{
            {"prompt_tokens", {1, 2, 3}}, {"presence_penalty", 1.5}, {"frequency_penalty", -0.5}},
        SamplingParams{}, config, {});
    REQUIRE(r.ok());
    CHECK(r.params.presence_penalty == 1.5f);
    CHECK(r.params.frequency_penalty == -0.5f);
    const auto bad = llama2::parse_request_fields(
        nlohmann::json{{"prompt_tokens", {1, 2, 3}}, {"presence_penalty", 3}}, SamplingParams{},
        config, {});
    CHECK(bad.error_code == llama2::ErrorCode::kInvalidRequest);
    CHECK(bad.error_message.find("presence_penalty must be in [-2, 2] (got 3)") !=
          std::string::npos);
  }
}
