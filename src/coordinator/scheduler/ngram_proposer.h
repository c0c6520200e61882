// Prompt lookup (n-gram speculation): answers that quote their context repeat token runs already
// in the prompt or the output so far, so the tokens that followed the latest earlier occurrence of
// the sequence's last few tokens are a cheap guess at what comes next.
#pragma once

#include <vector>

namespace llama2 {

// Up to `k` proposed tokens for the sequence `context` (prompt + generated), into *out (cleared):
// for n from max_match down to min_match, the latest earlier occurrence of context's last n tokens
// (ending before the last token) gives the tokens after it, at most k and at most up to the end of
// context. Empty when no suffix of those lengths occurs earlier. O(context * max_match).
void ngram_propose(const std::vector<int>& context, int k, int min_match, int max_match,
                   std::vector<int>* out);

}  // namespace llama2
