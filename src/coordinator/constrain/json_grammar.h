// The JSON building blocks every JSON constraint shares: whitespace, strings, literals, any
// value. One JsonGrammar per Grammar; its rules are made once and reused, so every unconstrained
// string or value in a schema is the same rule (and the same token tables).
//
// Whitespace (docs/structured-output.md, "Whitespace"): with JsonWhitespace::kSingleSpace, at most
// one space after '{', '[', ',' and ':' and before '}' and ']'; none before the first byte, after
// the last, or before ',' and ':'. With kNone, no whitespace at all. Either way a model cannot
// pad: the bytes between two JSON tokens are bounded.
#pragma once

#include <string>
#include <vector>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

enum class JsonWhitespace : uint8_t { kNone, kSingleSpace };

class JsonGrammar {
 public:
  JsonGrammar(Grammar& g, JsonWhitespace ws) : g_(g), ws_mode_(ws) {}

  Symbol ws();
  // One character inside a JSON string: raw UTF-8 (no controls, '"' or '\') or an escape
  // (\" \\ \/ \b \f \n \r \t, \uXXXX without surrogates). Each counts as one character.
  Symbol string_char();
  // A JSON string of [min, max] characters (max < 0: unbounded).
  Symbol string(int min, int max);
  // The exact JSON text `literal` (e.g. a dumped enum value), as one symbol.
  Symbol literal(const std::string& text);
  // Any JSON value / object / array (recursive rules, made once).
  Symbol any_value();
  Symbol any_object();
  // `{` members `}` where `members` is a non-empty sequence, or `{}` when `may_be_empty`.
  Symbol object(Symbol members, bool may_be_empty);
  // A member: the key (a JSON string literal) then ':' then the value.
  Symbol member(Symbol key, Symbol value);
  Grammar& grammar() { return g_; }

 private:
  void make_any();

  Grammar& g_;
  JsonWhitespace ws_mode_;
  bool have_ws_ = false, have_char_ = false, have_any_ = false;
  Symbol ws_, char_, value_, object_;
};

}  // namespace llama2::constrain
