// The tokenizer's vocabulary as the matcher sees it: the bytes each token adds to the text, and
// a trie over them so a mask walks shared prefixes once.
//
// Bytes of a token (SentencePiece conventions, as Tokenizer::decode renders them):
//  - a normal piece: its text with every "▁" (U+2581) replaced by a space;
//  - a byte-fallback piece <0xNN>: the one byte NN (a multi-byte character spans several tokens;
//    the grammar, being over bytes, accepts them one at a time);
//  - as the first token of the output, a normal piece loses one leading space (SentencePiece's
//    dummy prefix: decode drops it), so "▁{" may start a JSON answer; a piece that would add no
//    bytes at all there ("▁" alone) is never allowed;
//  - control pieces (<s>, </s>) and <unk> add no text and are never allowed, except EOS (</s>),
//    which the matcher allows exactly where the grammar accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama2 {
class Tokenizer;
}

namespace llama2::constrain {

// Byte strings with their token ids, as a trie in depth-first order: node i's subtree is
// [i, subtree_end[i]); node 0 is the root (depth 0, no byte).
struct FlatTrie {
  std::vector<uint8_t> byte;          // [nodes] the byte on the edge into the node
  std::vector<uint16_t> depth;        // [nodes]
  std::vector<uint32_t> subtree_end;  // [nodes]
  std::vector<uint32_t> ids_begin;    // [nodes + 1] ranges of `ids` ending at each node
  std::vector<int32_t> ids;           // token ids (with repeats when several strings share one)
  std::vector<uint32_t> tag;          // [ids] caller's value per entry (a suffix offset, or 0)

  struct Entry {
    std::string bytes;
    int32_t id;
    uint32_t tag;
  };
  // Entries with empty bytes are dropped.
  static FlatTrie build(std::vector<Entry> entries);
  size_t nodes() const { return byte.size(); }
};

enum class PieceKind : uint8_t { kNormal, kByte, kControl, kUnknown };

class TokenVocabulary {
 public:
  struct Piece {
    std::string text;  // SentencePiece spelling ("▁the", "<0x0A>", "</s>")
    PieceKind kind;
  };
  // From explicit pieces (tests and benchmarks without a model file).
  TokenVocabulary(const std::vector<Piece>& pieces, int eos_id);
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer);

  int size() const { return static_cast<int>(bytes_.size()); }
  int eos_id() const { return eos_id_; }
  int mask_words() const { return (size() + 31) / 32; }
  // What the token adds to the text after an earlier token, and as the first token.
  const std::string& bytes(int id) const { return bytes_[static_cast<size_t>(id)]; }
  const std::string& first_bytes(int id) const { return first_bytes_[static_cast<size_t>(id)]; }
  // False for control pieces (EOS included: the matcher handles it) and <unk>.
  bool usable(int id) const { return usable_[static_cast<size_t>(id)] != 0; }
  const FlatTrie& trie() const { return trie_; }
  const FlatTrie& first_trie() const { return first_trie_; }
  // Bytes of the longest token.
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  std::vector<std::string> bytes_, first_bytes_;
  std::vector<uint8_t> usable_;
  FlatTrie trie_, first_trie_;
  int eos_id_ = -1;
  size_t max_token_bytes_ = 0;
};

}  // namespace llama2::constrain
