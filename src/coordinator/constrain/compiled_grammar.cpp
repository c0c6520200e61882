#include "coordinator/constrain/compiled_grammar.h"

namespace llama2::constrain {

CompiledGrammar::CompiledGrammar(const Grammar& grammar,
                                 std::shared_ptr<const TokenVocabulary> vocab)
    : program_(Program::build(grammar)), vocab_(std::move(vocab)), limits_(grammar.limits()) {}

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
