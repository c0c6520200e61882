// Walking a token trie through the parser: the prefix-sharing step that makes a mask cost far
// less than one walk per token. A subtree is skipped as soon as no stack survives its prefix, and
// the big walks memoize parser transitions by state (a lazily built DFA), so the many trie nodes
// that reach the same parser state (every letter inside a string) cost a hash lookup each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/constrain/program.h"
#include "coordinator/constrain/vocabulary.h"

namespace llama2::constrain {

// The part of a stack a token table is computed for: the top frame's position and the return
// positions of up to kTableContext frames below it, bottom either the root (`rooted`: the whole
// stack) or unknown. Tokens whose fate depends on frames below the key are "uncertain".
struct TableKey {
  static constexpr size_t kTableContext = 4;
  std::vector<uint32_t> chain;  // [top pos, parent's pos, ...]
  bool rooted = false;
  std::string bytes() const;  // for hashing
};

// What the vocabulary can do on a stack matching a TableKey: tokens `accepted` whatever lies
// below the key, and tokens that reach below it (the `uncertain` trie, holding for each the bytes
// that remain when the key's frames are used up; they are checked against the real stack). Every
// other token is rejected. Computed once per key and grammar, shared by all matchers.
struct PositionTable {
  std::vector<uint32_t> accepted_words;  // mask over the vocabulary; empty when kept sparse
  std::vector<int32_t> accepted_ids;     // when few tokens are accepted
  FlatTrie uncertain;
  size_t memory_bytes() const;
};

PositionTable compute_position_table(const Program& program, const ConstraintLimits& limits,
                                     const TokenVocabulary& vocab, const TableKey& key);

// Sets in `words` the bit of every token of `trie` whose bytes can follow `start`. `cached`:
// memoize transitions by state (worth it for a whole-vocabulary walk, not for a small trie).
void walk_alive(Parser& parser, StackPool& pool, const FlatTrie& trie, const ParseState& start,
                uint32_t* words, std::vector<ParseState>& scratch, bool cached = false);

inline void set_bit(uint32_t* words, int32_t id) {
  words[id >> 5] |= uint32_t{1} << (id & 31);
}

}  // namespace llama2::constrain
