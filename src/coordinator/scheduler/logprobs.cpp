#include "coordinator/scheduler/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/check.h"

namespace llama2 {

void row_logprobs(const StepLogits& logits, int row, int token, int top_n, float* logprob,
                  std::vector<TopLogprob>* top) {
  LLAMA2_CHECK(row >= 0 && row < logits.rows && static_cast<size_t>(row) < logits.lse.size());
  LLAMA2_CHECK(top_n >= 0);
  const double lse = logits.lse[row];
  LLAMA2_CHECK(!std::isnan(lse));  // the row did not ask for logprobs
  const int W = logits.width;
  const float* values = logits.values.data() + static_cast<int64_t>(row) * W;
  top->clear();
  if (logits.full()) {
    LLAMA2_CHECK(token >= 0 && token < W && top_n <= W);
    *logprob = static_cast<float>(values[token] - lse);
    std::vector<int32_t> order(static_cast<size_t>(W));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_n, order.end(), [values](int a, int b) {
      return values[a] != values[b] ? values[a] > values[b] : a < b;
    });
    for (int j = 0; j < top_n; ++j) {
      top->push_back({order[j], static_cast<float>(values[order[j]] - lse)});
    }
    return;
  }
  const int32_t* ids = logits.ids.data() + static_cast<int64_t>(row) * W;
  const int32_t* end = ids + W;
  const int32_t* at = std::find(ids, end, token);
  if (at == end) {
    throw Error("logprobs: sampled token " + std::to_string(token) +
                " is not among its row's candidates");
  }
  *logprob = static_cast<float>(values[at - ids] - lse);
  if (top_n > W) {
    throw Error("logprobs: " + std::to_string(top_n) + " alternatives asked of a step with " +
                std::to_string(W) + " candidates per row");
  }
  // Candidates come best first in the same order; padding (id -1) only past the vocabulary.
  for (int j = 0; j < top_n && ids[j] >= 0; ++j) {
    top->push_back({ids[j], static_cast<float>(values[j] - lse)});
  }
}

void prompt_row_logprob(const StepLogits& logits, int row, int target, int top_n,
                        PromptLogprob* out) {
  LLAMA2_CHECK(logits.full());
  out->token = target;
  row_logprobs(logits, row, target, top_n, &out->logprob, &out->top);
  const float* values = logits.values.data() + static_cast<int64_t>(row) * logits.width;
  const float x = values[target];
  int before = 0;
  for (int j = 0; j < logits.width; ++j) before += values[j] > x || (values[j] == x && j < target);
  out->rank = before + 1;
}

}  // namespace llama2
