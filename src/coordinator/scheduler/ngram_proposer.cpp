#include "coordinator/scheduler/ngram_proposer.h"

#include <algorithm>

namespace llama2 {

void ngram_propose(const std::vector<int>& context, int k, int min_match, int max_match,
                   std::vector<int>* out) {
  out->clear();
  const int len = static_cast<int>(context.size());
  for (int n = std::min(max_match, len - 1); n >= min_match && n >= 1; --n) {
    const int* suffix = context.data() + (len - n);
    // The latest start j < len - n whose n tokens equal the suffix: its continuation begins at
    // j + n <= len - 1, so at least one token follows it.
    for (int j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, context.data() + j)) continue;
      const int from = j + n, to = std::min(len, from + k);
      out->assign(context.begin() + from, context.begin() + to);
      return;
    }
  }
}

}  // namespace llama2
