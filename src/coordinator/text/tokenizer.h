// Text <-> token ids on a SentencePiece model (LLaMA-2's tokenizer.model or one trained by
// tools/train_tokenizer), plus the streaming detokenizer the generation loop uses to hand out text
// one token at a time without ever splitting a UTF-8 character.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llama2 {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(const std::string& s);

class Tokenizer {
 public:
  // Throws llama2::Error naming `model_path` when it is missing or not a SentencePiece model.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // SentencePiece encoding (dummy-prefix space included); <s> first when add_bos.
  std::vector<int> encode(const std::string& text, bool add_bos) const;
  // Exactly SentencePiece's decode: <s>/</s> vanish, the first non-control piece loses its
  // dummy-prefix space, byte pieces that do not form UTF-8 come out as U+FFFD, one per byte.
  // Throws llama2::Error naming the first id outside [0, vocab_size()).
  std::string decode(const std::vector<int>& ids) const;

  int vocab_size() const { return vocab_size_; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }
  int unk_id() const { return unk_id_; }
  // The piece text, e.g. "▁the" or "<0xE4>"; throws on an id out of range.
  std::string id_to_piece(int id) const;
  // <0xNN> byte-fallback pieces; false for ids out of range.
  bool is_byte(int id) const;
  // Control pieces (<s>, </s>), which decode to nothing; false for ids out of range.
  bool is_control(int id) const;
  // The byte a byte piece stands for (0..255); throws when `id` is not a byte piece.
  unsigned char byte_value(int id) const;
  // Throws llama2::Error naming `id` and the valid range unless 0 <= id < vocab_size().
  void check_id(int id) const;
  // The text a normal (not byte, not control) piece adds after some earlier non-control piece:
  // decode({<unk>, id}) with <unk>'s text cut off. Decoded once per id, then served from a cache
  // (generation asks for it once per token of every sequence). Thread-safe.
  std::string continuation(int id) const;

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int vocab_size_ = 0;
  int bos_id_ = -1;
  int eos_id_ = -1;
  int unk_id_ = -1;
  mutable std::mutex cache_mu_;                            // guards the three below
  mutable std::vector<std::string> continuation_;          // [vocab_size] once known
  mutable std::vector<unsigned char> continuation_known_;  // [vocab_size]
  mutable std::string anchor_text_;                        // decode({<unk>}), cut from each
};

// Turns ids into text as they are generated. Contract: every string push()/finish() returns is
// valid UTF-8, and their concatenation is byte-identical to tokenizer.decode(all ids pushed).
// Work per push is bounded (at most a few tiny decodes), never a re-decode of the whole sequence.
//
// How: SentencePiece's decode is a concatenation of per-piece surfaces, with two couplings that
// are handled here. (1) Consecutive byte pieces are decoded together as UTF-8, so bytes are held
// until the character they start is complete or can no longer become valid. (2) The first
// non-control piece loses its leading "▁"; later pieces are decoded behind a fixed anchor (<unk>)
// and the anchor's text is cut off, so they keep their space exactly as in a full decode.
class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object. `keep_special` (a request's skip_special_tokens false):
  // control pieces such as <s> and </s> appear in the text as their piece strings; by default they
  // add nothing, as in decode().
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool keep_special = false);

  // Text completed by `id` (possibly empty). Throws llama2::Error on an id out of range.
  std::string push(int id);
  // Whatever is still held (an unfinished byte sequence, as full decode renders it), then resets
  // for a new sequence.
  std::string finish();

 private:
  // Emits the held byte pieces that start a character already decided (complete or invalid).
  std::string emit_decided_bytes();

  const Tokenizer& tokenizer_;
  std::vector<int> held_ids_;      // byte pieces of a character not decided yet (at most 3)
  std::string held_bytes_;         // their byte values
  bool seen_non_control_ = false;  // whether the dummy-prefix space has been dropped already
  bool keep_special_ = false;
};

}  // namespace llama2
