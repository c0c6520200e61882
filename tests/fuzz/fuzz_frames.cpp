// libFuzzer target: arbitrary bytes from a socket -> FrameDecoder -> JSON -> request classifier,
// the path every byte a client sends to `llama2 serve` takes (and, mirrored, every byte the
// server sends to the client library). It must never crash, hang, leak or throw anything but
// llama2::Error from sampling_from_json. Build and run: tests/fuzz/run_fuzz.sh.
//
// Invariants checked (a violation traps, which libFuzzer reports as a crash):
//  - splitting the stream into arbitrary chunks yields exactly the frames (and the final status)
//    of feeding it at once;
//  - every decoded payload survives encode_frame -> FrameDecoder unchanged;
//  - a document the depth guard admits can be copied and dumped (both recursive in nlohmann).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"  // json_nesting_exceeds, kMaxJsonDepth
#include "common/check.h"
#include "common/frame.h"
#include "common/sampling_params.h"

namespace {

using llama2::FrameDecoder;
using nlohmann::json;

#define FUZZ_REQUIRE(cond)         \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

// What the server would do with one frame payload (docs/PROTOCOL.md); mirrors SocketServer and
// parse_request without the tokenizer, so a rule that breaks on strange input breaks here too.
enum class Verdict {
  kTooDeep,
  kNotJson,
  kNotObject,
  kBadOp,
  kBadId,
  kBadKey,
  kBadValue,
  kGenerate,
  kCancel,
  kHealth,
  kStats,
};

bool valid_id(const json& j) {
  auto it = j.find("id");
  if (it == j.end() || !it->is_string()) return false;
  const size_t n = it->get_ref<const std::string&>().size();
  return n >= 1 && n <= 128;
}

bool only_keys(const json& j, const std::set<std::string>& allowed) {
  for (const auto& item : j.items()) {
    if (!allowed.count(item.key())) return false;
  }
  return true;
}

Verdict classify_generate(const json& j) {
  static const std::set<std::string> kKeys = {"op",
                                              "id",
                                              "prompt",
                                              "prompt_tokens",
                                              "temperature",
                                              "top_p",
                                              "top_k",
                                              "repetition_penalty",
                                              "max_new_tokens",
                                              "seed",
                                              "stop",
                                              "ignore_eos",
                                              "stream",
                                              "timeout_ms"};
  if (!valid_id(j)) return Verdict::kBadId;
  if (!only_keys(j, kKeys)) return Verdict::kBadKey;
  if (auto s = j.find("stream"); s != j.end() && !s->is_null() && !s->is_boolean()) {
    return Verdict::kBadValue;
  }
  if (auto t = j.find("timeout_ms"); t != j.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) return Verdict::kBadValue;
  }
  llama2::SamplingParams params;
  try {
    params = llama2::sampling_from_json(j, llama2::SamplingParams{});
  } catch (const llama2::Error&) {  // the documented failure; anything else escapes and crashes
    return Verdict::kBadValue;
  }
  const bool has_text = j.contains("prompt") && !j["prompt"].is_null();
  const bool has_ids = j.contains("prompt_tokens") && !j["prompt_tokens"].is_null();
  if (has_text == has_ids) return Verdict::kBadValue;
  int prompt_tokens = 0;
  if (has_text) {
    if (!j["prompt"].is_string()) return Verdict::kBadValue;
    // One token per byte plus BOS: the byte-fallback worst case, as a stand-in for the tokenizer.
    prompt_tokens = static_cast<int>(j["prompt"].get_ref<const std::string&>().size()) + 1;
  } else {
    const json& ids = j["prompt_tokens"];
    if (!ids.is_array() || ids.empty()) return Verdict::kBadValue;
    for (const json& v : ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= 32000) {
        return Verdict::kBadValue;
      }
    }
    prompt_tokens = static_cast<int>(ids.size());
  }
  const std::string bad = llama2::validate_sampling(params, prompt_tokens, 4096);
  return bad.empty() ? Verdict::kGenerate : Verdict::kBadValue;
}

Verdict classify(const std::string& payload) {
  // Checked before parsing: the recursive copy/dump of a deep document overflows the stack.
  if (llama2::json_nesting_exceeds(payload, llama2::kMaxJsonDepth)) {
    // Parsing and destroying are iterative in nlohmann 3.11; prove it on what we refuse.
    const json deep = json::parse(payload, nullptr, /*allow_exceptions=*/false);
    (void)deep;
    return Verdict::kTooDeep;
  }
  const json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Verdict::kNotJson;
  // The server copies request fields and dumps them into error messages.
  const json copy = j;
  FUZZ_REQUIRE(copy == j);
  FUZZ_REQUIRE(!j.dump().empty());
  if (!j.is_object()) return Verdict::kNotObject;
  auto op = j.find("op");
  if (op == j.end() || !op->is_string()) return Verdict::kBadOp;
  const std::string& name = op->get_ref<const std::string&>();
  if (name == "generate") return classify_generate(j);
  if (name == "cancel") {
    if (!valid_id(j)) return Verdict::kBadId;
    return only_keys(j, {"op", "id"}) ? Verdict::kCancel : Verdict::kBadKey;
  }
  if (name == "health" || name == "stats") {
    if (!only_keys(j, {"op"})) return Verdict::kBadKey;
    return name == "health" ? Verdict::kHealth : Verdict::kStats;
  }
  return Verdict::kBadOp;
}

// Pops every complete frame; returns the status that ended the scan.
FrameDecoder::Status drain(FrameDecoder& d, std::vector<std::string>* frames) {
  std::string payload, error;
  FrameDecoder::Status st;
  while ((st = d.next(&payload, &error)) == FrameDecoder::Status::kFrame) {
    frames->push_back(payload);
  }
  if (st == FrameDecoder::Status::kError) FUZZ_REQUIRE(!error.empty());
  return st;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);

  FrameDecoder whole;
  whole.feed(bytes, size);
  std::vector<std::string> expected;
  const FrameDecoder::Status expected_status = drain(whole, &expected);

  // Chunk sizes come from a hash of the input, so a crashing input reproduces exactly while
  // different inputs are split differently (reads of 1 byte, a few bytes, or a whole buffer).
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  FrameDecoder chunked;
  std::vector<std::string> got;
  FrameDecoder::Status status = FrameDecoder::Status::kNeedMore;
  size_t off = 0;
  while (off < size) {
    h ^= h << 13;  // xorshift64
    h ^= h >> 7;
    h ^= h << 17;
    const size_t want = (h & 3) == 0 ? 1 + (h >> 8) % 4096 : 1 + (h >> 8) % 7;
    const size_t n = std::min(want, size - off);
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
    FrameDecoder again;
    const std::string frame = llama2::encode_frame(payload);
    again.feed(frame.data(), frame.size());
    std::vector<std::string> one;
    FUZZ_REQUIRE(drain(again, &one) == FrameDecoder::Status::kNeedMore);
    FUZZ_REQUIRE(one.size() == 1 && one[0] == payload);
    classify(payload);
  }
  return 0;
}
