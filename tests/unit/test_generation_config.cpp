// generation_config.json as sampling defaults (common/generation_config.h): the published file of
// meta-llama/Llama-2-7b-chat-hf, what is applied and what is not, and every error naming the file
// and the key.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/generation_config.h"
#include "test_util.h"

using llama2::GenerationDefaults;
using llama2::test::contains;
using llama2::test::error_of;
using nlohmann::json;

TEST_SUITE("generation_config") {
  TEST_CASE("Llama-2-7b-chat-hf's file: temperature 0.6 and top_p 0.9, nothing else") {
    const json chat = json::parse(R"({"bos_token_id": 1, "do_sample": true, "eos_token_id": 2,
        "max_length": 4096, "pad_token_id": 0, "temperature": 0.6, "top_p": 0.9,
        "transformers_version": "4.31.0.dev0"})");
    const GenerationDefaults g = llama2::parse_generation_config(chat, "g.json");
    CHECK(g.temperature == 0.6f);
    CHECK(g.top_p == 0.9f);
    CHECK_FALSE(g.top_k.has_value());
    CHECK_FALSE(g.max_new_tokens.has_value());  // max_length is a total length: not applied
    CHECK(g.describe() == "temperature 0.6, top_p 0.9");
    llama2::SamplingParams p;
    p.top_k = 7;
    g.apply_to(&p);
    CHECK(p.temperature == 0.6f);
    CHECK(p.top_p == 0.9f);
    CHECK(p.top_k == 7);  // untouched
    CHECK(p.max_new_tokens == llama2::SamplingParams{}.max_new_tokens);
  }

  TEST_CASE("every sampling key, and an empty file") {
    const GenerationDefaults g = llama2::parse_generation_config(json{{"temperature", 0},
                                                                      {"top_p", 1},
                                                                      {"top_k", 50},
                                                                      {"repetition_penalty", 1.1},
                                                                      {"max_new_tokens", 256},
                                                                      {"min_p", 0.05}},
                                                                 "g.json");
    llama2::SamplingParams p;
    g.apply_to(&p);
    CHECK(p.temperature == 0.0f);
    CHECK(p.top_k == 50);
    CHECK(p.repetition_penalty == 1.1f);
    CHECK(p.max_new_tokens == 256);
    CHECK(g.min_p == 0.05f);  // read, noted, not applied
    CHECK(llama2::parse_generation_config(json{{"do_sample", false}}, "g.json").empty());
    llama2::test::TempDir dir;
    CHECK(llama2::load_generation_config(dir.path).empty());  // no file: no defaults
    CHECK(llama2::load_generation_config(dir.path).source.empty());
  }

  TEST_CASE("bad values name the file and the key") {
    const std::pair<json, const char*> cases[] = {
        {json{{"temperature", -0.1}}, "\"temperature\" must be a number >= 0 (got -0.1)"},
        {json{{"temperature", "hot"}}, "\"temperature\" must be a number >= 0"},
        {json{{"top_p", 0}}, "\"top_p\" must be a number in (0, 1] (got 0)"},
        {json{{"top_k", -1}}, "\"top_k\" must be an integer >= 0 (got -1)"},
        {json{{"top_k", 4.5}}, "\"top_k\" must be an integer >= 0"},
        {json{{"repetition_penalty", 0}}, "\"repetition_penalty\" must be a number > 0"},
        {json{{"max_new_tokens", 0}}, "\"max_new_tokens\" must be an integer >= 1 (got 0)"},
        {json{{"min_p", 2}}, "\"min_p\" must be a number in [0, 1]"},
    };
    for (const auto& c : cases) {
      const json& j = c.first;
      const char* want = c.second;
      CAPTURE(j.dump());
      const std::string msg = error_of([&] { llama2::parse_generation_config(j, "/m/g.json"); });
      CHECK(contains(msg, "/m/g.json: "));
      CHECK(contains(msg, want));
    }
    llama2::test::TempDir dir;
    dir.write("generation_config.json", "{\"temperature\": ");
    const std::string msg = error_of([&] { llama2::load_generation_config(dir.path); });
    CHECK(contains(msg, dir.file("generation_config.json") + ": not valid JSON"));
    CHECK(llama2::parse_generation_config_mode("auto") == llama2::GenerationConfigMode::kAuto);
    CHECK(llama2::parse_generation_config_mode("ignore") == llama2::GenerationConfigMode::kIgnore);
    CHECK(contains(error_of([] { llama2::parse_generation_config_mode("vllm"); }),
                   "--generation-config must be auto or ignore (got 'vllm')"));
  }
}
