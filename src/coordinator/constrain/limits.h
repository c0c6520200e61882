// Limits of the constraint engine (docs/structured-output.md, "Limits"), in one place, and the
// error every compiler and matcher throws when an input breaks one of them or is malformed.
#pragma once

#include <cstddef>
#include <string>

#include "common/check.h"

namespace llama2::constrain {

// A constraint the engine refuses: bad syntax, an unsupported keyword, a limit passed. The
// message names the keyword, rule or limit; the serving layer answers it as a 400.
class ConstraintError : public Error {
 public:
  explicit ConstraintError(const std::string& what) : Error(what) {}
};

// Every bound on hostile input. Each is checked where the quantity grows, and passing one throws
// ConstraintError naming it, so a huge or pathological constraint costs bounded time and memory.
struct ConstraintLimits {
  // Bytes of constraint text (schema, regex, grammar, all choices together).
  size_t max_text_bytes = 4u << 20;
  // Symbols of the compiled grammar, all rules together (one byte class or rule reference each).
  size_t max_grammar_symbols = 2'000'000;
  // Rules of the compiled grammar.
  size_t max_rules = 500'000;
  // JSON nesting of a schema document, and nesting of regex groups / GBNF parentheses.
  int max_nesting = 128;
  // Largest m or n in {m,n}, and in minItems/maxItems/minLength/maxLength when they must be
  // unrolled.
  int max_repeat = 10'000;
  // Parser stacks alive after one byte: a grammar ambiguous enough to pass this is refused at the
  // byte that does, instead of slowing every later step.
  size_t max_states_per_step = 4'096;
  // Stack frames visited while following one byte (closure work).
  size_t max_closure_steps = 200'000;
  // Memory of one grammar's cached token tables; past it, tables are computed per use and not
  // kept (masks get slower, memory stays bounded). A GrammarCache holds at most its capacity
  // times this. Measured: 0.1-1.5 MB for the benchmark's schemas on 32,000 pieces.
  size_t max_table_bytes = 64u << 20;
};

}  // namespace llama2::constrain
