#include "common/frame.h"

#include "common/check.h"

namespace llama2 {

std::string encode_frame(const std::string& payload, uint32_t max_payload) {
  if (payload.size() < kMinFrameBytes || payload.size() > max_payload) {
    throw Error("frame payload of " + std::to_string(payload.size()) + " bytes is outside [" +
                std::to_string(kMinFrameBytes) + ", " + std::to_string(max_payload) + "]");
  }
  const auto n = static_cast<uint32_t>(payload.size());
  std::string out;
  out.reserve(4 + payload.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out += payload;
  return out;
}

void FrameDecoder::feed(const char* data, size_t n) {
  if (pos_ > 0 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, n);
}

FrameDecoder::Status FrameDecoder::next(std::string* payload, std::string* error) {
  if (failed_) {
    *error = "stream already failed";
    return Status::kError;
  }
  if (buffered() < 4) return Status::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const uint32_t n = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  if (n < kMinFrameBytes || n > max_payload_) {
    failed_ = true;
    *error = "frame length " + std::to_string(n) + " is outside [" +
             std::to_string(kMinFrameBytes) + ", " + std::to_string(max_payload_) + "]";
    return Status::kError;
  }
  if (buffered() < 4 + static_cast<size_t>(n)) return Status::kNeedMore;
  payload->assign(buf_, pos_ + 4, n);
  pos_ += 4 + n;
  return Status::kFrame;
}

bool json_nesting_exceeds(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) return true;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace llama2
