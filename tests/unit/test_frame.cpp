// Framing of the serve protocol (src/common/frame.{h,cpp}). Length prefixes are written by hand
// here rather than with encode_frame, so that a symmetric bug in both directions cannot hide.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/frame.h"

using llama2::FrameDecoder;
using llama2::kMaxFrameBytes;
using Status = FrameDecoder::Status;

namespace {

std::string prefix(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)};
}

// Every complete frame currently decodable, and the status that ended the scan.
std::vector<std::string> drain(FrameDecoder& d, Status* last, std::string* error = nullptr) {
  std::vector<std::string> out;
  std::string payload, err;
  Status st;
  while ((st = d.next(&payload, &err)) == Status::kFrame) out.push_back(payload);
  *last = st;
  if (error) *error = err;
  return out;
}

}  // namespace

TEST_SUITE("frame") {
  TEST_CASE("encode writes a big-endian length before the payload") {
    const std::string payload = R"({"op":"health"})";
    CHECK(llama2::encode_frame(payload) == prefix(15) + payload);
    const std::string big(0x010203, 'x');
    const std::string f = llama2::encode_frame(big);
    CHECK(f.substr(0, 4) == std::string("\x00\x01\x02\x03", 4));
    CHECK(f.size() == 4 + big.size());
  }

  TEST_CASE("round trip") {
    const std::string payload = R"({"event":"token","id":"r1","text":"h\u00e9llo \u4e16"})";
    FrameDecoder d;
    const std::string f = llama2::encode_frame(payload);
    d.feed(f.data(), f.size());
    Status st;
    const auto frames = drain(d, &st);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0] == payload);
    CHECK(st == Status::kNeedMore);
    CHECK(d.buffered() == 0);
  }

  TEST_CASE("byte-by-byte feeding yields each frame exactly when its last byte arrives") {
    const std::vector<std::string> payloads = {"{}", R"({"a":1})", std::string(300, 'z')};
    std::string stream;
    std::vector<size_t> ends;  // stream offset just past each frame
    for (const auto& p : payloads) {
      stream += prefix(static_cast<uint32_t>(p.size())) + p;
      ends.push_back(stream.size());
    }
    FrameDecoder d;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); ++i) {
      d.feed(&stream[i], 1);
      Status st;
      const auto frames = drain(d, &st);
      CHECK(st == Status::kNeedMore);
      const bool is_end = std::find(ends.begin(), ends.end(), i + 1) != ends.end();
      CHECK(frames.size() == (is_end ? 1u : 0u));
      got.insert(got.end(), frames.begin(), frames.end());
    }
    CHECK(got == payloads);
  }

  TEST_CASE("several frames in one feed, the last one incomplete") {
    std::string stream;
    for (int i = 0; i < 5; ++i) stream += llama2::encode_frame("{\"i\":" + std::to_string(i) + "}");
    const std::string tail = llama2::encode_frame(R"({"tail":true})");
    stream += tail.substr(0, 7);
    FrameDecoder d;
    d.feed(stream.data(), stream.size());
    Status st;
    auto frames = drain(d, &st);
    REQUIRE(frames.size() == 5);
    for (int i = 0; i < 5; ++i) CHECK(frames[i] == "{\"i\":" + std::to_string(i) + "}");
    CHECK(st == Status::kNeedMore);
    CHECK(d.buffered() == 7);
    d.feed(tail.data() + 7, tail.size() - 7);
    frames = drain(d, &st);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0] == R"({"tail":true})");
  }

  TEST_CASE("lengths 0, 1 and kMaxFrameBytes+1 are errors, and the error is sticky") {
    for (uint32_t n : {0u, 1u, kMaxFrameBytes + 1, 0xFFFFFFFFu}) {
      CAPTURE(n);
      FrameDecoder d;
      const std::string p = prefix(n) + "{}";
      d.feed(p.data(), p.size());
      Status st;
      std::string error;
      CHECK(drain(d, &st, &error).empty());
      CHECK(st == Status::kError);
      CHECK(error.find(std::to_string(n)) != std::string::npos);  // the message names the length
      // A framing error cannot be resynchronised: even a valid frame afterwards is refused.
      const std::string ok = llama2::encode_frame("{}");
      d.feed(ok.data(), ok.size());
      CHECK(drain(d, &st).empty());
      CHECK(st == Status::kError);
    }
  }

  TEST_CASE("an error prefix after good frames still yields the good frames first") {
    const std::string stream = llama2::encode_frame("{}") + prefix(1) + "x";
    FrameDecoder d;
    d.feed(stream.data(), stream.size());
    Status st;
    CHECK(drain(d, &st).size() == 1);
    CHECK(st == Status::kError);
  }

  TEST_CASE("exactly kMaxFrameBytes and exactly kMinFrameBytes decode") {
    for (uint32_t n : {kMaxFrameBytes, llama2::kMinFrameBytes}) {
      CAPTURE(n);
      const std::string payload(n, 'p');
      const std::string f = llama2::encode_frame(payload);
      FrameDecoder d;
      d.feed(f.data(), f.size() - 1);  // one byte short: still waiting
      Status st;
      CHECK(drain(d, &st).empty());
      CHECK(st == Status::kNeedMore);
      d.feed(f.data() + f.size() - 1, 1);
      const auto frames = drain(d, &st);
      REQUIRE(frames.size() == 1);
      CHECK(frames[0] == payload);
    }
  }

  TEST_CASE("encode rejects payloads outside [kMinFrameBytes, kMaxFrameBytes]") {
    CHECK_THROWS_AS(llama2::encode_frame(""), llama2::Error);
    CHECK_THROWS_AS(llama2::encode_frame("x"), llama2::Error);
    CHECK_THROWS_AS(llama2::encode_frame(std::string(kMaxFrameBytes + 1, 'x')), llama2::Error);
    CHECK_NOTHROW(llama2::encode_frame(std::string(kMaxFrameBytes, 'x')));
  }

  TEST_CASE("a long stream of small frames keeps the buffer compacted") {
    // feed() compacts the consumed prefix lazily; after draining, nothing is left buffered and
    // every payload is intact (a compaction bug would shift or drop bytes).
    FrameDecoder d;
    for (int i = 0; i < 10000; ++i) {
      const std::string f = llama2::encode_frame("[" + std::to_string(i) + "]");
      d.feed(f.data(), f.size());
      std::string payload, err;
      REQUIRE(d.next(&payload, &err) == Status::kFrame);
      REQUIRE(payload == "[" + std::to_string(i) + "]");
    }
    CHECK(d.buffered() == 0);
  }
}
