// Regular expressions compiled into the grammar form (docs/structured-output.md, "Regular
// expressions"). The subset: literals (any UTF-8), escapes \d \D \w \W \s \S \n \r \t \f \v \0
// \xHH \uHHHH \u{H...} and escaped punctuation; classes [...] with ranges, negation and those
// escapes; `.` (any code point but \n and \r); quantifiers * + ? {m} {m,} {m,n} {,n} (a lazy `?`
// suffix is accepted: it does not change the language); alternation |; groups (...), (?:...),
// (?<name>...), (?P<name>...). Refused by name: backreferences, lookahead/lookbehind, atomic
// groups, possessive quantifiers, word boundaries, inline flags, Unicode property classes.
#pragma once

#include <string_view>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

enum class RegexMode : uint8_t {
  // The whole text must match; `^` at the start and `$` at the end are accepted and implied.
  kFullMatch,
  // JSON Schema `pattern` inside a JSON string: the string must contain a match (ECMA-262
  // search), unless anchored by ^ / $; characters are produced in their JSON-escaped form.
  kJsonStringSearch,
};

// A symbol matching the pattern's language. Throws ConstraintError naming the construct and its
// offset in the pattern.
Symbol compile_regex(Grammar& grammar, std::string_view pattern, RegexMode mode);

// One code point of `set` as it appears inside a JSON string: raw UTF-8, except '"', '\' and
// the controls below U+0020, which appear only as their escapes (\" \\ \n \r \t \b \f, else
// \u00XX).
Symbol json_string_char(Grammar& grammar, const CodepointSet& set);

}  // namespace llama2::constrain
