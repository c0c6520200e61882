// The HTTP front's tolerance of real clients' bodies and its routes beside generation, without
// sockets (src/coordinator/http/api_fields.h, openai_api.h, server_api.h): unknown fields ignored
// and logged once (400 under --strict-api), output-changing ones refused by name, top_k -1, an
// absent max_tokens, OpenAI's finish reasons with the project's own beside them, error params,
// model aliases, usage's cached tokens, /tokenize and /detokenize, the probes.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "coordinator/http/api_fields.h"
#include "coordinator/http/http_exchange.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/http/server_api.h"
#include "coordinator/text/chat_format.h"
#include "coordinator/text/tokenizer.h"

namespace {

using llama2::ApiKind;
using llama2::ApiParse;
using llama2::ErrorCode;
using llama2::FinishReason;
using nlohmann::json;

llama2::ApiContext context(bool strict = false) {
  llama2::ApiContext c;
  c.served_models = {"tiny", "tiny-alias"};
  c.config = llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
  c.strict = strict;
  return c;
}

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

ApiParse parse(const json& body, ApiKind kind = ApiKind::kChat, bool strict = false) {
  return llama2::parse_api_request(body.dump(), kind, context(strict));
}

const json kChat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
const json kComp = {{"model", "tiny"}, {"prompt", "Hi"}};

json with(json base, const json& extra) {
  base.update(extra);
  return base;
}

}  // namespace

TEST_SUITE("openai_tolerance") {
  TEST_CASE("bookkeeping and unknown fields are ignored and listed; --strict-api refuses them") {
    const json extra = {{"store", true},
                        {"metadata", {{"k", "v"}}},
                        {"service_tier", "auto"},
                        {"reasoning_effort", "low"},
                        {"user", "u"},
                        {"parallel_tool_calls", false},
                        {"priority", 3}};
    const ApiParse p = parse(with(kChat, extra));
    REQUIRE_FALSE(p.error);
    CHECK(p.request.ignored == std::vector<std::string>{"metadata", "priority", "reasoning_effort",
                                                        "service_tier", "store",
                                                        "user"});  // nlohmann's object: sorted
    // Strict: today's keys pass (user, harmless n, empty tools), any other is 400.
    CHECK_FALSE(parse(with(kChat, {{"user", "u"}, {"n", 1}, {"tools", json::array()}}),
                      ApiKind::kChat, true)
                    .error);
    const ApiParse strict = parse(with(kChat, {{"store", true}}), ApiKind::kChat, true);
    REQUIRE(strict.error);
    CHECK(strict.error->status == 400);
    CHECK(strict.error->param == "store");
    CHECK(strict.error->message.find("--strict-api") != std::string::npos);
    // Completions tolerate the same way.
    const ApiParse c =
        parse(with(kComp, {{"metadata", nullptr}, {"max_tokens", 3}}), ApiKind::kCompletion);
    REQUIRE_FALSE(c.error);
    CHECK(c.request.ignored == std::vector<std::string>{"metadata"});
  }

  TEST_CASE("fields that would change the output are refused by name, harmless values pass") {
    const std::pair<json, std::string> refused[] = {
        {{{"tools", {{{"type", "function"}}}}}, "tools"},
        {{{"tool_choice", "auto"}}, "tool_choice"},
        {{{"bad_words", {"x"}}}, "bad_words"},
        {{{"return_tokens_as_token_ids", true}}, "return_tokens_as_token_ids"},
        {{{"use_beam_search", true}}, "use_beam_search"},
        {{{"echo", true}}, "echo"},
    };
    for (const auto& [extra, param] : refused) {
      const std::string body = extra.dump();
      CAPTURE(body);
      for (const bool strict : {false, true}) {
        const ApiParse p = parse(with(kChat, extra), ApiKind::kChat, strict);
        REQUIRE(p.error);
        CHECK(p.error->status == 400);
        CHECK(p.error->param == param);
      }
    }
    const ApiParse beam = parse(with(kChat, {{"use_beam_search", true}}));
    CHECK(beam.error->message == "\"use_beam_search\" is not supported by this server");
    // Structured output is read (structured_fields.h), not refused.
    CHECK_FALSE(parse(with(kChat, {{"guided_choice", {"a", "b"}}})).error);
    // Tools are read (request_tools.h): a malformed one is invalid, the legacy form unsupported.
    const ApiParse tools = parse(with(kChat, {{"tools", {{{"type", "function"}}}}}));
    CHECK(tools.error->code == ErrorCode::kInvalidRequest);
    const ApiParse functions = parse(with(kChat, {{"functions", {{{"name", "f"}}}}}));
    CHECK(functions.error->code == ErrorCode::kUnsupportedParameter);
    CHECK(llama2::api_error_body(*functions.error)["error"]["code"] == "unsupported_parameter");
    // Null, or the value that changes nothing, is accepted without a log line.
    const ApiParse ok = parse(with(kChat, {{"guided_json", nullptr},
                                           {"bad_words", json::array()},
                                           {"tool_choice", "none"},
                                           {"response_format", {{"type", "text"}}},
                                           {"return_tokens_as_token_ids", false}}));
    REQUIRE_FALSE(ok.error);
    CHECK(ok.request.ignored.empty());
  }

  TEST_CASE("vLLM's sampling extensions are read; bad values are a 400 naming the parameter") {
    const json extra = {{"logit_bias", {{"7", -100}}},
                        {"stop_token_ids", {9}},
                        {"min_tokens", 2},
                        {"min_p", 0.1},
                        {"include_stop_str_in_output", true},
                        {"skip_special_tokens", false}};
    for (const bool strict : {false, true}) {
      const ApiParse p = parse(with(kChat, extra), ApiKind::kChat, strict);
      REQUIRE_FALSE(p.error);
      CHECK(p.request.ignored.empty());
      const llama2::SamplingParams& s = p.request.request.params;
      CHECK(s.logit_bias == std::vector<std::pair<int32_t, float>>{{7, -100.0f}});
      CHECK(s.stop_token_ids == std::vector<int32_t>{9});
      CHECK(s.min_tokens == 2);
      CHECK(s.min_p == 0.1f);
      CHECK(s.include_stop_str_in_output);
      CHECK_FALSE(s.skip_special_tokens);
    }
    const std::pair<json, std::string> bad[] = {
        {{{"logit_bias", {{"7", 101}}}}, "logit_bias"},
        {{{"logit_bias", {{"99999999", 1}}}}, "logit_bias"},
        {{{"stop_token_ids", {99999999}}}, "stop_token_ids"},
        {{{"min_tokens", -1}}, "min_tokens"},
        {{{"min_p", 2}}, "min_p"},
        {{{"include_stop_str_in_output", "yes"}}, "include_stop_str_in_output"},
        {{{"skip_special_tokens", 0}}, "skip_special_tokens"},
    };
    for (const auto& [fields, param] : bad) {
      // A copy: CAPTURE's lambda cannot name a structured binding before clang 16.
      const std::string body = fields.dump();
      CAPTURE(body);
      const ApiParse p = parse(with(kChat, fields), ApiKind::kChat);
      REQUIRE(p.error);
      CHECK(p.error->status == 400);
      CHECK(p.error->param == param);
    }
  }

  TEST_CASE("each ignored field name is logged once per process, and at most kMaxNames names") {
    std::ostringstream out;
    llama2::IgnoredFieldLog log(out);
    CHECK(log.note({"store", "metadata"}) == std::vector<std::string>{"store", "metadata"});
    CHECK(log.note({"store", "metadata", "user"}) == std::vector<std::string>{"user"});
    CHECK(log.note({"store"}).empty());
    std::vector<std::string> many;
    for (size_t i = 0; i < 2 * llama2::IgnoredFieldLog::kMaxNames; ++i)
      many.push_back("x" + std::to_string(i));
    CHECK(log.note(many).size() == llama2::IgnoredFieldLog::kMaxNames - 3);
    CHECK(log.note({"another"}).empty());
    const std::string text = out.str();
    CHECK(text.find("ignoring the request field \"store\"") != std::string::npos);
    CHECK(text.find("further ones are not logged") != std::string::npos);
    CHECK(std::count(text.begin(), text.end(), '\n') == llama2::IgnoredFieldLog::kMaxNames + 1);
    // Client text: escaped (no line of its own) and cut.
    std::ostringstream one;
    llama2::IgnoredFieldLog(one).note({"a\nb" + std::string(500, 'x')});
    const std::string line = one.str();
    CHECK(line.find("\"a\\nb") != std::string::npos);
    CHECK(std::count(line.begin(), line.end(), '\n') == 1);
    CHECK(line.size() < 300);
  }

  TEST_CASE("top_k -1 and 0 are off; below -1 is refused naming top_k") {
    for (const int k : {-1, 0}) {
      const ApiParse p = parse(with(kChat, {{"top_k", k}}));
      REQUIRE_FALSE(p.error);
      CHECK(p.request.request.params.top_k == 0);
    }
    const ApiParse bad = parse(with(kChat, {{"top_k", -2}}));
    REQUIRE(bad.error);
    CHECK(bad.error->param == "top_k");
  }

  TEST_CASE("an absent max_tokens is the rest of the context, capped only by a given flag") {
    const ApiParse p = parse(kChat);
    REQUIRE_FALSE(p.error);
    CHECK(p.request.max_tokens_key.empty());
    CHECK(p.request.request.params.max_new_tokens == 1);  // the room the prompt must leave
    CHECK(parse(with(kChat, {{"max_tokens", 9}})).request.max_tokens_key == "max_tokens");
    CHECK(parse(with(kChat, {{"max_completion_tokens", 9}})).request.max_tokens_key ==
          "max_completion_tokens");
    llama2::PromptLimits limits;
    limits.max_position_embeddings = 64;
    limits.max_seq_len = 48;
    CHECK(llama2::api_default_max_tokens(10, limits, std::nullopt) == 38);
    CHECK(llama2::api_default_max_tokens(10, limits, 5) == 5);
    CHECK(llama2::api_default_max_tokens(10, limits, 100) == 38);
    limits.kv_capacity_tokens = 32;  // the whole KV cache is smaller still
    CHECK(llama2::api_default_max_tokens(10, limits, std::nullopt) == 22);
  }

  TEST_CASE("finish_reason is OpenAI's; the project's reason rides in llama2_finish_reason") {
    CHECK(std::string(llama2::api_finish_reason(FinishReason::kStop)) == "stop");
    CHECK(std::string(llama2::api_finish_reason(FinishReason::kLength)) == "length");
    CHECK(std::string(llama2::api_finish_reason(FinishReason::kTimeout)) == "length");
    CHECK(std::string(llama2::api_finish_reason(FinishReason::kShuttingDown)) == "length");
    CHECK(std::string(llama2::api_finish_reason(FinishReason::kCancelled)) == "stop");
    const llama2::ApiResponseHead h{ApiKind::kChat, "chatcmpl-1", 100, "tiny-alias", "fp_x"};
    llama2::ApiResult r{FinishReason::kTimeout, 5, 2, "ok", nullptr};
    r.cached_tokens = 4;
    const json whole = llama2::api_response(h, r);
    CHECK(whole["choices"][0]["finish_reason"] == "length");
    CHECK(whole["choices"][0][llama2::kVendorFinishReason] == "timeout");
    CHECK(whole["model"] == "tiny-alias");
    CHECK(whole["system_fingerprint"] == "fp_x");
    CHECK(whole["usage"]["prompt_tokens_details"]["cached_tokens"] == 4);
    const FinishReason cancelled = FinishReason::kCancelled;
    const json last = llama2::api_chunk(h, "", false, &cancelled, false);
    CHECK(last["choices"][0]["finish_reason"] == "stop");
    CHECK(last["choices"][0][llama2::kVendorFinishReason] == "cancelled");
    CHECK(last["system_fingerprint"] == "fp_x");
    const json mid = llama2::api_chunk(h, "a", false, nullptr, false);
    CHECK_FALSE(mid["choices"][0].contains(llama2::kVendorFinishReason));
    CHECK(llama2::api_usage_chunk(h, 5, 2, 4)["usage"]["prompt_tokens_details"]["cached_tokens"] ==
          4);
  }

  TEST_CASE("a generation the drain ended: HTTP ends it with its text, the socket's default errs") {
    struct NoFlusher final : llama2::SinkFlusher {
      void flush(std::vector<std::shared_ptr<llama2::EventSink>>& t) override { t.clear(); }
    } flusher;
    llama2::HttpExchange ex(1, 1, /*logprobs=*/false, /*stream=*/false, flusher);
    llama2::Finished f;
    f.finish_reason = FinishReason::kShuttingDown;
    f.text = "partial";
    llama2::EventSink& sink = ex;
    sink.on_shut_down(f, {});
    const llama2::HttpExchange::News n = ex.take(std::chrono::milliseconds(0));
    REQUIRE(n.end);
    CHECK_FALSE(n.end->error_code);
    CHECK(n.end->finished.text == "partial");
    CHECK(std::string(llama2::api_finish_reason(n.end->finished.finish_reason)) == "length");
    // An endpoint without its own answer (the socket's) gets the shutting_down error.
    struct Erring final : llama2::EventSink {
      std::optional<ErrorCode> code;
      void on_token(const llama2::TokenEvent&) override {}
      void on_finished(const llama2::Finished&, const llama2::Timings&) override {}
      void on_error(ErrorCode c, const std::string&) override { code = c; }
      llama2::SinkFlusher& flusher() override { return *f; }
      llama2::SinkFlusher* f = nullptr;
    } erring;
    erring.on_shut_down(f, {});
    CHECK(erring.code == ErrorCode::kShuttingDown);
  }

  TEST_CASE("an over-long prompt is context_length_exceeded naming prompt or messages") {
    const json ids(std::vector<int>(600, 5));  // tiny-gqa: max_position_embeddings 512
    const ApiParse comp =
        parse(with(kComp, {{"prompt", ids}, {"max_tokens", 4}}), ApiKind::kCompletion);
    REQUIRE(comp.error);
    CHECK(comp.error->code == ErrorCode::kPromptTooLong);
    CHECK(comp.error->param == "prompt");
    const json body = llama2::api_error_body(*comp.error)["error"];
    CHECK(body["code"] == "context_length_exceeded");
    CHECK(body["type"] == "invalid_request_error");
    CHECK(comp.error->status == 400);
    llama2::ApiRequest chat;
    chat.kind = ApiKind::kChat;
    const llama2::ApiError e = llama2::api_refusal(
        {ErrorCode::kPromptTooLong, "prompt (600 tokens) + max_new_tokens (1) = 601 exceeds x"},
        chat);
    CHECK(e.param == "messages");
    CHECK(e.message == "prompt (600 tokens) + max_tokens (1) = 601 exceeds x");
  }

  TEST_CASE("range and type errors name their param in the client's terms") {
    const std::pair<json, std::string> chat[] = {
        {{{"top_p", 1.5}}, "top_p"},
        {{{"temperature", "hot"}}, "temperature"},
        {{{"presence_penalty", 3}}, "presence_penalty"},
        {{{"max_tokens", 0}}, "max_tokens"},
        {{{"max_completion_tokens", 0}}, "max_completion_tokens"},
        {{{"logprobs", true}, {"top_logprobs", 50}}, "top_logprobs"},
        {{{"seed", -1}}, "seed"},
        {{{"messages", {{{"role", "assistant"}, {"content", "x"}}}}}, "messages"},
        {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, "messages"},
    };
    for (const auto& [extra, param] : chat) {
      const std::string body = extra.dump();
      CAPTURE(body);
      const ApiParse p = parse(with(kChat, extra));
      REQUIRE(p.error);
      CHECK(p.error->param == param);
    }
    const ApiParse lp = parse(with(kComp, {{"logprobs", 50}}), ApiKind::kCompletion);
    REQUIRE(lp.error);
    CHECK(lp.error->param == "logprobs");
    const ApiParse ids = parse(with(kComp, {{"prompt", {1, 100000}}}), ApiKind::kCompletion);
    REQUIRE(ids.error);
    CHECK(ids.error->param == "prompt");
  }

  TEST_CASE("every served alias is a model; /v1/models lists them all") {
    CHECK_FALSE(parse(with(kChat, {{"model", "tiny-alias"}})).error);
    CHECK(parse(with(kChat, {{"model", "tiny-alias"}})).request.model == "tiny-alias");
    const ApiParse other = parse(with(kChat, {{"model", "tiny2"}}));
    REQUIRE(other.error);
    CHECK(other.error->status == 404);
    CHECK(other.error->message.find("\"tiny\", \"tiny-alias\"") != std::string::npos);
    const json list = llama2::api_models({"a", "b"}, 7);
    REQUIRE(list["data"].size() == 2);
    CHECK(list["data"][1] == llama2::api_model("b", 7));
    CHECK(list["data"][1]["id"] == "b");
    CHECK(list["data"][1]["object"] == "model");
  }

  TEST_CASE("system_fingerprint: stable for one build and config, another for another") {
    const json config = {{"model", {{"hidden_size", 64}}}, {"dtype", "fp32"}};
    const std::string fp = llama2::api_system_fingerprint("0.1.0", config);
    CHECK(fp.size() == 19);
    CHECK(fp.rfind("fp_", 0) == 0);
    CHECK(fp == llama2::api_system_fingerprint("0.1.0", config));
    CHECK(fp != llama2::api_system_fingerprint("0.1.1", config));
    CHECK(fp != llama2::api_system_fingerprint("0.1.0", {{"model", {{"hidden_size", 65}}}}));
  }
}

TEST_SUITE("http_routes") {
  TEST_CASE("/tokenize: SentencePiece's ids for a prompt, the chat encoding for messages") {
    const llama2::Tokenizer& tok = tokenizer();
    const llama2::ApiContext ctx = context();
    const std::string text = "Hello world, tokens!";
    const llama2::ApiAnswer a =
        llama2::api_tokenize(json{{"model", "tiny"}, {"prompt", text}}.dump(), tok, ctx, 512);
    REQUIRE_FALSE(a.error);
    CHECK(a.body["tokens"] == json(tok.encode(text, true)));
    CHECK(a.body["count"] == tok.encode(text, true).size());
    CHECK(a.body["max_model_len"] == 512);
    CHECK(a.body["token_strs"].is_null());
    const llama2::ApiAnswer plain = llama2::api_tokenize(
        json{{"prompt", text}, {"add_special_tokens", false}, {"return_token_strs", true}}.dump(),
        tok, ctx, 512);
    REQUIRE_FALSE(plain.error);
    CHECK(plain.body["tokens"] == json(tok.encode(text, false)));
    CHECK(plain.body["token_strs"].size() == plain.body["tokens"].size());
    const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                           {{"role", "user"}, {"content", "Hi"}}};
    const llama2::ApiAnswer chat =
        llama2::api_tokenize(json{{"messages", messages}}.dump(), tok, ctx, 512);
    REQUIRE_FALSE(chat.error);
    CHECK(chat.body["tokens"] ==
          json(llama2::encode_llama2_chat(tok, llama2::parse_chat_messages(messages))));
    // /detokenize inverts it.
    const llama2::ApiAnswer back =
        llama2::api_detokenize(json{{"tokens", a.body["tokens"]}}.dump(), tok, ctx);
    REQUIRE_FALSE(back.error);
    CHECK(back.body["prompt"] == text);
  }

  TEST_CASE("/tokenize and /detokenize: bad input is 400 naming the field") {
    const llama2::Tokenizer& tok = tokenizer();
    const llama2::ApiContext ctx = context();
    const std::pair<json, std::string> tokenize[] = {
        {{{"prompt", 5}}, "prompt"},
        {json::object(), "prompt"},
        {{{"prompt", "a"}, {"messages", json::array()}}, "messages"},
        {{{"messages", {{{"role", "assistant"}, {"content", "x"}}}}}, "messages"},
        {{{"prompt", "a"}, {"add_special_tokens", "yes"}}, "add_special_tokens"},
        {{{"prompt", "a"}, {"chat_template", "{{x}}"}}, "chat_template"},
    };
    for (const auto& [body, param] : tokenize) {
      const std::string text = body.dump();
      CAPTURE(text);
      const llama2::ApiAnswer a = llama2::api_tokenize(text, tok, ctx, 512);
      REQUIRE(a.error);
      CHECK(a.error->status == 400);
      CHECK(a.error->param == param);
    }
    for (const json& ids : {json{-1}, json{512}, json{"a"}}) {
      const llama2::ApiAnswer a = llama2::api_detokenize(json{{"tokens", ids}}.dump(), tok, ctx);
      REQUIRE(a.error);
      CHECK(a.error->param == "tokens");
    }
    CHECK(llama2::api_detokenize("{}", tok, ctx).error->param == "tokens");
    const llama2::ApiAnswer model =
        llama2::api_tokenize(json{{"model", "gpt-4"}, {"prompt", "a"}}.dump(), tok, ctx, 512);
    REQUIRE(model.error);
    CHECK(model.error->status == 404);
    // Unknown fields: ignored and listed, or 400 under --strict-api.
    const std::string extra = json{{"prompt", "a"}, {"store", true}}.dump();
    CHECK(llama2::api_tokenize(extra, tok, ctx, 512).ignored == std::vector<std::string>{"store"});
    CHECK(llama2::api_tokenize(extra, tok, context(true), 512).error->param == "store");
  }

  TEST_CASE("/health is liveness, /ready readiness; /version is the project's") {
    using llama2::Probe;
    for (const char* s : {"starting", "ready", "draining"})
      CHECK(llama2::probe_status(Probe::kLiveness, s) == 200);
    CHECK(llama2::probe_status(Probe::kLiveness, "stalled") == 503);
    CHECK(llama2::probe_status(Probe::kReadiness, "ready") == 200);
    for (const char* s : {"starting", "draining", "stalled"})
      CHECK(llama2::probe_status(Probe::kReadiness, s) == 503);
    CHECK(std::string(llama2::llama2_version()).find('.') != std::string::npos);
  }
}
