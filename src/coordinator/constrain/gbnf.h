// GBNF grammars in llama.cpp's syntax compiled into the grammar form (docs/structured-output.md,
// "GBNF"): rules `name ::= ...` (names of letters, digits, '-' and '_'), the start rule `root`,
// string literals "..." and character classes [...] / [^...] with ranges, `.` (any character),
// escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, grouping ( ), alternation |, repetition
// * + ? {m} {m,} {m,n} {,n}, and # comments. A rule continues over lines until the next
// `name ::=`. Refused with a message naming the rule: a missing root, an undefined rule, a rule
// defined twice, a rule not reachable from root, left recursion, a rule that never finishes.
#pragma once

#include <string_view>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

// Parses `text` into `grammar` and sets its root.
void compile_gbnf(Grammar& grammar, std::string_view text);

}  // namespace llama2::constrain
