// Per-sequence state of a constraint: which tokens may come next, and the tokens taken so far.
//
//   auto g = cache.get(spec);               // shared_ptr<const CompiledGrammar>
//   GrammarMatcher m(g);
//   m.fill_mask(words);                     // words: m.mask_words() uint32, bit id%32 of id/32
//   ... sample a token allowed by the mask ...
//   m.accept_token(id);                     // false (and no change) when not allowed
//   m.rollback(k);                          // speculative decoding: undo the last k tokens
//
// EOS is allowed exactly when is_accepting(); accepting it terminates the matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/constrain/compiled_grammar.h"

namespace llama2::constrain {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  int mask_words() const { return grammar_->vocabulary().mask_words(); }
  // Writes the allowed-token bitmask (every word is written).
  void fill_mask(uint32_t* words);
  // Takes `id` when the mask allows it: true, state advanced; false, state unchanged.
  bool accept_token(int id);
  // Takes raw bytes as if generated (text the caller forces, e.g. a tool-call prefix): false and
  // no change when the grammar does not allow them. Counts as one step for rollback.
  bool accept_bytes(const std::string& bytes);
  // The text so far is a complete sentence of the grammar (EOS is allowed now).
  bool is_accepting() const { return !terminated_ && state_.accepting; }
  // EOS has been accepted.
  bool is_terminated() const { return terminated_; }
  // The text so far is complete and no byte can follow it: the only token left is EOS, so a
  // server may end the output here without spending a step on it.
  bool is_complete() const { return is_accepting() && state_.tops.empty(); }
  // Undoes the last `n` accepted steps; n must not exceed steps().
  void rollback(int n);
  int steps() const { return static_cast<int>(history_.size()); }
  // Number of parser stacks alive (for tests of the limits).
  size_t stack_count() const { return state_.tops.size(); }

 private:
  bool advance_bytes(const std::string& bytes);

  struct Step {
    ParseState state;
    size_t pool_mark;
    bool at_start;
    bool terminated;
  };
  std::shared_ptr<const CompiledGrammar> grammar_;
  StackPool pool_;
  Parser parser_;
  ParseState state_;
  bool at_start_ = true;  // no token yet: the next one gets the dummy-prefix rule
  bool terminated_ = false;
  std::vector<Step> history_;
  ParseState next_, tmp_;
  std::vector<ParseState> scratch_;
};

}  // namespace llama2::constrain
