#include "coordinator/constrain/token_walk.h"

#include <unordered_map>

namespace llama2::constrain {
namespace {

// Parser states interned to ids, with memoized transitions: a DFA built while walking. States are
// frame ids of one pool, so a cache lives as long as one walk over that pool.
class StateCache {
 public:
  StateCache(Parser& parser, StackPool& pool) : parser_(parser), pool_(pool) {}

  uint32_t intern(const ParseState& s) {
    std::string key(reinterpret_cast<const char*>(s.tops.data()), s.tops.size() * 4);
    key += static_cast<char>(s.accepting | (s.popped << 1));
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    states_.push_back(s);
    const auto id = static_cast<uint32_t>(states_.size() - 1);
    ids_.emplace(std::move(key), id);
    return id;
  }
  uint32_t next(uint32_t id, uint8_t byte) {
    const uint64_t key = (uint64_t{id} << 8) | byte;
    auto it = transitions_.find(key);
    if (it != transitions_.end()) return it->second;
    parser_.advance(pool_, states_[id], byte, tmp_);
    const uint32_t to = intern(tmp_);
    transitions_.emplace(key, to);
    return to;
  }
  const ParseState& state(uint32_t id) const { return states_[id]; }

 private:
  Parser& parser_;
  StackPool& pool_;
  std::vector<ParseState> states_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::unordered_map<uint64_t, uint32_t> transitions_;
  ParseState tmp_;
};

}  // namespace

std::string TableKey::bytes() const {
  std::string b(reinterpret_cast<const char*>(chain.data()), chain.size() * 4);
  b += rooted ? 'r' : 'u';
  return b;
}

size_t PositionTable::memory_bytes() const {
  return sizeof(PositionTable) + accepted_words.size() * 4 + accepted_ids.size() * 4 +
         uncertain.nodes() * 11 + uncertain.ids.size() * 8;
}

void walk_alive(Parser& parser, StackPool& pool, const FlatTrie& trie, const ParseState& start,
                uint32_t* words, std::vector<ParseState>& states, bool cached) {
  const size_t n = trie.nodes();
  if (n <= 1) return;
  if (cached) {
    StateCache cache(parser, pool);
    std::vector<uint32_t> ids{cache.intern(start)};
    for (uint32_t i = 1; i < n;) {
      const size_t d = trie.depth[i];
      if (ids.size() <= d) ids.resize(d + 1);
      ids[d] = cache.next(ids[d - 1], trie.byte[i]);
      const ParseState& s = cache.state(ids[d]);
      if (s.tops.empty() && !s.accepting) {
        i = trie.subtree_end[i];
        continue;
      }
      for (uint32_t k = trie.ids_begin[i]; k < trie.ids_begin[i + 1]; ++k)
        set_bit(words, trie.ids[k]);
      i = s.tops.empty() ? trie.subtree_end[i] : i + 1;
    }
    return;
  }
  states.resize(1);
  states[0] = start;
  for (uint32_t i = 1; i < n;) {
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

// The table walk: the vocabulary trie from the key's stack (unknown below it unless rooted),
// remembering at which depths a path returned into the unknown part ("pops"): a token that only
// survives through a pop at depth k depends on the real stack, with bytes [k, end) to match there.
class TableWalk {
 public:
  TableWalk(const Program& program, const ConstraintLimits& limits, const TokenVocabulary& vocab)
      : parser_(program, limits), cache_(parser_, pool_), vocab_(vocab) {}

  PositionTable run(const TableKey& key) {
    int32_t parent = key.rooted ? kRootParent : kUnknownParent;
    for (size_t i = key.chain.size(); i-- > 1;) parent = pool_.intern(key.chain[i], parent);
    ParseState start;
    parser_.single(pool_, key.chain[0], parent, start);
    const FlatTrie& trie = vocab_.trie();
    const size_t n = trie.nodes();
    ids_.assign(1, cache_.intern(start));
    pops_at_depth_.assign(1, 0);
    for (uint32_t i = 1; i < n;) {
      const size_t d = trie.depth[i];
      if (ids_.size() <= d) {
        ids_.resize(d + 1);
        pops_at_depth_.resize(d + 1);
      }
      ids_[d] = cache_.next(ids_[d - 1], trie.byte[i]);
      const ParseState& s = cache_.state(ids_[d]);
      pops_.resize(pops_at_depth_[d - 1]);
      if (s.popped) pops_.push_back(static_cast<uint32_t>(d));
      pops_at_depth_[d] = pops_.size();
      // All bytes taken and a path alive (inside the key, or leaving it at the last byte).
      const bool known = !s.tops.empty() || s.popped || s.accepting;
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
      // No stack left inside the key: the whole subtree depends on the pops.
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
  StateCache cache_;
  const TokenVocabulary& vocab_;
  std::vector<uint32_t> ids_;          // [depth] state id on the current path
  std::vector<size_t> pops_at_depth_;  // [depth] size of pops_ on the path down to that depth
  std::vector<uint32_t> pops_;         // pop depths on the current path
  std::vector<int32_t> accepted_;
  std::vector<FlatTrie::Entry> uncertain_;
};

}  // namespace

PositionTable compute_position_table(const Program& program, const ConstraintLimits& limits,
                                     const TokenVocabulary& vocab, const TableKey& key) {
  TableWalk walk(program, limits, vocab);
  return walk.run(key);
}

}  // namespace llama2::constrain
