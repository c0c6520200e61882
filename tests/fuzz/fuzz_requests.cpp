// libFuzzer target: the whole request path of `llama2 serve`, the code rank 0 runs on every byte a
// client sends (src/coordinator/serving/protocol.h), with the real tokenizer of
// tests/models/tiny-gqa:
//
//   bytes -> FrameDecoder -> decode_request (UTF-8, nesting, JSON, op, id, request validation,
//   byte-length bound) -> prepare_prompt (SentencePiece, length checks) -> error reply ->
//   event_frame -> the client library's decoder -> JSON
//
// Two views of each input: (1) a byte stream of frames, fed at once and in hash-chosen chunks;
// (2) when it starts with '{', one payload, after expanding repeat markers so that small inputs
// reach huge values (long keys, ops, ids, prompts) and escape-heavy strings:
//   0xFD n   repeats the byte before it n * 64 times
//   0xFE n   repeats the two bytes before it n * 32 times  (\"\"\"...: every byte escaped)
// (0xFD/0xFE never occur in UTF-8, so the markers cannot collide with real text.) Expanded
// payloads stop at 16 KiB: twice the reply bound checked below (8 KB), so an unbounded echo is
// caught, while the byte-by-byte coverage tracing of larger payloads would halve the execution
// rate. The 1 MiB frames that crashed rank 0 are cases of tests/unit/test_protocol.cpp and
// tests/integration/serve_hostile_test.cpp.
//
// Invariants (a violation traps, which libFuzzer reports as a crash):
//  - chunked feeding yields exactly the frames and final status of feeding at once;
//  - every decoded payload survives encode_frame -> FrameDecoder unchanged;
//  - every error reply is a frame of at most 8 KB that the client decodes to an error event with
//    a documented code and an id that is null, an integer or a string of at most 128 bytes;
//  - an accepted generation has a prompt of valid token ids that fits the limits, and its token
//    count is at least the byte-length bound (the bound never refuses a prompt that could fit);
//  - the same payload as an HTTP body (coordinator/http/openai_api.h, chat and completions) is
//    accepted or refused with 400/404 and a bounded message;
//  - no exception escapes (building a reply never throws).
// Build and run: tests/fuzz/run_fuzz.sh (tests/fuzz/README.md records 1,000,000 executions).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/frame.h"
#include "common/model_config.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/serving/protocol.h"
#include "coordinator/serving/token_bound.h"
#include "coordinator/text/tokenizer.h"

#ifndef FUZZ_MODEL_DIR
#error "FUZZ_MODEL_DIR must name the tiny test model (tests/models/tiny-gqa)"
#endif

namespace {

using llama2::FrameDecoder;
using llama2::FrameRequest;
using nlohmann::json;

#define FUZZ_REQUIRE(cond)         \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

constexpr size_t kMaxReplyFrameBytes = 8192;
constexpr size_t kMaxExpandedBytes = 16384;

// A server as `llama2 serve --max-seq-len 64 --max-new-tokens 8` would run it: the small limit
// puts the byte-length bound's edge (64 tokens, a few hundred bytes) where mutations reach it
// often, and keeps each tokenization short enough for a thousand executions per second.
struct Server {
  llama2::ModelConfig config = llama2::load_model_config(FUZZ_MODEL_DIR);
  llama2::Tokenizer tok{FUZZ_MODEL_DIR "/tokenizer.model"};
  llama2::SamplingParams defaults;
  llama2::ServeLimits limits;
  // Compiles the constraints requests carry (its grammar cache is the only state that changes).
  mutable llama2::ConstraintCompiler constraints{tok};
  Server() {
    defaults.max_new_tokens = 8;
    limits.prompt.max_seq_len = 64;
    limits.request_timeout_ms = 600000;
    limits.max_piece_bytes =
        llama2::max_piece_bytes_for_bound(FUZZ_MODEL_DIR "/tokenizer.model", tok);
    FUZZ_REQUIRE(limits.max_piece_bytes > 0);
  }
};

const Server& server() {
  static const Server* s = new Server();  // leaked on purpose: libFuzzer never unloads it
  return *s;
}

void check_reply(const json& event) {
  const std::string frame = llama2::event_frame(event);
  FUZZ_REQUIRE(frame.size() <= kMaxReplyFrameBytes);
  FrameDecoder client(llama2::kMaxEventFrameBytes);
  client.feed(frame.data(), frame.size());
  std::string payload, error;
  FUZZ_REQUIRE(client.next(&payload, &error) == FrameDecoder::Status::kFrame);
  FUZZ_REQUIRE(client.buffered() == 0);
  const json got = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  FUZZ_REQUIRE(got.is_object() && got.value("event", "") == "error");
  static const std::set<std::string> kCodes = {"invalid_request", "prompt_too_long", "internal"};
  FUZZ_REQUIRE(got.contains("code") && got["code"].is_string() &&
               kCodes.count(got["code"].get<std::string>()));
  FUZZ_REQUIRE(got.contains("message") && got["message"].is_string());
  const json& id = got["id"];
  FUZZ_REQUIRE(id.is_null() || id.is_number_integer() ||
               (id.is_string() && id.get<std::string>().size() <= llama2::kMaxEchoedIdBytes));
}

// What the server does with one frame payload, minus connection state.
void serve_payload(const std::string& payload) {
  const Server& s = server();
  FrameRequest r = llama2::decode_request(payload, s.defaults, s.config, s.limits);
  if (r.op == FrameRequest::Op::kError) return check_reply(r.error);
  if (r.op != FrameRequest::Op::kGenerate) return;
  FUZZ_REQUIRE(!r.id.empty() && r.id.size() <= llama2::kMaxEchoedIdBytes);
  const bool text = r.request.text_pending;
  const size_t text_bytes = r.request.prompt_text.size();
  const std::optional<llama2::Refusal> refusal =
      llama2::prepare_prompt(r.request, s.tok, s.config, s.limits.prompt, s.constraints);
  if (text && r.request.ok()) {
    // Tokenized: the byte-length bound must not exceed the real count.
    FUZZ_REQUIRE(llama2::min_prompt_tokens(text_bytes, s.limits.max_piece_bytes) <=
                 static_cast<int64_t>(r.request.prompt.size()));
  }
  if (refusal) return check_reply(llama2::error_event(r.id, refusal->code, refusal->message));
  FUZZ_REQUIRE(!r.request.prompt.empty());
  for (int t : r.request.prompt) FUZZ_REQUIRE(t >= 0 && t < s.config.vocab_size);
  FUZZ_REQUIRE(static_cast<int64_t>(r.request.prompt.size()) + r.request.params.max_new_tokens <=
               s.limits.prompt.max_tokens());
}

// The HTTP front's view of the same bytes as a request body (coordinator/http/openai_api.h): an
// answer or an error with an HTTP status and a bounded message, never a crash.
void http_payload(const std::string& payload) {
  const Server& s = server();
  const auto context = [&s](bool strict) {
    llama2::ApiContext c;
    c.served_models = {"fuzz-model", "fuzz-alias"};
    c.defaults = s.defaults;
    c.config = s.config;
    c.strict = strict;  // --strict-api
    return c;
  };
  static const llama2::ApiContext contexts[] = {context(false), context(true)};
  for (const llama2::ApiContext& ctx : contexts) {
    for (llama2::ApiKind kind : {llama2::ApiKind::kChat, llama2::ApiKind::kCompletion}) {
      const llama2::ApiParse p = llama2::parse_api_request(payload, kind, ctx);
      if (!p.error) continue;
      FUZZ_REQUIRE(p.error->status == 400 || p.error->status == 404);
      FUZZ_REQUIRE(p.error->message.size() <= 4 * llama2::kMaxMessageBytes);
      (void)llama2::api_error_body(*p.error).dump(-1, ' ', false, json::error_handler_t::replace);
    }
  }
}

FrameDecoder::Status drain(FrameDecoder& d, std::vector<std::string>* frames) {
  std::string payload, error;
  FrameDecoder::Status st;
  while ((st = d.next(&payload, &error)) == FrameDecoder::Status::kFrame)
    frames->push_back(payload);
  if (st == FrameDecoder::Status::kError) FUZZ_REQUIRE(!error.empty());
  return st;
}

// View (2): the input as one payload, repeat markers expanded, capped at kMaxExpandedBytes.
std::string expand(const uint8_t* data, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && out.size() < kMaxExpandedBytes; ++i) {
    const uint8_t b = data[i];
    if ((b == 0xFD || b == 0xFE) && i + 1 < size) {
      const size_t unit = b == 0xFD ? 1 : 2;
      const size_t times = size_t{data[++i]} * (b == 0xFD ? 64 : 32);
      if (out.size() < unit) continue;
      const std::string piece = out.substr(out.size() - unit);
      for (size_t k = 0; k < times && out.size() < kMaxExpandedBytes; ++k) out += piece;
      continue;
    }
    out.push_back(static_cast<char>(b));
  }
  if (out.size() > kMaxExpandedBytes) out.resize(kMaxExpandedBytes);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);

  // (1) A byte stream: fed at once and in chunks chosen by a hash of the input (reads of 1 byte,
  // a few bytes or a whole buffer), so a crashing input reproduces exactly.
  FrameDecoder whole;
  whole.feed(bytes, size);
  std::vector<std::string> expected;
  const FrameDecoder::Status expected_status = drain(whole, &expected);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  FrameDecoder chunked;
  std::vector<std::string> got;
  FrameDecoder::Status status = FrameDecoder::Status::kNeedMore;
  for (size_t off = 0; off < size;) {
    h ^= h << 13;  // xorshift64
    h ^= h >> 7;
    h ^= h << 17;
    const size_t n = std::min((h & 3) == 0 ? 1 + (h >> 8) % 4096 : 1 + (h >> 8) % 7, size - off);
    chunked.feed(bytes + off, n);
    off += n;
    status = drain(chunked, &got);
  }
  if (size == 0) status = drain(chunked, &got);
  FUZZ_REQUIRE(got == expected);
  FUZZ_REQUIRE(status == expected_status);
  for (const std::string& payload : got) {
    FUZZ_REQUIRE(payload.size() >= llama2::kMinFrameBytes &&
                 payload.size() <= llama2::kMaxFrameBytes);
    const std::string frame = llama2::encode_frame(payload);
    FrameDecoder again;
    again.feed(frame.data(), frame.size());
    std::vector<std::string> one;
    FUZZ_REQUIRE(drain(again, &one) == FrameDecoder::Status::kNeedMore);
    FUZZ_REQUIRE(one.size() == 1 && one[0] == payload);
    serve_payload(payload);
    http_payload(payload);
  }

  // (2) One payload with repeats expanded.
  if (size > 0 && data[0] == '{') {
    const std::string payload = expand(data, size);
    if (payload.size() >= llama2::kMinFrameBytes) serve_payload(payload);
    http_payload(payload);
  }
  return 0;
}
