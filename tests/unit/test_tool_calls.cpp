// Tool calling (docs/tool-calling.md): the dialog's rendering byte for byte (text/chat_tools.h),
// the tool-call grammar's language (constrain/tool_grammar.h), the answer's parsing whole and in
// streamed pieces (requests/request_tools.h), and the refusals of bad tools, choices and
// messages, with the HTTP param they name.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "constrain_test_util.h"
#include "coordinator/constrain/limits.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/http/tool_api.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/requests/request_tools.h"
#include "coordinator/text/chat_tools.h"

namespace {

using llama2::ChatRole;
using llama2::ToolCallReader;
using nlohmann::json;
namespace cst = llama2::constrain;

const json kWeather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object", "properties": {
  "city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
  "required": ["city", "unit"], "additionalProperties": false}}})");
const json kTime = json::parse(R"({"type": "function", "function": {"name": "get_time",
  "parameters": {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12,
  "maximum": 14}}, "required": ["zone"]}}})");

std::shared_ptr<const cst::CompiledGrammar> tool_grammar(const json& request) {
  const auto tools = llama2::parse_tool_fields(request);
  REQUIRE(tools != nullptr);
  return llama2::test::compile(llama2::tool_constraint(*tools)->spec);
}

json tools_request(const json& choice, bool parallel = true) {
  return json{
      {"tools", {kWeather, kTime}}, {"tool_choice", choice}, {"parallel_tool_calls", parallel}};
}

const std::string kOneCall =
    R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}])";
const std::string kTwoCalls =
    R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "f"}}, )"
    R"({"name": "get_time", "arguments": {"zone": -3}}])";

llama2::ApiContext context() {
  llama2::ApiContext c;
  c.served_models = {"tiny"};
  c.config = llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
  return c;
}

// The error's param and message for a chat body with `extra` fields.
std::pair<std::string, std::string> refusal(const json& extra) {
  json body{{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(extra);
  const llama2::ApiParse p =
      llama2::parse_api_request(body.dump(), llama2::ApiKind::kChat, context());
  REQUIRE(p.error);
  return {p.error->param, p.error->message};
}

}  // namespace

TEST_SUITE("tool_calls") {
  TEST_CASE(
      "rendering: tools in the system text, calls after [TOOL_CALLS], results as a user "
      "turn, byte for byte") {
    const json messages = json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
      {"role": "user", "content": "Thanks. And now?"}])");
    const json tools = json::array({kTime});
    const auto out = llama2::render_tool_dialog(llama2::parse_chat_messages(messages), tools);
    REQUIRE(out.size() == 4);
    CHECK(out[0].role == ChatRole::kSystem);
    CHECK(out[0].content ==
          R"([AVAILABLE_TOOLS][{"type": "function", "function": {"name": "get_time", )"
          R"("parameters": {"properties": {"zone": {"maximum": 14, "minimum": -12, "type": )"
          R"("integer"}}, "required": ["zone"], "type": "object"}}}][/AVAILABLE_TOOLS])"
          "\n" +
              std::string(llama2::kToolInstruction) + "\n\nBe brief.");
    CHECK(out[1].content == "Weather in Paris?");
    CHECK(out[2].role == ChatRole::kAssistant);
    CHECK(out[2].content ==
          R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}])");
    CHECK(out[3].role == ChatRole::kUser);
    CHECK(out[3].content ==
          R"([TOOL_RESULTS][{"call_id": "call_1", "name": "get_weather", "content": "18 C"}])"
          "[/TOOL_RESULTS]\nThanks. And now?");
    llama2::check_chat_order(out);  // the three Llama-2 roles, in order
  }

  TEST_CASE("rendering: no system message gets one; an assistant's text precedes its calls") {
    const json messages = json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Let me look. ", "tool_calls": [{"id": "a",
        "function": {"name": "get_time", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "a", "content": "noon"},
      {"role": "tool", "tool_call_id": "b", "content": "late"}])");
    const auto out =
        llama2::render_tool_dialog(llama2::parse_chat_messages(messages), json::array({kTime}));
    REQUIRE(out.size() == 4);
    CHECK(out[0].role == ChatRole::kSystem);
    CHECK(out[2].content ==
          R"(Let me look. [TOOL_CALLS][{"name": "get_time", "arguments": "not json"}])");
    CHECK(out[3].content == R"([TOOL_RESULTS][{"call_id": "a", "name": "get_time", "content": )"
                            R"("noon"}, {"call_id": "b", "content": "late"}][/TOOL_RESULTS])");
    // Without tools the history is rendered the same, with no tool list.
    const auto plain = llama2::render_tool_dialog(llama2::parse_chat_messages(messages), json());
    CHECK(plain.size() == 3);
    CHECK(plain[0].role == ChatRole::kUser);
  }

  TEST_CASE("grammar: required, parallel or not, named, auto") {
    const auto required = tool_grammar(tools_request("required"));
    CHECK(llama2::test::full_match(required, kOneCall));
    CHECK(llama2::test::full_match(required, kTwoCalls));
    CHECK_FALSE(llama2::test::full_match(required, "Paris is sunny"));
    CHECK_FALSE(
        llama2::test::viable(required, R"([TOOL_CALLS][{"name": "get_wind", )"));  // not a tool
    CHECK_FALSE(llama2::test::viable(
        required, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"zone": 15)"));  // bounds
    const auto single = tool_grammar(tools_request("required", false));
    CHECK(llama2::test::full_match(single, kOneCall));
    CHECK_FALSE(llama2::test::full_match(single, kTwoCalls));
    const auto named =
        tool_grammar(tools_request({{"type", "function"}, {"function", {{"name", "get_time"}}}}));
    CHECK(llama2::test::full_match(
        named, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"zone": 2}}])"));
    CHECK_FALSE(llama2::test::viable(named, R"([TOOL_CALLS][{"name": "get_weather")"));
    const auto automatic = tool_grammar(tools_request("auto"));
    CHECK(llama2::test::full_match(automatic, kOneCall));
    CHECK(llama2::test::full_match(automatic,
                                   "Paris is sunny, 18 \xc2\xb0"
                                   "C."));
    CHECK(llama2::test::full_match(automatic, ""));
    CHECK(llama2::test::full_match(automatic, "[TOOL"));
    CHECK(llama2::test::full_match(automatic, "[TOOL_CALL] is not the trigger"));
    CHECK(llama2::test::full_match(automatic, "Text, then [TOOL_CALLS] is text"));
    CHECK_FALSE(llama2::test::viable(automatic, "[TOOL_CALLS]Paris"));
    CHECK_FALSE(llama2::test::full_match(automatic, "[TOOL_CALLS]"));
  }

  TEST_CASE("parsing: whole answers, and streamed pieces that reassemble to them") {
    const auto calls = llama2::parse_tool_calls(kTwoCalls);
    REQUIRE(calls);
    REQUIRE(calls->size() == 2);
    CHECK((*calls)[0].name == "get_weather");
    CHECK((*calls)[0].arguments == R"({"city": "Oslo", "unit": "f"})");
    CHECK((*calls)[1].arguments == R"({"zone": -3})");
    CHECK((*calls)[0].id.rfind("call_", 0) == 0);
    CHECK((*calls)[0].id.size() == 29);
    CHECK((*calls)[0].id != (*calls)[1].id);
    for (const std::string text : {"Hello", "[TOOL", "[TOOL_CALLS][{\"name\": \"get_time\"",
                                   "[TOOL_CALLS][] x", "[TOOL_CALLS][{\"arguments\": {}}]"}) {
      CAPTURE(text);
      CHECK_FALSE(llama2::parse_tool_calls(text));
    }
    // Streamed one byte at a time: the deltas add up to the whole answer's calls.
    for (size_t step : {1, 3, 7, 1000}) {
      ToolCallReader reader;
      std::vector<ToolCallReader::Delta> deltas;
      std::string text;
      for (size_t at = 0; at < kTwoCalls.size(); at += step) {
        ToolCallReader::Output out = reader.feed(kTwoCalls.substr(at, step));
        text += out.text;
        deltas.insert(deltas.end(), out.deltas.begin(), out.deltas.end());
      }
      text += reader.finish().text;
      CHECK(text.empty());
      CHECK(reader.complete());
      std::vector<std::pair<std::string, std::string>> got;
      for (const auto& d : deltas) {
        if (!d.name.empty()) got.push_back({d.name, ""});
        REQUIRE(!got.empty());
        CHECK(d.index == static_cast<int>(got.size()) - 1);
        got.back().second += d.arguments;
      }
      REQUIRE(got.size() == 2);
      CHECK(got[0] == std::make_pair(std::string("get_weather"), (*calls)[0].arguments));
      CHECK(got[1] == std::make_pair(std::string("get_time"), (*calls)[1].arguments));
    }
    // A false start is text: held while it could be the trigger, then given back whole.
    ToolCallReader reader;
    CHECK(reader.feed("[TOO").text.empty());
    CHECK(reader.feed("K at this").text == "[TOOK at this");
    CHECK_FALSE(reader.calls());
    ToolCallReader short_text;
    CHECK(short_text.feed("[").text.empty());
    CHECK(short_text.finish().text == "[");
  }

  TEST_CASE("answers: message.tool_calls and finish_reason tool_calls; chunks in OpenAI's shape") {
    llama2::ApiResponseHead head;
    head.kind = llama2::ApiKind::kChat;
    llama2::ApiResult r;
    r.text = kOneCall;
    r.tool_calls = llama2::parse_tool_calls(kOneCall);
    const json answer = llama2::api_response(head, r);
    const json& choice = answer["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    CHECK(choice["message"]["content"].is_null());
    CHECK(choice["message"]["tool_calls"][0]["type"] == "function");
    CHECK(choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather");
    CHECK(choice["message"]["tool_calls"][0]["function"]["arguments"] ==
          R"({"city": "Paris", "unit": "c"})");
    ToolCallReader reader;
    const auto chunks = llama2::api_tool_chunks(head, reader.feed(kOneCall), false);
    REQUIRE(chunks.size() == 1);
    const json& call = chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    CHECK(call["index"] == 0);
    CHECK(call["function"]["name"] == "get_weather");
    CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
    const json last = llama2::api_tool_last_chunk(head, reader, llama2::FinishReason::kStop, false);
    CHECK(last["choices"][0]["finish_reason"] == "tool_calls");
    ToolCallReader text;
    text.feed("Sunny.");
    CHECK(llama2::api_tool_last_chunk(head, text, llama2::FinishReason::kStop,
                                      false)["choices"][0]["finish_reason"] == "stop");
  }

  TEST_CASE("refusals name tools, tool_choice or messages") {
    const json bad_name = {{"type", "function"}, {"function", {{"name", "get weather"}}}};
    const json no_name = {{"type", "function"}, {"function", {{"description", "x"}}}};
    const json refused_schema = {
        {"type", "function"},
        {"function", {{"name", "f"}, {"parameters", {{"not", {{"type", "string"}}}}}}}};
    struct Case {
      json extra;
      std::string param, words;
    };
    const std::vector<Case> cases = {
        {{{"tools", {no_name}}}, "tools", "tools[0].function.name: missing"},
        {{{"tools", {bad_name}}}, "tools", "^[a-zA-Z0-9_-]{1,64}$"},
        {{{"tools", {kTime, kTime}}}, "tools", "\"get_time\" is given twice"},
        {{{"tools", {kTime}},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}},
         "tool_choice",
         "not among \"tools\" (get_time)"},
        {{{"tool_choice", "required"}}, "tool_choice", "needs \"tools\""},
        {{{"tools", {kTime}}, {"tool_choice", "sometimes"}}, "tool_choice", "\"required\""},
        {{{"tools", {kTime}}, {"parallel_tool_calls", 1}}, "parallel_tool_calls", "true or false"},
        {{{"tools", {kTime}}, {"response_format", {{"type", "json_object"}}}},
         "tools",
         "both constrain"},
        {{{"messages",
           {{{"role", "user"}, {"content", "Hi"}}, {{"role", "tool"}, {"content", "x"}}}}},
         "messages",
         "messages[1].tool_call_id"},
        {{{"messages",
           {{{"role", "user"}, {"content", "Hi"}},
            {{"role", "tool"}, {"tool_call_id", "a"}, {"content", "x"}}}}},
         "messages",
         "must follow an assistant message with tool_calls"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.extra.dump());
      const auto [param, message] = refusal(c.extra);
      CHECK(param == c.param);
      CHECK(message.find(c.words) != std::string::npos);
    }
    // A parameters schema the compiler refuses: its message, naming the tool and the keyword.
    const auto tools = llama2::parse_tool_fields(json{{"tools", {refused_schema}}});
    REQUIRE(tools != nullptr);
    try {
      llama2::test::compile(llama2::tool_constraint(*tools)->spec);
      FAIL("compiled");
    } catch (const cst::ConstraintError& e) {
      CHECK(std::string(e.what()).find("tools[0] (f) parameters") != std::string::npos);
      CHECK(std::string(e.what()).find("not") != std::string::npos);
    }
    // tool_choice "none": no tools, no constraint; empty tools too.
    CHECK(llama2::parse_tool_fields(json{{"tools", {kTime}}, {"tool_choice", "none"}}) == nullptr);
    CHECK(llama2::parse_tool_fields(json{{"tools", json::array()}}) == nullptr);
  }

  TEST_CASE("the tool-call constraint crosses the replica wire as it was") {
    const auto tools = llama2::parse_tool_fields(tools_request("required", false));
    const auto c = llama2::tool_constraint(*tools);
    json fields = json::object();
    llama2::constraint_to_json(*c, &fields);
    const auto back = llama2::parse_constraint_fields(fields);
    REQUIRE(back != nullptr);
    CHECK(back->spec.kind == cst::ConstraintKind::kToolCalls);
    CHECK(back->spec.text == c->spec.text);
    CHECK(back->field == "tools");
  }
}
