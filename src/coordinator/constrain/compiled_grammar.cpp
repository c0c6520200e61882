#include "coordinator/constrain/compiled_grammar.h"

namespace llama2::constrain {

CompiledGrammar::CompiledGrammar(const Grammar& grammar,
                                 std::shared_ptr<const TokenVocabulary> vocab)
    : program_(Program::build(grammar)),
      vocab_(std::move(vocab)),
      limits_(grammar.limits()),
      tables_(new std::atomic<const PositionTable*>[program_.elems.size()]) {
  for (size_t i = 0; i < program_.elems.size(); ++i) tables_[i].store(nullptr);
}

CompiledGrammar::~CompiledGrammar() {
  for (size_t i = 0; i < program_.elems.size(); ++i) delete tables_[i].load();
}

const PositionTable& CompiledGrammar::table(uint32_t pos) const {
  const PositionTable* t = tables_[pos].load(std::memory_order_acquire);
  if (t != nullptr) return *t;
  // Two threads may compute the same table; the loser's copy is dropped (it is identical).
  auto fresh =
      std::make_unique<PositionTable>(compute_position_table(program_, limits_, *vocab_, pos));
  const PositionTable* expected = nullptr;
  if (tables_[pos].compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) {
    table_bytes_ += fresh->memory_bytes();
    return *fresh.release();
  }
  return *expected;
}

const std::vector<uint32_t>& CompiledGrammar::first_mask() const {
  std::call_once(first_once_, [this] {
    Parser parser(program_, limits_);
    StackPool pool;
    ParseState start;
    parser.initial(pool, start);
    first_mask_.assign(static_cast<size_t>(vocab_->mask_words()), 0);
    std::vector<ParseState> scratch;
    walk_alive(parser, pool, vocab_->first_trie(), start, first_mask_.data(), scratch);
    if (start.accepting && vocab_->eos_id() >= 0) set_bit(first_mask_.data(), vocab_->eos_id());
  });
  return first_mask_;
}

}  // namespace llama2::constrain
