// The request path of `llama2 serve` without sockets (src/coordinator/protocol.h, request.h):
// bounded quotes and echoed ids, frames that never throw.
#include <doctest/doctest.h>

#include <string>

#include "common/frame.h"
#include "common/model_config.h"
#include "coordinator/protocol.h"
#include "coordinator/request.h"
#include "coordinator/tokenizer.h"

namespace {

using llama2::FrameRequest;
using nlohmann::json;

const std::string kModel = LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa";

struct Fixture {
  llama2::ModelConfig config = llama2::load_model_config(kModel);
  llama2::Tokenizer tok{kModel + "/tokenizer.model"};
  llama2::ServeLimits limits;
  Fixture() { limits.max_tokens = config.max_position_embeddings; }
  FrameRequest decode(const std::string& payload) const {
    return llama2::decode_request(payload, llama2::SamplingParams{}, config, limits);
  }
};

// The payload of a frame built by event_frame, checked against its own length prefix.
std::string payload_of(const std::string& frame) {
  REQUIRE(frame.size() >= 4);
  const auto* p = reinterpret_cast<const unsigned char*>(frame.data());
  const size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  REQUIRE(frame.size() == 4 + n);
  return frame.substr(4);
}

}  // namespace

TEST_SUITE("protocol") {
  TEST_CASE("quote keeps short text and cuts long text at a character, saying its length") {
    CHECK(llama2::quote("max_tokens") == "\"max_tokens\"");
    const std::string euro(1000, 'x');
    const std::string cut = llama2::quote("\xE2\x82\xAC" + euro);  // "€" then 1000 bytes
    CHECK(cut.size() < llama2::kMaxQuoteBytes + 40);
    CHECK(cut.find("(1003 bytes)") != std::string::npos);
    // 199 bytes of 'a' then a 3-byte character straddling the limit: the cut keeps it out whole.
    const std::string straddle = llama2::quote(std::string(199, 'a') + "\xE2\x82\xAC" + euro);
    CHECK(straddle.substr(0, 201) == "\"" + std::string(199, 'a') + ".");
    CHECK(llama2::is_valid_utf8(straddle));
    CHECK(llama2::quote_json(json::array({1, 2})) == "[1,2]");
    CHECK(llama2::quote_json(json(std::vector<int>(500, 7))).find("(1001 bytes)") !=
          std::string::npos);
  }

  TEST_CASE("ids are echoed only when short strings or integers") {
    CHECK(llama2::echo_id("r1") == "r1");
    CHECK(llama2::echo_id(12) == 12);
    CHECK(llama2::echo_id(json(std::string(128, 'i'))) == std::string(128, 'i'));
    CHECK(llama2::echo_id(json(std::string(129, 'i'))).is_null());
    CHECK(llama2::echo_id(json::object({{"a", 1}})).is_null());
    CHECK(llama2::echo_id(1.5).is_null());
    const json e = llama2::error_event(json(std::string(300000, 'i')), "invalid_request",
                                       std::string(100000, 'm'));
    CHECK(e["id"].is_null());
    CHECK(e["message"].get<std::string>().size() < llama2::kMaxMessageBytes + 64);
  }

  TEST_CASE("the four frames that crashed rank 0 get small invalid_request replies") {
    const Fixture f;
    const std::string mib(1048576 - 64, 'k');  // a reply quoting it whole would not fit a frame
    std::string quotes = R"({"op":"generate","id":"q","prompt_tokens":[")";
    for (int i = 0; i < 300000; ++i) quotes += "\\\"";
    quotes += "\"]}";
    for (const std::string& payload :
         {R"({"op":"generate","id":"a","prompt":"x",")" + mib + "\":1}", R"({"op":")" + mib + "\"}",
          R"({"op":"generate","id":"t","prompt_tokens":[")" + mib + "\"]}", quotes}) {
      const FrameRequest r = f.decode(payload);
      REQUIRE(r.op == FrameRequest::Op::kError);
      CHECK(r.error["code"] == "invalid_request");
      const std::string frame = llama2::event_frame(r.error);
      CHECK(frame.size() < 8192);
      CHECK(json::parse(payload_of(frame)) == r.error);
    }
  }

  TEST_CASE("a legitimate event larger than a request frame is framed; a huge one is replaced") {
    const json done{{"event", "done"}, {"id", "r1"}, {"text", std::string(3u << 20, 'x')}};
    const std::string frame = llama2::event_frame(done);
    llama2::FrameDecoder client(llama2::kMaxEventFrameBytes), server;
    client.feed(frame.data(), frame.size());
    server.feed(frame.data(), frame.size());
    std::string payload, why;
    REQUIRE(client.next(&payload, &why) == llama2::FrameDecoder::Status::kFrame);
    CHECK(json::parse(payload) == done);
    CHECK(server.next(&payload, &why) == llama2::FrameDecoder::Status::kError);

    const std::string huge =
        json{{"event", "done"}, {"id", "r2"}, {"text", std::string(17u << 20, 'y')}}.dump();
    const json replaced = json::parse(payload_of(llama2::event_frame(huge, "r2")));
    CHECK(replaced["event"] == "error");
    CHECK(replaced["id"] == "r2");
    CHECK(replaced["code"] == "internal");
    CHECK(replaced["message"].get<std::string>().find("stream") != std::string::npos);
  }

  TEST_CASE("ops, ids and values are refused with their own messages") {
    const Fixture f;
    auto code_of = [&](const std::string& payload) {
      const FrameRequest r = f.decode(payload);
      return r.op == FrameRequest::Op::kError ? r.error["code"].get<std::string>() : "";
    };
    CHECK(code_of("{\"op\":\"health\",\"x\":\"\xff\"}") == "invalid_request");
    CHECK(code_of("[1]") == "invalid_request");
    CHECK(code_of(R"({"op":7})") == "invalid_request");
    CHECK(code_of(R"({"op":"cancel","id":["x"]})") == "invalid_request");
    CHECK(code_of(R"({"op":"generate","id":"x","prompt":"a","stream":1})") == "invalid_request");
    CHECK(code_of(R"({"op":"generate","id":"x","prompt_tokens":[1],"max_new_tokens":100000})") ==
          "prompt_too_long");
    CHECK(f.decode(R"({"op":"cancel","id":"x"})").op == FrameRequest::Op::kCancel);
    CHECK(f.decode(R"({"op":"stats"})").op == FrameRequest::Op::kStats);
    const FrameRequest ids =
        f.decode(R"({"op":"generate","id":"x","prompt_tokens":[1,5],"stream":false})");
    REQUIRE(ids.op == FrameRequest::Op::kGenerate);
    CHECK(ids.request.prompt == std::vector<int>{1, 5});
    CHECK_FALSE(ids.stream);
  }
}
