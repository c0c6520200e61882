// A choice among many literal strings as a deterministic grammar: the strings' byte trie, with
// one rule per branching node and single-child chains written as plain byte sequences. An enum of
// 100,000 strings then costs one parser stack per step instead of 100,000.
#pragma once

#include <string>
#include <vector>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

// Symbol matching exactly one of `texts` (duplicates are fine; at least one text). `name` is for
// messages.
Symbol literal_trie(Grammar& grammar, std::vector<std::string> texts, const std::string& name);

}  // namespace llama2::constrain
