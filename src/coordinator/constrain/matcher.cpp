#include "coordinator/constrain/matcher.h"

#include <algorithm>
#include <cstring>

namespace llama2::constrain {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), parser_(grammar_->program(), grammar_->limits()) {
  parser_.initial(pool_, state_);
}

void GrammarMatcher::fill_mask(uint32_t* words) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  const auto n = static_cast<size_t>(vocab.mask_words());
  if (terminated_) {
    std::memset(words, 0, n * 4);
    return;
  }
  if (at_start_) {
    std::memcpy(words, grammar_->first_mask().data(), n * 4);
    return;
  }
  std::memset(words, 0, n * 4);
  if (state_.accepting && vocab.eos_id() >= 0) set_bit(words, vocab.eos_id());
  const size_t mark = pool_.mark();
  TableKey key;
  for (const int32_t top : state_.tops) {
    // The key: this stack's top positions (the frames the table's walk sees); `below` is the
    // real frame under them, where tokens that leave the key continue.
    key.chain.clear();
    int32_t below = top;
    while (key.chain.size() <= TableKey::kTableContext && below >= 0) {
      key.chain.push_back(grammar_->key_position(pool_[below].pos));
      below = pool_[below].parent;
    }
    key.rooted = below == kRootParent;
    const std::shared_ptr<const PositionTable> table = grammar_->table(key);
    if (!table->accepted_words.empty()) {
      const uint32_t* src = table->accepted_words.data();
      for (size_t w = 0; w < n; ++w) words[w] |= src[w];
    }
    for (int32_t id : table->accepted_ids) set_bit(words, id);
    if (table->uncertain.nodes() <= 1 || key.rooted) continue;
    parser_.resume(pool_, below, tmp_);
    walk_alive(parser_, pool_, table->uncertain, tmp_, words, scratch_);
  }
  pool_.truncate(mark);
}

bool GrammarMatcher::advance_bytes(const std::string& bytes) {
  if (terminated_ || bytes.empty()) return false;
  const size_t mark = pool_.mark();
  next_ = state_;
  for (char c : bytes) {
    parser_.advance(pool_, next_, static_cast<uint8_t>(c), tmp_);
    std::swap(next_, tmp_);
    if (next_.tops.empty() && !next_.accepting) {
      pool_.truncate(mark);
      return false;
    }
  }
  history_.push_back({state_, mark, at_start_, terminated_});
  std::swap(state_, next_);
  at_start_ = false;
  return true;
}

bool GrammarMatcher::accept_token(int id) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  if (id < 0 || id >= vocab.size() || terminated_) return false;
  if (id == vocab.eos_id()) {
    if (!state_.accepting) return false;
    history_.push_back({state_, pool_.mark(), at_start_, terminated_});
    terminated_ = true;
    return true;
  }
  if (!vocab.usable(id)) return false;
  return advance_bytes(at_start_ ? vocab.first_bytes(id) : vocab.bytes(id));
}

bool GrammarMatcher::accept_bytes(const std::string& bytes) {
  return advance_bytes(bytes);
}

void GrammarMatcher::rollback(int n) {
  if (n < 0 || n > steps()) {
    throw ConstraintError("rollback of " + std::to_string(n) + " steps, but only " +
                          std::to_string(steps()) + " were taken");
  }
  if (n == 0) return;
  Step& s = history_[history_.size() - static_cast<size_t>(n)];
  state_ = std::move(s.state);
  at_start_ = s.at_start;
  terminated_ = s.terminated;
  pool_.truncate(s.pool_mark);
  history_.resize(history_.size() - static_cast<size_t>(n));
}

}  // namespace llama2::constrain
