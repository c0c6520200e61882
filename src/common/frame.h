// Framing of the serve protocol (docs/PROTOCOL.md): a 4-byte big-endian length, then that many
// bytes of UTF-8 JSON. Shared by the server (rank 0) and every client (C++, JVM shim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace llama2 {

constexpr uint32_t kMinFrameBytes = 2;  // "{}"
// Client -> server (requests): 1 MiB, a 32k-token prompt as text fits easily. The server refuses
// a longer frame (framing error, connection closed) so a client cannot make it buffer more.
constexpr uint32_t kMaxFrameBytes = 1 << 20;
// Server -> client (events): 16 MiB. Events that quote client input are bounded (a few KB), but a
// legitimate event can be large: a non-streamed `done` carries the whole text and every token id
// (100k+ tokens fit). The server never sends a larger frame: such an event is replaced by an
// `internal` error of its request. Clients (the C++ library, the JVM shim) accept up to this.
constexpr uint32_t kMaxEventFrameBytes = 16u << 20;

// length prefix + payload; Error when the payload is outside [kMinFrameBytes, max_payload].
std::string encode_frame(const std::string& payload, uint32_t max_payload = kMaxFrameBytes);

// Both ends refuse deeply nested JSON before parsing it: nlohmann/json parses iteratively but
// copies and dumps recursively, so a 1 MiB frame of brackets would overflow the stack.
// Deepest array/object nesting a frame may have (protocol messages need 3).
constexpr int kMaxJsonDepth = 64;

// True when `text` nests arrays/objects deeper than `max_depth` (brackets inside strings do not
// count). nlohmann parses and destroys deep documents iteratively but copies, compares and dumps
// them recursively, so one 1 MiB frame of '[' overflows the stack; every frame is checked with
// this before it is parsed. A linear scan, valid for any bytes (not only valid JSON).
bool json_nesting_exceeds(const std::string& text, int max_depth);

// Incremental decoder for a byte stream: feed what read() returned, then pop complete frames.
class FrameDecoder {
 public:
  enum class Status { kFrame, kNeedMore, kError };
  // Frames longer than `max_payload` are errors: kMaxFrameBytes on the server, which reads
  // requests; kMaxEventFrameBytes in clients, which read events.
  explicit FrameDecoder(uint32_t max_payload = kMaxFrameBytes) : max_payload_(max_payload) {}
  void feed(const char* data, size_t n);
  // kFrame: *payload holds the next frame. kNeedMore: wait for more bytes. kError: the length
  // prefix is out of range (*error says so); the stream cannot be resynchronised after that.
  Status next(std::string* payload, std::string* error);
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;  // consumed prefix of buf_ (compacted lazily to keep feed() amortised O(n))
  uint32_t max_payload_;
  bool failed_ = false;
};

}  // namespace llama2
