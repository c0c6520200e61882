// `n` and batched prompts at the HTTP door (issue 35, point 2): what parse_api_request makes of
// them, the limits (400 naming `n` or `prompt`), and the fan-out's bookkeeping (http_samples.h):
// followers wait for their leader's first token, usage counts each prompt once.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "coordinator/http/http_samples.h"
#include "coordinator/http/openai_api.h"

namespace {

using llama2::ApiKind;
using llama2::ApiParse;
using nlohmann::json;

llama2::ApiContext context() {
  llama2::ApiContext c;
  c.served_models = {"tiny"};
  c.config = llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
  return c;
}

ApiParse parse(json body, ApiKind kind = ApiKind::kCompletion) {
  body["model"] = "tiny";
  return llama2::parse_api_request(body.dump(), kind, context());
}

std::string param(const ApiParse& p) {
  return p.error ? p.error->param : "(none)";
}

struct NoFlush final : llama2::SinkFlusher {
  void flush(std::vector<std::shared_ptr<llama2::EventSink>>& touched) override { touched.clear(); }
};

}  // namespace

TEST_CASE("n and batched prompts: parsed per prompt, limits name their param") {
  ApiParse a = parse(
      {{"prompt", {"Hi", json::array({1, 50, 60})}}, {"n", 3}, {"max_tokens", 4}, {"seed", 5}});
  REQUIRE_FALSE(a.error);
  CHECK(a.request.n == 3);
  REQUIRE(a.request.more_prompts.size() == 1);
  CHECK(a.request.request.prompt_text == "Hi");
  CHECK(a.request.more_prompts[0].request.prompt == std::vector<int>{1, 50, 60});
  CHECK(a.request.more_prompts[0].request.params.max_new_tokens == 4);
  CHECK(a.request.more_prompts[0].request.params.seed == 5u);
  a = parse({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"n", 16}}, ApiKind::kChat);
  REQUIRE_FALSE(a.error);
  CHECK(a.request.n == 16);
  CHECK(param(parse({{"prompt", "Hi"}, {"n", 17}})) == "n");
  CHECK(parse({{"prompt", "Hi"}, {"n", 17}}).error->message ==
        "n must be an integer in [1, 16] (got 17)");
  CHECK(param(parse({{"prompt", "Hi"}, {"n", 0}})) == "n");
  CHECK(param(parse({{"prompt", "Hi"}, {"n", "2"}})) == "n");
  CHECK(param(parse({{"prompt", json(std::vector<std::string>(17, "x"))}, {"n", 16}})) ==
        "n");  // 272 > 256
  CHECK(param(parse({{"prompt", json(std::vector<std::string>(65, "x"))}})) == "prompt");
  CHECK(param(parse({{"prompt", {"Hi", json::array({1, 999999})}}})) == "prompt");  // a bad id
  CHECK(param(parse({{"prompt", {"Hi", 5}}})) == "prompt");
  a = parse({{"prompt", {"Hi", "there"}}, {"echo", true}});
  REQUIRE_FALSE(a.error);
  CHECK(a.request.scoring.echo_text == "Hi");
  CHECK(a.request.more_prompts[0].echo_text == "there");
}

TEST_CASE("fan-out: a follower is posted once its leader has a token; usage counts prompts once") {
  llama2::EngineInbox inbox;
  NoFlush flush;
  std::vector<llama2::HttpSample> samples(3);
  for (int i = 0; i < 3; ++i) {
    llama2::HttpSample& s = samples[static_cast<size_t>(i)];
    s.index = i;
    s.leader_at = i < 2 ? 0 : 2;  // prompt 0: choices 0 and 1; prompt 1: choice 2
    s.ex = std::make_shared<llama2::HttpExchange>(1, static_cast<uint64_t>(i), false, false, flush);
    s.pending.emplace();
  }
  llama2::post_ready(samples, inbox);
  CHECK(inbox.take(std::chrono::milliseconds(0)).size() == 2);  // the two leaders
  CHECK_FALSE(samples[1].posted());
  samples[0].ex->on_token(llama2::TokenEvent{});
  llama2::post_ready(samples, inbox);
  CHECK(inbox.take(std::chrono::milliseconds(0)).size() == 1);
  CHECK(samples[1].posted());
  for (auto& s : samples) {
    llama2::HttpExchange::End e;
    e.finished.prompt_tokens = 7 + s.leader_at;
    e.finished.cached_tokens = s.index == 1 ? 4 : 0;
    e.finished.tokens = {1, 2};
    s.end = e;
  }
  CHECK(llama2::all_ended(samples));
  const json u = llama2::samples_usage(samples);
  CHECK(u["prompt_tokens"] == 7 + 9);
  CHECK(u["completion_tokens"] == 6);
}
