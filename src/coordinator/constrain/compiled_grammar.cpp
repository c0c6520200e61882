#include "coordinator/constrain/compiled_grammar.h"

namespace llama2::constrain {

CompiledGrammar::CompiledGrammar(const Grammar& grammar,
                                 std::shared_ptr<const TokenVocabulary> vocab)
    : program_(Program::build(grammar)), vocab_(std::move(vocab)), limits_(grammar.limits()) {
  alias_repeats(grammar);
}

void CompiledGrammar::alias_repeats(const Grammar& grammar) {
  key_alias_.resize(program_.elems.size());
  for (uint32_t e = 0; e < key_alias_.size(); ++e) key_alias_[e] = e;
  // up_to(k) for k > C, C past the longest token: no token reaches the end of the chain, so
  // every table keyed in up_to(k) equals the one keyed at the same place in up_to(C). Not for
  // a nullable item, which may pass repetitions without a byte.
  const std::vector<bool> nullable = nullable_rules(grammar);
  const size_t c = vocab_->max_token_bytes() + 1;
  auto first_elem = [&](uint32_t rule) { return program_.alt_starts[program_.alts_begin[rule]]; };
  auto end_elem = [&](uint32_t rule) {  // one past the kEnd of the rule's last alternative
    uint32_t e = program_.alt_starts[program_.alts_begin[rule + 1] - 1];
    while (program_.elems[e].op != Program::Op::kEnd) ++e;
    return e + 1;
  };
  for (const RepeatChain& chain : grammar.repeat_chains()) {
    if (chain.item.kind == Symbol::Kind::kRule && nullable[chain.item.index]) continue;
    if (chain.rules.size() <= c) continue;
    const uint32_t base = first_elem(chain.rules[c - 1]);
    for (size_t k = c; k < chain.rules.size(); ++k) {
      const uint32_t from = first_elem(chain.rules[k]), to = end_elem(chain.rules[k]);
      for (uint32_t e = from; e < to; ++e) key_alias_[e] = base + (e - from);
    }
  }
}

std::shared_ptr<const PositionTable> CompiledGrammar::table(const TableKey& key) const {
  std::string k = key.bytes();
  {
    std::shared_lock<std::shared_mutex> lock(tables_mu_);
    auto it = tables_.find(k);
    if (it != tables_.end()) return it->second;
  }
  // Computed outside the lock; two threads may compute the same table, and one copy is kept.
  auto fresh = std::make_shared<const PositionTable>(
      compute_position_table(program_, limits_, *vocab_, key));
  if (table_bytes_.load() + fresh->memory_bytes() > limits_.max_table_bytes) return fresh;
  std::unique_lock<std::shared_mutex> lock(tables_mu_);
  auto [it, inserted] = tables_.emplace(std::move(k), fresh);
  if (inserted) table_bytes_ += fresh->memory_bytes();
  return it->second;
}

const std::vector<uint32_t>& CompiledGrammar::first_mask() const {
  std::call_once(first_once_, [this] {
    Parser parser(program_, limits_);
    StackPool pool;
    ParseState start;
    parser.initial(pool, start);
    first_mask_.assign(static_cast<size_t>(vocab_->mask_words()), 0);
    std::vector<ParseState> scratch;
    walk_alive(parser, pool, vocab_->first_trie(), start, first_mask_.data(), scratch, true);
    if (start.accepting && vocab_->eos_id() >= 0) set_bit(first_mask_.data(), vocab_->eos_id());
  });
  return first_mask_;
}

}  // namespace llama2::constrain
