// The request path of `llama2 serve` without sockets (src/coordinator/serving/protocol.h,
// request.h, token_bound.h): bounded quotes and echoed ids, frames that never throw, the
// byte-length bound on prompt tokens checked against the real tokenizer.
#include <doctest/doctest.h>
#include <sentencepiece_trainer.h>
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>

#include "common/frame.h"
#include "common/model_config.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/serving/protocol.h"
#include "coordinator/serving/token_bound.h"
#include "coordinator/text/tokenizer.h"

namespace {

using llama2::FrameRequest;
using nlohmann::json;

const std::string kModel = LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Fixture {
  llama2::ModelConfig config = llama2::load_model_config(kModel);
  llama2::Tokenizer tok{kModel + "/tokenizer.model"};
  llama2::ServeLimits limits;
  Fixture() {
    limits.prompt.max_position_embeddings = config.max_position_embeddings;
    limits.max_piece_bytes = llama2::max_piece_bytes_for_bound(kModel + "/tokenizer.model", tok);
  }
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
    const json e =
        llama2::error_event(json(std::string(300000, 'i')), llama2::ErrorCode::kInvalidRequest,
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

  TEST_CASE("the byte-length bound never exceeds the real token count") {
    const Fixture f;
    REQUIRE(f.limits.max_piece_bytes > 1);
    // Every line of the corpus, runs of spaces, characters outside the vocabulary, and the whole
    // corpus at once: ceil(bytes / longest piece) + 1 <= tokens, always.
    std::vector<std::string> texts = {"",
                                      " ",
                                      std::string(1000, ' '),
                                      "\xF0\x9F\x8D\x82\xE2\x82\xAC",
                                      std::string(5000, 'a'),
                                      read_all(LLAMA2_SOURCE_DIR "/data/corpus.txt")};
    std::istringstream lines(texts.back());
    for (std::string line; std::getline(lines, line);) texts.push_back(line);
    for (const std::string& t : texts) {
      const auto tokens = static_cast<int64_t>(f.tok.encode(t, true).size());
      CHECK_MESSAGE(llama2::min_prompt_tokens(t.size(), f.limits.max_piece_bytes) <= tokens, t);
    }
  }

  TEST_CASE("no bound for tokenizers that can shrink text or merge unknown characters") {
    const auto base = std::filesystem::temp_directory_path() / "llama2_bound_XXXXXX";
    std::string dir = base.string();
    REQUIRE(mkdtemp(dir.data()) != nullptr);
    const std::unordered_map<std::string, std::string> common = {
        {"input", LLAMA2_SOURCE_DIR "/data/corpus.txt"},
        {"vocab_size", "400"},
        {"model_type", "bpe"},
        {"character_coverage", "0.98"},
        {"minloglevel", "2"},
        {"num_threads", "1"}};
    const std::vector<std::unordered_map<std::string, std::string>> variants = {
        {{"byte_fallback", "true"},
         {"normalization_rule_name", "nmt_nfkc"},
         {"remove_extra_whitespaces", "false"}},
        {{"byte_fallback", "true"},
         {"normalization_rule_name", "identity"},
         {"remove_extra_whitespaces", "true"}},
        {{"byte_fallback", "false"},
         {"normalization_rule_name", "identity"},
         {"remove_extra_whitespaces", "false"}},
    };
    for (size_t i = 0; i < variants.size(); ++i) {
      auto args = common;
      args.insert(variants[i].begin(), variants[i].end());
      std::string model;
      REQUIRE(sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model).ok());
      const std::string path = dir + "/v" + std::to_string(i) + ".model";
      std::ofstream(path, std::ios::binary) << model;
      const llama2::Tokenizer tok(path);
      CHECK(llama2::max_piece_bytes_for_bound(path, tok) == 0);
    }
    CHECK(llama2::max_piece_bytes_for_bound(dir + "/missing.model", Fixture().tok) == 0);
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("text prompts: refused by bytes when they cannot fit, tokenized otherwise") {
    Fixture f;
    f.limits.prompt.max_seq_len = 64;
    const int p = f.limits.max_piece_bytes;
    // ceil(bytes / p) + 1 + max_new_tokens > 64: refused without tokenizing.
    const std::string big(static_cast<size_t>(p) * 64, 'a');
    FrameRequest r = f.decode(
        json{{"op", "generate"}, {"id", "b"}, {"prompt", big}, {"max_new_tokens", 1}}.dump());
    REQUIRE(r.op == FrameRequest::Op::kError);
    CHECK(r.error["code"] == "prompt_too_long");
    CHECK(r.error["message"].get<std::string>().find("at least") != std::string::npos);
    // Within the bound: left to the tokenizer, then refused on the real count.
    const std::string mid(static_cast<size_t>(p) * 30, 'a');
    r = f.decode(
        json{{"op", "generate"}, {"id", "m"}, {"prompt", mid}, {"max_new_tokens", 1}}.dump());
    REQUIRE(r.op == FrameRequest::Op::kGenerate);
    CHECK(r.request.text_pending);
    llama2::ConstraintCompiler constraints(f.tok);
    const std::optional<llama2::Refusal> refusal =
        llama2::prepare_prompt(r.request, f.tok, f.config, f.limits.prompt, constraints);
    const auto tokens = f.tok.encode(mid, true).size();
    if (tokens + 1 > 64) {
      REQUIRE(refusal);
      CHECK(refusal->code == llama2::ErrorCode::kPromptTooLong);
    } else {
      CHECK_FALSE(refusal);
      CHECK(r.request.prompt.size() == tokens);
    }
    // A short prompt is tokenized and fits.
    r = f.decode(R"({"op":"generate","id":"s","prompt":"Hello","max_new_tokens":4})");
    REQUIRE(r.op == FrameRequest::Op::kGenerate);
    CHECK_FALSE(llama2::prepare_prompt(r.request, f.tok, f.config, f.limits.prompt, constraints));
    CHECK(r.request.prompt == f.tok.encode("Hello", true));
  }

  TEST_CASE("ops, ids and values are refused with their own messages") {
    const Fixture f;
    auto code_of = [&](const std::string& payload) {
      const FrameRequest r = f.decode(payload);
      if (r.op != FrameRequest::Op::kError) return std::string();
      CHECK(r.error["code"] == llama2::to_string(r.error_code));
      return r.error["code"].get<std::string>();
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
