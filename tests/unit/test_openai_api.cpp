// The HTTP front's bodies without sockets (src/coordinator/http/openai_api.h, http_exchange.h,
// http_front.h's access checks): OpenAI parameters mapped onto the project's request and
// validated by the same code, everything unsupported refused by name with the right status, the
// response and chunk shapes, and the mailbox between the engine and a connection thread.
#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "common/model_config.h"
#include "coordinator/cli/serve_http.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/http_front.h"
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

ApiParse parse(const json& body, ApiKind kind = ApiKind::kChat) {
  return llama2::parse_api_request(body.dump(), kind, context());
}

const json kChat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};

json with(json base, const json& extra) {
  base.update(extra);
  return base;
}

}  // namespace

TEST_SUITE("openai_api") {
  TEST_CASE("chat parameters map onto the project's sampling parameters") {
    const ApiParse p = parse(with(kChat, {{"max_completion_tokens", 7},
                                          {"max_tokens", 99},
                                          {"temperature", 0.5},
                                          {"top_p", 0.9},
                                          {"seed", 3},
                                          {"stop", "END"},
                                          {"presence_penalty", 0.25},
                                          {"frequency_penalty", -0.5},
                                          {"top_k", 4},
                                          {"repetition_penalty", 1.2},
                                          {"user", "x"},
                                          {"n", 1},
                                          {"stream", true},
                                          {"stream_options", {{"include_usage", true}}}}));
    REQUIRE_FALSE(p.error);
    const llama2::SamplingParams& s = p.request.request.params;
    CHECK(s.max_new_tokens == 7);  // max_completion_tokens wins over max_tokens
    CHECK(s.temperature == doctest::Approx(0.5));
    CHECK(s.top_p == doctest::Approx(0.9));
    CHECK(s.seed == 3u);
    CHECK(s.stop == std::vector<std::string>{"END"});
    CHECK(s.presence_penalty == doctest::Approx(0.25));
    CHECK(s.frequency_penalty == doctest::Approx(-0.5));
    CHECK(s.top_k == 4);
    CHECK(s.repetition_penalty == doctest::Approx(1.2));
    CHECK(p.request.stream);
    CHECK(p.request.include_usage);
    CHECK(p.request.request.is_chat);
  }

  TEST_CASE("completion prompts: text, token ids, and arrays of either") {
    const json base = {{"model", "tiny"}, {"max_tokens", 4}};
    CHECK(
        parse(with(base, {{"prompt", "abc"}}), ApiKind::kCompletion).request.request.text_pending);
    const ApiParse ids = parse(with(base, {{"prompt", {1, 5, 9}}}), ApiKind::kCompletion);
    REQUIRE_FALSE(ids.error);
    CHECK(ids.request.request.prompt == std::vector<int>{1, 5, 9});
    CHECK(parse(with(base, {{"prompt", {"abc"}}}), ApiKind::kCompletion)
              .request.request.text_pending);
    // Batched prompts (test_openai_choices): the first here, the others in more_prompts.
    const ApiParse two = parse(with(base, {{"prompt", {"a", "b"}}}), ApiKind::kCompletion);
    REQUIRE_FALSE(two.error);
    CHECK(two.request.more_prompts.size() == 1);
    // Token ids are checked by the project's one rule: inside the vocabulary.
    const ApiParse bad = parse(with(base, {{"prompt", {1, 100000}}}), ApiKind::kCompletion);
    REQUIRE(bad.error);
    CHECK(bad.error->message.find("not a token id in [0, 512)") != std::string::npos);
  }

  TEST_CASE("unsupported parameters are refused by name with 400") {
    const std::pair<json, std::string> cases[] = {
        {{{"tools", {{{"type", "function"}}}}}, "tools"},
        {{{"tool_choice", "auto"}}, "tool_choice"},
        {{{"guided_json", "{not json"}},
         "guided_json"},     // structured output: test_request_constraint
        {{{"n", 17}}, "n"},  // n is read: 1..16 (test_prompt_scoring)
        {{{"bad_words", {"x"}}}, "bad_words"},
        // Read now (test_openai_tolerance): a bias out of range is a 400 naming it.
        {{{"logit_bias", {{"5", 101}}}}, "logit_bias"},
    };
    for (const auto& [extra, param] : cases) {
      const std::string body = extra.dump();  // CAPTURE cannot capture a structured binding (C++17)
      CAPTURE(body);
      const ApiParse p = parse(with(kChat, extra));
      REQUIRE(p.error);
      CHECK(p.error->status == 400);
      CHECK(p.error->param == param);
    }
    // Logprobs: accepted as the socket's keys (validated by the same code), completions' integer.
    CHECK_FALSE(parse(with(kChat, {{"logprobs", true}, {"top_logprobs", 2}})).error);
    CHECK(parse(with(kChat, {{"top_logprobs", 2}})).error->status == 400);  // needs logprobs
    // What is the default anyway is accepted.
    CHECK_FALSE(parse(with(kChat, {{"response_format", {{"type", "text"}}},
                                   {"tools", json::array()},
                                   {"logprobs", false}}))
                    .error);
    const json comp = {{"model", "tiny"}, {"prompt", "x"}};
    // (echo is read: test_prompt_scoring.)
    for (const char* k : {"best_of", "suffix"}) {
      json extra = {{k, std::string(k) == "best_of" ? json(2) : json("s")}};
      const ApiParse p = parse(with(comp, extra), ApiKind::kCompletion);
      REQUIRE(p.error);
      CHECK(p.error->param == k);
    }
    CHECK_FALSE(parse(with(comp, {{"echo", false}, {"best_of", 1}}), ApiKind::kCompletion).error);
  }

  TEST_CASE("an unknown model is 404 model_not_found; bad bodies 400") {
    const ApiParse p = parse(with(kChat, {{"model", "gpt-4"}}));
    REQUIRE(p.error);
    CHECK(p.error->status == 404);
    CHECK(p.error->code == llama2::ErrorCode::kModelNotFound);
    CHECK(llama2::api_error_body(*p.error)["error"]["code"] == "model_not_found");
    for (const std::string body : {"{", "[]", "\"x\"", "{\"model\": 1}"}) {
      const ApiParse b = llama2::parse_api_request(body, ApiKind::kChat, context());
      REQUIRE(b.error);
      CHECK(b.error->status == 400);
    }
    CHECK(llama2::parse_api_request("{\"a\":\"\xff\"}", ApiKind::kChat, context()).error);
  }

  TEST_CASE("range errors come from the project's validation, in the client's key names") {
    const ApiParse zero = parse(with(kChat, {{"max_tokens", 0}}));
    REQUIRE(zero.error);
    CHECK(zero.error->message == "max_tokens must be >= 1 (got 0)");
    const ApiParse top = parse(with(kChat, {{"top_p", 1.5}}));
    REQUIRE(top.error);
    CHECK(top.error->message == "top_p must be in (0, 1] (got 1.5)");
    const ApiParse pen = parse(with(kChat, {{"presence_penalty", 3}}));
    REQUIRE(pen.error);
    CHECK(pen.error->message == "presence_penalty must be in [-2, 2] (got 3)");
    const ApiParse order =
        parse(with(kChat, {{"messages", {{{"role", "assistant"}, {"content", "x"}}}}}));
    REQUIRE(order.error);
    CHECK(order.error->status == 400);
    const ApiParse so = parse(with(kChat, {{"stream_options", {{"include_usage", true}}}}));
    REQUIRE(so.error);
    CHECK(so.error->param == "stream_options");
  }

  TEST_CASE("error codes map to OpenAI statuses and types through one table") {
    using llama2::ErrorCode;
    const auto status = [](ErrorCode c) { return llama2::api_error(c, "m").status; };
    CHECK(status(ErrorCode::kQueueFull) == 429);
    CHECK(status(ErrorCode::kTooManyInFlight) == 429);
    CHECK(status(ErrorCode::kShuttingDown) == 503);
    CHECK(status(ErrorCode::kPromptTooLong) == 400);
    CHECK(status(ErrorCode::kInternal) == 500);
    CHECK(status(ErrorCode::kInvalidApiKey) == 401);
    CHECK(status(ErrorCode::kModelNotFound) == 404);
    CHECK(status(ErrorCode::kBodyTooLarge) == 413);
    CHECK(status(ErrorCode::kStalled) == 503);
    CHECK(std::string(llama2::http_error_class(ErrorCode::kServerBusy).type) == "server_error");
    // Every code has a name that reads back, and a status in the table.
    for (int i = 0; i < llama2::kErrorCodeCount; ++i) {
      const auto c = static_cast<ErrorCode>(i);
      CHECK(llama2::parse_error_code(llama2::to_string(c)) == c);
      CHECK(status(c) >= 400);
    }
    for (int i = 0; i < llama2::kFinishReasonCount; ++i) {
      const auto r = static_cast<llama2::FinishReason>(i);
      CHECK(llama2::parse_finish_reason(llama2::to_string(r)) == r);
    }
    CHECK_FALSE(llama2::parse_error_code("no_such_code"));
    const json body = llama2::api_error_body(llama2::api_error(ErrorCode::kQueueFull, "full"));
    CHECK(body == json{{"error",
                        {{"message", "full"},
                         {"type", "rate_limit_error"},
                         {"param", nullptr},
                         {"code", "queue_full"}}}});
  }

  TEST_CASE("response, chunk and usage shapes") {
    llama2::ApiResponseHead h{ApiKind::kChat, "chatcmpl-1", 100, "tiny", ""};
    const json r = llama2::api_response(h, {llama2::FinishReason::kStop, 5, 2, "ok", nullptr});
    CHECK(r["object"] == "chat.completion");
    CHECK(r["choices"][0]["message"] == json{{"role", "assistant"}, {"content", "ok"}});
    CHECK(r["choices"][0]["finish_reason"] == "stop");
    CHECK(r["usage"] == json{{"prompt_tokens", 5},
                             {"completion_tokens", 2},
                             {"total_tokens", 7},
                             {"prompt_tokens_details", {{"cached_tokens", 0}}}});
    const json first = llama2::api_chunk(h, "", true, nullptr, true);
    CHECK(first["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
    CHECK(first.contains("usage"));
    CHECK(first["usage"].is_null());
    const llama2::FinishReason reason = llama2::FinishReason::kLength;
    const json last = llama2::api_chunk(h, "", false, &reason, false);
    CHECK(last["choices"][0]["delta"] == json::object());
    CHECK(last["choices"][0]["finish_reason"] == "length");
    CHECK_FALSE(last.contains("usage"));
    CHECK(llama2::api_usage_chunk(h, 1, 2, 0)["choices"] == json::array());
    h.kind = ApiKind::kCompletion;
    const json c = llama2::api_chunk(h, "tok", false, nullptr, false);
    CHECK(c["object"] == "text_completion");
    CHECK(c["choices"][0]["text"] == "tok");
  }

  TEST_CASE("the served model name defaults to the model directory's name") {
    CHECK(llama2::default_served_model("/models/Llama-2-7b-chat-hf/", "") == "Llama-2-7b-chat-hf");
    CHECK(llama2::default_served_model("tiny", "") == "tiny");
    CHECK(llama2::default_served_model("tests/models/small-d64", "7b") == "synthetic-7b");
  }

  TEST_CASE("access checks: loopback hosts, constant-time key comparison") {
    for (const char* h : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"})
      CHECK(llama2::is_loopback_host(h));
    for (const char* h : {"0.0.0.0", "10.0.0.1", "::", "example.com", "128.0.0.1"})
      CHECK_FALSE(llama2::is_loopback_host(h));
    CHECK(llama2::same_secret("s3cret", "s3cret"));
    CHECK_FALSE(llama2::same_secret("s3cret!", "s3cret"));
    CHECK_FALSE(llama2::same_secret("s3cre", "s3cret"));
    CHECK_FALSE(llama2::same_secret("", "s3cret"));
    CHECK_FALSE(llama2::same_secret("S3cret", "s3cret"));
  }

  TEST_CASE("logprobs objects in OpenAI's chat and completions shapes") {
    const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
    const std::vector<int> ids = tok.encode("hello world", false);
    REQUIRE(ids.size() >= 2);
    std::vector<llama2::ApiTokenLogprobs> lp = {
        {ids[0], -0.25f, {{ids[0], -0.25f}, {ids[1], -2.5f}}}};
    for (size_t i = 1; i < ids.size(); ++i) lp.push_back({ids[i], -1.0f, {}});
    const json chat = llama2::api_logprobs(llama2::ApiKind::kChat, lp, tok);
    REQUIRE(chat["content"].size() == ids.size());
    std::string joined;
    for (const json& t : chat["content"]) joined += t["token"].get<std::string>();
    CHECK(joined == " hello world");  // pieces with U+2581 as spaces, in order
    CHECK(chat["content"][0]["logprob"].get<float>() == -0.25f);
    CHECK(chat["content"][0]["top_logprobs"].size() == 2);
    CHECK(chat["content"][0]["top_logprobs"][1]["logprob"].get<float>() == -2.5f);
    CHECK(chat["content"][1]["top_logprobs"].empty());
    CHECK(chat["content"][0]["bytes"].size() ==
          chat["content"][0]["token"].get<std::string>().size());
    const json comp = llama2::api_logprobs(llama2::ApiKind::kCompletion, lp, tok, 7);
    CHECK(comp["tokens"].size() == ids.size());
    CHECK(comp["token_logprobs"][1].get<float>() == -1.0f);
    CHECK(comp["top_logprobs"][0].size() == 2);
    CHECK(comp["text_offset"][0] == 7);
    CHECK(comp["text_offset"][1] ==
          7 + static_cast<int>(comp["tokens"][0].get<std::string>().size()));
  }

  TEST_CASE("the exchange hands tokens and the end to a waiting thread; a slow reader is capped") {
    struct NoFlusher final : llama2::SinkFlusher {
      void flush(std::vector<std::shared_ptr<llama2::EventSink>>& t) override { t.clear(); }
    } flusher;
    llama2::HttpExchange ex(1, 1, /*logprobs=*/false, /*stream=*/true, flusher);
    std::thread engine([&] {
      ex.on_token(llama2::TokenEvent{0, 0, 5, "a"});
      ex.on_token(llama2::TokenEvent{0, 1, 6, "b"});
      ex.wake();
      llama2::Finished f;
      f.finish_reason = llama2::FinishReason::kStop;
      ex.on_finished(f, {});  // wakes the reader itself
    });
    std::string text;
    std::optional<llama2::HttpExchange::End> end;
    while (!end) {
      llama2::HttpExchange::News n = ex.take(std::chrono::milliseconds(1000));
      for (const auto& t : n.tokens) text += t.text;
      end = n.end;
    }
    engine.join();
    CHECK(text == "ab");
    CHECK(end->finished.finish_reason == llama2::FinishReason::kStop);
    // Nobody reads: past kMaxQueuedBytes tokens are dropped and the reader is told.
    llama2::HttpExchange slow(2, 2, /*logprobs=*/false, /*stream=*/true, flusher);
    const std::string piece(1 << 20, 'x');
    for (int i = 0; i < 20; ++i) slow.push_token(llama2::TokenEvent{0, i, 5, piece});
    const llama2::HttpExchange::News n = slow.take(std::chrono::milliseconds(0));
    CHECK(n.overflowed);
    CHECK(n.tokens.size() == llama2::HttpExchange::kMaxQueuedBytes / piece.size());
  }
}
