#include "common/sentencepiece_model.h"

#include <cstdint>
#include <fstream>
#include <sstream>

#include "common/check.h"

namespace llama2 {
namespace {

// A cursor over protobuf wire data; Error naming `source` when the data ends mid-field.
class Wire {
 public:
  Wire(const std::string& bytes, size_t begin, size_t end, const std::string& source)
      : b_(bytes), at_(begin), end_(end), source_(source) {}
  bool done() const { return at_ >= end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= end_) bad("a varint runs past the end");
      const auto c = static_cast<uint8_t>(b_[at_++]);
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    bad("a varint is longer than 10 bytes");
  }
  // Skips the value of a field of wire type `type`; for type 2 sets [*begin, *end).
  void skip(uint64_t type, size_t* begin = nullptr, size_t* end = nullptr) {
    size_t n = 0;
    switch (type) {
      case 0:
        varint();
        return;
      case 1:
        n = 8;
        break;
      case 2:
        n = static_cast<size_t>(varint());
        if (begin != nullptr) *begin = at_;
        break;
      case 5:
        n = 4;
        break;
      default:
        bad("wire type " + std::to_string(type) + " is not used by SentencePiece");
    }
    if (n > end_ - at_) bad("a field runs past the end");
    at_ += n;
    if (end != nullptr) *end = at_;
  }
  [[noreturn]] void bad(const std::string& why) const {
    throw Error(source_ + ": not a SentencePiece model (" + why + ")");
  }

 private:
  const std::string& b_;
  size_t at_, end_;
  const std::string& source_;
};

}  // namespace

SentencePieceInfo parse_sentencepiece_info(const std::string& bytes, const std::string& source) {
  SentencePieceInfo info;
  Wire top(bytes, 0, bytes.size(), source);
  while (!top.done()) {
    const uint64_t key = top.varint();
    const uint64_t field = key >> 3, type = key & 7;
    size_t begin = 0, end = 0;
    top.skip(type, &begin, &end);
    if (field == 1 && type == 2) ++info.pieces;
    if (field != 2 || type != 2) continue;
    Wire spec(bytes, begin, end, source);  // TrainerSpec
    while (!spec.done()) {
      const uint64_t k = spec.varint();
      if ((k >> 3 == 41 || k >> 3 == 42) && (k & 7) == 0) {
        // int32 in a varint: negative ids are sign-extended to 64 bits.
        const auto id = static_cast<int>(static_cast<int64_t>(spec.varint()));
        (k >> 3 == 41 ? info.bos_id : info.eos_id) = id;
      } else {
        spec.skip(k & 7);
      }
    }
  }
  if (info.pieces == 0) top.bad("no pieces");
  return info;
}

SentencePieceInfo read_sentencepiece_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the SentencePiece tokenizer model");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_sentencepiece_info(ss.str(), path);
}

}  // namespace llama2
