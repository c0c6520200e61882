#include "coordinator/text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstddef>
#include <fstream>

#include "common/check.h"

namespace llama2 {
namespace {

// Length (1..4) of the well-formed UTF-8 character at p[0]; 0 when p[0..n) is a proper prefix of
// one, so later bytes may still complete it; -1 when no continuation can, in which case decoders
// (SentencePiece included) replace p[0] alone with U+FFFD and resume at p[1]. The ranges are
// Unicode's table of well-formed sequences: they exclude overlongs (C0, C1, E0 80..9F,
// F0 80..8F), surrogates (ED A0..BF) and code points above U+10FFFF (F4 90.., F5..FF).
int utf8_char_status(const unsigned char* p, size_t n) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return 0;
    const unsigned char c = p[i];
    if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return -1;
  }
  return len;
}

}  // namespace

bool is_valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const int len = utf8_char_status(p + i, s.size() - i);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

Tokenizer::Tokenizer(const std::string& model_path)
    : path_(model_path), sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // SentencePiece's own message for a missing file is terse; name the path in ours.
  if (!std::ifstream(model_path, std::ios::binary)) {
    throw Error("tokenizer model '" + model_path + "' cannot be opened");
  }
  const auto status = sp_->Load(model_path);
  if (!status.ok()) {
    throw Error("tokenizer model '" + model_path +
                "' is not a SentencePiece model: " + status.ToString());
  }
  vocab_size_ = sp_->GetPieceSize();
  if (vocab_size_ <= 0) throw Error("tokenizer model '" + model_path + "' has no pieces");
  bos_id_ = sp_->bos_id();
  eos_id_ = sp_->eos_id();
  unk_id_ = sp_->unk_id();
}

Tokenizer::~Tokenizer() = default;

std::vector<int> Tokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) {
    throw Error("tokenizer '" + path_ + "' failed to encode: " + status.ToString());
  }
  if (add_bos) {
    if (bos_id_ < 0) throw Error("tokenizer model '" + path_ + "' defines no <s> piece");
    ids.insert(ids.begin(), bos_id_);
  }
  return ids;
}

void Tokenizer::check_id(int id) const {
  // SentencePiece aborts the process (a protobuf CHECK) on ids out of range, so this must come
  // before every call that takes an id.
  if (id < 0 || id >= vocab_size_) {
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                std::to_string(vocab_size_) + ") of tokenizer '" + path_ + "'");
  }
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  for (int id : ids) check_id(id);
  std::string text;
  const auto status = sp_->Decode(ids, &text);
  if (!status.ok()) {
    throw Error("tokenizer '" + path_ + "' failed to decode: " + status.ToString());
  }
  return text;
}

std::string Tokenizer::id_to_piece(int id) const {
  check_id(id);
  return sp_->IdToPiece(id);
}

bool Tokenizer::is_byte(int id) const {
  return id >= 0 && id < vocab_size_ && sp_->IsByte(id);
}

bool Tokenizer::is_control(int id) const {
  return id >= 0 && id < vocab_size_ && sp_->IsControl(id);
}

unsigned char Tokenizer::byte_value(int id) const {
  if (!is_byte(id)) {
    throw Error("token id " + std::to_string(id) + " of tokenizer '" + path_ +
                "' is not a byte piece");
  }
  // Byte pieces are spelled <0xNN> with two upper-case hex digits.
  const std::string& piece = sp_->IdToPiece(id);
  LLAMA2_CHECK_MSG("tokenizer", piece.size() == 6 && piece.compare(0, 3, "<0x") == 0,
                   "byte piece spelling", "piece '" + piece + "' of id " + std::to_string(id));
  return static_cast<unsigned char>(std::stoi(piece.substr(3, 2), nullptr, 16));
}

std::string Tokenizer::continuation(int id) const {
  check_id(id);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (continuation_.empty()) {
    continuation_.resize(static_cast<size_t>(vocab_size_));
    continuation_known_.assign(static_cast<size_t>(vocab_size_), 0);
    anchor_text_ = decode({unk_id_});
  }
  if (!continuation_known_[id]) {
    const std::string anchored = decode({unk_id_, id});
    LLAMA2_CHECK(anchored.compare(0, anchor_text_.size(), anchor_text_) == 0);
    continuation_[id] = anchored.substr(anchor_text_.size());
    continuation_known_[id] = 1;
  }
  return continuation_[id];
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool keep_special)
    : tokenizer_(tokenizer), keep_special_(keep_special) {}

std::string StreamingDetokenizer::emit_decided_bytes() {
  const auto* p = reinterpret_cast<const unsigned char*>(held_bytes_.data());
  std::string out;
  size_t start = 0;
  while (start < held_bytes_.size()) {
    const int status = utf8_char_status(p + start, held_bytes_.size() - start);
    if (status == 0) break;  // an unfinished character: wait for more bytes
    const size_t len = status > 0 ? static_cast<size_t>(status) : 1;
    // SentencePiece renders the chunk (the character, or U+FFFD for an invalid lead byte); its
    // decode of a byte run is the concatenation of exactly these chunks.
    out += tokenizer_.decode(
        std::vector<int>(held_ids_.begin() + static_cast<std::ptrdiff_t>(start),
                         held_ids_.begin() + static_cast<std::ptrdiff_t>(start + len)));
    start += len;
  }
  held_ids_.erase(held_ids_.begin(), held_ids_.begin() + static_cast<std::ptrdiff_t>(start));
  held_bytes_.erase(0, start);
  return out;
}

std::string StreamingDetokenizer::push(int id) {
  tokenizer_.check_id(id);
  if (tokenizer_.is_byte(id)) {
    seen_non_control_ = true;
    held_ids_.push_back(id);
    held_bytes_.push_back(static_cast<char>(tokenizer_.byte_value(id)));
    return emit_decided_bytes();
  }
  // Any other piece ends the byte run, so a held unfinished character can no longer complete:
  // decoding the held bytes alone gives what full decode gives at that spot (U+FFFD per byte).
  std::string out;
  if (!held_ids_.empty()) {
    out = tokenizer_.decode(held_ids_);
    held_ids_.clear();
    held_bytes_.clear();
  }
  if (tokenizer_.is_control(id)) return keep_special_ ? out + tokenizer_.id_to_piece(id) : out;
  if (!seen_non_control_) {
    seen_non_control_ = true;
    return out + tokenizer_.decode({id});  // first piece: its dummy-prefix space is dropped
  }
  return out + tokenizer_.continuation(id);
}

std::string StreamingDetokenizer::finish() {
  std::string out = held_ids_.empty() ? std::string() : tokenizer_.decode(held_ids_);
  held_ids_.clear();
  held_bytes_.clear();
  seen_non_control_ = false;
  return out;
}

}  // namespace llama2
