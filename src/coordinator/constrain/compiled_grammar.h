// A constraint ready to match: the Program, the vocabulary it masks, and the token tables (one per
// TableKey: a stack top with a few frames below it), filled on first use and shared by every
// sequence that uses the grammar. Immutable from the outside; the lazy tables sit behind a
// shared mutex, so one CompiledGrammar serves many threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/constrain/program.h"
#include "coordinator/constrain/token_walk.h"
#include "coordinator/constrain/vocabulary.h"

namespace llama2::constrain {

class CompiledGrammar {
 public:
  // Throws ConstraintError when the grammar fails check().
  CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocab);
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Program& program() const { return program_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  const ConstraintLimits& limits() const { return limits_; }
  // The token table of `key`, computed on first use.
  std::shared_ptr<const PositionTable> table(const TableKey& key) const;
  // The mask of the first output token (the grammar's initial state, with the dummy-prefix
  // rule of vocabulary.h), computed on first use.
  const std::vector<uint32_t>& first_mask() const;
  // The position a table key uses for `pos`: itself, or the equivalent position of a shorter
  // bounded repetition (see RepeatChain) whose tables are the same.
  uint32_t key_position(uint32_t pos) const { return key_alias_[pos]; }
  // Memory held by the tables computed so far.
  size_t table_bytes() const { return table_bytes_.load(); }

 private:
  void alias_repeats(const Grammar& grammar);

  Program program_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  ConstraintLimits limits_;
  std::vector<uint32_t> key_alias_;  // [elems]
  mutable std::shared_mutex tables_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const PositionTable>> tables_;
  mutable std::atomic<size_t> table_bytes_{0};
  mutable std::once_flag first_once_;
  mutable std::vector<uint32_t> first_mask_;
};

}  // namespace llama2::constrain
