#include "coordinator/constrain/token_walk.h"

namespace llama2::constrain {

size_t PositionTable::memory_bytes() const {
  return accepted_words.size() * 4 + accepted_ids.size() * 4 + uncertain.nodes() * 11 +
         uncertain.ids.size() * 8;
}

void walk_alive(Parser& parser, StackPool& pool, const FlatTrie& trie, const ParseState& start,
                uint32_t* words, std::vector<ParseState>& states) {
  const size_t n = trie.nodes();
  if (n <= 1) return;
  states.resize(1);
  states[0] = start;
  uint32_t i = 1;
  while (i < n) {
    const size_t d = trie.depth[i];
    if (states.size() <= d) states.resize(d + 1);
    parser.advance(pool, states[d - 1], trie.byte[i], states[d]);
    const ParseState& s = states[d];
    if (s.tops.empty() && !s.accepting) {
      i = trie.subtree_end[i];
      continue;
    }
    for (uint32_t k = trie.ids_begin[i]; k < trie.ids_begin[i + 1]; ++k)
      set_bit(words, trie.ids[k]);
    i = s.tops.empty() ? trie.subtree_end[i] : i + 1;
  }
}

namespace {

// The table walk: the vocabulary trie from the single stack (pos, unknown), remembering at which
// depths a path returned into the unknown stack ("pops"): a token that only survives through a
// pop at depth k depends on the real stack, with its bytes [k, end) still to match there.
class TableWalk {
 public:
  TableWalk(const Program& program, const ConstraintLimits& limits, const TokenVocabulary& vocab)
      : parser_(program, limits), vocab_(vocab) {}

  PositionTable run(uint32_t pos) {
    const FlatTrie& trie = vocab_.trie();
    const size_t n = trie.nodes();
    states_.resize(1);
    parser_.single(pool_, pos, kUnknownParent, states_[0]);
    pops_at_depth_.assign(1, 0);
    uint32_t i = 1;
    while (i < n) {
      const size_t d = trie.depth[i];
      if (states_.size() <= d) {
        states_.resize(d + 1);
        pops_at_depth_.resize(d + 1);
      }
      parser_.advance(pool_, states_[d - 1], trie.byte[i], states_[d]);
      const ParseState& s = states_[d];
      pops_.resize(pops_at_depth_[d - 1]);
      if (s.popped) pops_.push_back(static_cast<uint32_t>(d));
      pops_at_depth_[d] = pops_.size();
      const bool known = !s.tops.empty() || s.popped;
      for (uint32_t k = trie.ids_begin[i]; k < trie.ids_begin[i + 1]; ++k) {
        if (known) {
          accepted_.push_back(trie.ids[k]);
        } else {
          add_uncertain(trie.ids[k]);
        }
      }
      if (!s.tops.empty()) {
        ++i;
        continue;
      }
      // No stack left inside the position's alternative: the whole subtree depends on the pops.
      const uint32_t end = trie.subtree_end[i];
      if (!pops_.empty()) {
        for (uint32_t j = i + 1; j < end; ++j)
          for (uint32_t k = trie.ids_begin[j]; k < trie.ids_begin[j + 1]; ++k)
            add_uncertain(trie.ids[k]);
      }
      i = end;
    }
    return finish();
  }

 private:
  void add_uncertain(int32_t id) {
    const std::string& bytes = vocab_.bytes(id);
    for (uint32_t k : pops_) uncertain_.push_back({bytes.substr(k), id, k});
  }

  PositionTable finish() {
    PositionTable t;
    const size_t words = static_cast<size_t>(vocab_.mask_words());
    if (accepted_.size() * 2 > words) {  // denser than a word per two ids: a mask is cheaper
      t.accepted_words.assign(words, 0);
      for (int32_t id : accepted_) set_bit(t.accepted_words.data(), id);
    } else {
      t.accepted_ids = accepted_;
    }
    t.uncertain = FlatTrie::build(std::move(uncertain_));
    return t;
  }

  Parser parser_;
  StackPool pool_;
  const TokenVocabulary& vocab_;
  std::vector<ParseState> states_;
  std::vector<size_t> pops_at_depth_;  // [depth] size of pops_ on the path down to that depth
  std::vector<uint32_t> pops_;         // pop depths on the current path
  std::vector<int32_t> accepted_;
  std::vector<FlatTrie::Entry> uncertain_;
};

}  // namespace

PositionTable compute_position_table(const Program& program, const ConstraintLimits& limits,
                                     const TokenVocabulary& vocab, uint32_t pos) {
  TableWalk walk(program, limits, vocab);
  return walk.run(pos);
}

}  // namespace llama2::constrain
