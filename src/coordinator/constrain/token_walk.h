// Walking a token trie through the parser: the prefix-sharing step that makes a mask cost far
// less than one walk per token. Each trie node costs one Parser::advance; a subtree is skipped as
// soon as no stack survives its prefix.
#pragma once

#include <cstdint>
#include <vector>

#include "coordinator/constrain/program.h"
#include "coordinator/constrain/vocabulary.h"

namespace llama2::constrain {

// What the vocabulary can do at one grammar position (a kBytes element), whatever the stack below
// it: tokens `accepted` without leaving the position's alternative (or leaving it exactly at their
// last byte), and tokens that leave it earlier (the `uncertain` trie, holding for each the bytes
// that remain when its alternative ends; they depend on the real stack). Every other token is
// rejected. Computed once per position and grammar, shared by all matchers.
struct PositionTable {
  std::vector<uint32_t> accepted_words;  // mask over the vocabulary; empty when kept sparse
  std::vector<int32_t> accepted_ids;     // when few tokens are accepted
  FlatTrie uncertain;
  size_t memory_bytes() const;
};

PositionTable compute_position_table(const Program& program, const ConstraintLimits& limits,
                                     const TokenVocabulary& vocab, uint32_t pos);

// Sets in `words` the bit of every token of `trie` whose bytes can follow `start`.
void walk_alive(Parser& parser, StackPool& pool, const FlatTrie& trie, const ParseState& start,
                uint32_t* words, std::vector<ParseState>& scratch);

inline void set_bit(uint32_t* words, int32_t id) {
  words[id >> 5] |= uint32_t{1} << (id & 31);
}

}  // namespace llama2::constrain
