// The Llama-2 chat format (coordinator/text/chat_format.h) against token ids computed by Python
// SentencePiece following Meta's reference rule (tests/reference/make_chat_fixtures.py; the
// committed fixture is re-derived by ctest's chat.fixtures entry), plus the order rule's errors.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "coordinator/requests/request.h"
#include "coordinator/text/chat_format.h"
#include "coordinator/text/tokenizer.h"

using llama2::ChatMessage;
using llama2::ChatRole;
using llama2::encode_llama2_chat;
using llama2::parse_chat_messages;
using llama2::python_strip;
using llama2::Tokenizer;
using nlohmann::json;

namespace {

json load_fixtures() {
  std::ifstream in(LLAMA2_SOURCE_DIR "/tests/reference/fixtures/chat/llama2_chat.json");
  REQUIRE(in.good());
  return json::parse(in);
}

// DIR by pointer, not const std::string&: a reference returned from a function that took a
// temporary by reference is what g++ 13's -Wdangling-reference flags (the cache keeps it alive).
const Tokenizer& tokenizer(const char* dir) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& t = cache[dir];
  if (!t)
    t = std::make_unique<Tokenizer>(std::string(LLAMA2_SOURCE_DIR "/") + dir + "/tokenizer.model");
  return *t;
}

std::string error_of(const json& messages, const Tokenizer& tok) {
  try {
    encode_llama2_chat(tok, parse_chat_messages(messages));
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("chat_format") {
  TEST_CASE("token ids equal Python SentencePiece's under Meta's rule, for every fixture dialog") {
    const json fixtures = load_fixtures();
    const json& cases = fixtures.at("cases");
    REQUIRE(cases.size() >= 20);
    int with_system = 0, multi_turn = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const json& c = cases[i];
      CAPTURE(i);
      CAPTURE(c.at("messages").dump());
      const auto dialog = parse_chat_messages(c.at("messages"));
      with_system += dialog.front().role == ChatRole::kSystem;
      multi_turn += dialog.size() >= 3;
      const std::vector<int> want = c.at("ids").get<std::vector<int>>();
      const std::string dir = c.at("tokenizer").get<std::string>();
      CHECK(encode_llama2_chat(tokenizer(dir.c_str()), dialog) == want);
    }
    CHECK(with_system >= 4);  // the fixture covers both forms
    CHECK(multi_turn >= 4);
  }

  TEST_CASE("python_strip removes exactly what str.strip() removes") {
    CHECK(python_strip(" \t\n\v\f\r x y \r\n") == "x y");
    CHECK(python_strip("\xc2\xa0\xe3\x80\x80x\xe2\x80\x83") == "x");  // U+00A0, U+3000, U+2003
    CHECK(python_strip("\xc2\x85\x1c\x1fx\xe2\x80\xa8\xe2\x81\x9f") == "x");  // U+0085, U+2028...
    CHECK(python_strip("\xe2\x80\x8bx\xe2\x80\x8b") ==
          "\xe2\x80\x8bx\xe2\x80\x8b");                       // U+200B is not
    CHECK(python_strip("\xef\xbb\xbfx") == "\xef\xbb\xbfx");  // nor U+FEFF
    CHECK(python_strip("   ") == "");
    CHECK(python_strip("") == "");
    CHECK(python_strip("日本") == "日本");
  }

  TEST_CASE("content given as text parts is joined with newlines") {
    const json parts = json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
    const auto dialog = parse_chat_messages(parts);
    REQUIRE(dialog.size() == 1);
    CHECK(dialog[0].content == "a\nb");
  }

  TEST_CASE("a dialog that breaks the order rule is refused with the rule named") {
    const Tokenizer& tok = tokenizer("tests/models/tiny-gqa");
    const std::string rule =
        "an optional first 'system' message, then 'user' and 'assistant' alternating";
    const auto refused = [&](const char* text, const std::string& what) {
      const std::string e = error_of(json::parse(text), tok);
      CAPTURE(text);
      CHECK(e.find(what) != std::string::npos);
      CHECK(e.find(rule) != std::string::npos);
    };
    refused("[]", "messages: empty");
    refused(R"([{"role": "assistant", "content": "hi"}])",
            "messages[0]: role 'assistant' where 'user' is expected");
    refused(R"([{"role": "system", "content": "s"}])",
            "a system message must be followed by a user message");
    refused(R"([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}])",
            "a system message must be followed by a user message");
    refused(R"([{"role": "user", "content": "u"}, {"role": "user", "content": "u"}])",
            "messages[1]: role 'user' where 'assistant' is expected");
    refused(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "system", "content": "s"}, {"role": "user", "content": "u"}])",
            "messages[2]: role 'system' where 'assistant' is expected");
    refused(R"([{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}])",
            "the last message must be from 'user'");
  }

  TEST_CASE("malformed messages name the field and the allowed values") {
    const Tokenizer& tok = tokenizer("tests/models/tiny-gqa");
    const auto refused = [&](const char* text, const std::string& what) {
      const std::string e = error_of(json::parse(text), tok);
      CAPTURE(text);
      CHECK(e.find(what) != std::string::npos);
    };
    refused(R"({"role": "user"})", "messages: expected an array");
    refused(R"([42])", "messages[0]: expected an object");
    refused(R"([{"content": "x"}])", "messages[0].role: expected one of system, user, assistant");
    refused(R"([{"role": "function", "content": "x"}])",
            "messages[0].role: 'function' is not supported (allowed: system, user, assistant, "
            "tool)");
    refused(R"([{"role": "tool", "content": "x"}])",
            "messages[0].tool_call_id: a tool message needs the id of the call it answers");
    refused(R"([{"role": "user"}])", "messages[0].content: missing");
    refused(R"([{"role": "user", "content": 7}])",
            "messages[0].content: expected a string or an array");
    refused(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])",
            "messages[0].content[0]: only {\"type\": \"text\"");
    const json bad_utf8 = json::array({{{"role", "user"}, {"content", std::string("ok \xff")}}});
    CHECK(error_of(bad_utf8, tok).find("messages[0].content: not valid UTF-8") !=
          std::string::npos);
  }
}

TEST_SUITE("chat_format") {
  TEST_CASE(
      "requests (socket protocol, batch lines) take \"messages\" and encode them at tokenizing") {
    const Tokenizer& tok = tokenizer("tests/models/tiny-gqa");
    const llama2::ModelConfig config = llama2::preset_config("7b");
    const json messages = json::parse(
        R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}])");
    llama2::ParsedRequest r = llama2::parse_request_fields(json{{"messages", messages}},
                                                           llama2::SamplingParams{}, config, {});
    REQUIRE(r.ok());
    CHECK(r.text_pending);
    CHECK(r.pending_bytes() == std::string("Be brief.Hi there").size());
    llama2::tokenize_request(r, tok, config);
    REQUIRE(r.ok());
    CHECK_FALSE(r.text_pending);
    CHECK(r.prompt == encode_llama2_chat(tok, parse_chat_messages(messages)));
    // The batch command's one-call path gives the same ids.
    CHECK(llama2::parse_request(json{{"messages", messages}}, llama2::SamplingParams{}, tok, config,
                                {})
              .prompt == r.prompt);
  }

  TEST_CASE("a request with two prompt forms or a bad dialog is refused before tokenizing") {
    const llama2::ModelConfig config = llama2::preset_config("7b");
    const auto refused = [&](const json& obj, const std::string& what) {
      const auto r = llama2::parse_request_fields(obj, llama2::SamplingParams{}, config, {});
      CAPTURE(obj.dump());
      CHECK(r.error_code == llama2::ErrorCode::kInvalidRequest);
      CHECK(r.error_message.find(what) != std::string::npos);
    };
    const json user = json::array({{{"role", "user"}, {"content", "u"}}});
    refused(json{{"prompt", "x"}, {"messages", user}}, "give exactly one of \"prompt\"");
    refused(json::object(), "\"messages\" (chat turns");
    refused(json{{"messages", json::array({{{"role", "assistant"}, {"content", "a"}}})}},
            "messages[0]: role 'assistant' where 'user' is expected");
    refused(json{{"messages", "hello"}}, "messages: expected an array");
  }
}
