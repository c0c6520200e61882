#include "coordinator/serving/token_bound.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>

#include "coordinator/text/tokenizer.h"

namespace llama2 {
namespace {

// The settings of a SentencePiece model that decide whether the bound holds, read from the
// serialized ModelProto (protobuf wire format; field numbers of sentencepiece_model.proto).
struct SpmSettings {
  int model_type = 1;                    // TrainerSpec.model_type (3): UNIGRAM 1, BPE 2, ...
  bool byte_fallback = false;            // TrainerSpec.byte_fallback (35)
  bool has_charsmap = false;             // NormalizerSpec.precompiled_charsmap (2) not empty
  bool remove_extra_whitespaces = true;  // NormalizerSpec.remove_extra_whitespaces (4)
};

bool read_varint(std::string_view b, size_t& p, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < b.size(); shift += 7) {
    const auto c = static_cast<unsigned char>(b[p++]);
    v |= uint64_t{c & 0x7Fu} << shift;
    if ((c & 0x80) == 0) return true;
  }
  return false;
}

// Calls fn(field, varint value, length-delimited bytes) for every field of one message; false
// when the bytes are not a well-formed message.
template <class Fn>
bool for_each_field(std::string_view msg, Fn fn) {
  size_t p = 0;
  while (p < msg.size()) {
    uint64_t key = 0, v = 0;
    if (!read_varint(msg, p, key)) return false;
    std::string_view bytes;
    switch (key & 7) {
      case 0:
        if (!read_varint(msg, p, v)) return false;
        break;
      case 1:
      case 5: {
        const size_t n = (key & 7) == 1 ? 8 : 4;
        if (msg.size() - p < n) return false;
        p += n;
        break;
      }
      case 2:
        if (!read_varint(msg, p, v) || v > msg.size() - p) return false;
        bytes = msg.substr(p, v);
        p += v;
        break;
      default:
        return false;  // groups (3, 4) do not occur in sentencepiece_model.proto
    }
    fn(key >> 3, v, bytes);
  }
  return true;
}

bool read_settings(std::string_view model, SpmSettings* s) {
  bool ok = true;
  const bool top = for_each_field(model, [&](uint64_t field, uint64_t, std::string_view bytes) {
    if (field == 2) {  // trainer_spec
      ok = ok && for_each_field(bytes, [&](uint64_t f, uint64_t v, std::string_view) {
             if (f == 3) s->model_type = static_cast<int>(v);
             if (f == 35) s->byte_fallback = v != 0;
           });
    } else if (field == 3) {  // normalizer_spec
      ok = ok && for_each_field(bytes, [&](uint64_t f, uint64_t v, std::string_view b) {
             if (f == 2) s->has_charsmap = !b.empty();
             if (f == 4) s->remove_extra_whitespaces = v != 0;
           });
    }
  });
  return top && ok;
}

}  // namespace

int max_piece_bytes_for_bound(const std::string& model_path, const Tokenizer& tok) {
  std::ifstream in(model_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  SpmSettings s;
  if (!in || !read_settings(bytes.str(), &s)) return 0;
  const bool unigram_or_bpe = s.model_type == 1 || s.model_type == 2;
  if (!unigram_or_bpe || !s.byte_fallback || s.has_charsmap || s.remove_extra_whitespaces) return 0;
  // Byte pieces cover one byte and control pieces none; every other piece (normal, user-defined,
  // <unk>) is counted at its full length, which can only make the bound weaker.
  size_t longest = 1;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_byte(id) && !tok.is_control(id))
      longest = std::max(longest, tok.id_to_piece(id).size());
  }
  return static_cast<int>(longest);
}

int64_t min_prompt_tokens(size_t text_bytes, int max_piece_bytes) {
  if (max_piece_bytes <= 0) return 1;
  const auto p = static_cast<size_t>(max_piece_bytes);
  return 1 + static_cast<int64_t>((text_bytes + p - 1) / p);
}

}  // namespace llama2
