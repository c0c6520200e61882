#include "coordinator/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/step_plan.h"

namespace llama2 {
namespace {

// top-p compares a float32 threshold (1 - top_p) with sums of probabilities that carry ~1e-7
// relative error from the fp32 logits; HF's fp32 comparison is noise at that scale too. Counting
// tail masses within this slack as equal makes a top_p that lands exactly on a boundary of the
// distribution (top_p 0.8 over 0.5/0.3/0.15/0.05) follow the exact rule (the boundary token is
// removed) instead of rounding noise. It can drop at most 1e-6 of probability mass.
constexpr double kTopPSlack = 1e-6;

// [0, 1) with 53 random bits, computed here rather than by std::uniform_real_distribution, whose
// algorithm the standard leaves to the library: a seed must give the same text everywhere.
double uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

Sampler::Sampler(const SamplingParams& p, uint64_t seed) : params_(p), rng_(seed) {
  LLAMA2_CHECK(std::isfinite(p.temperature) && p.temperature >= 0);
  LLAMA2_CHECK(p.top_p > 0 && p.top_p <= 1);
  LLAMA2_CHECK(p.top_k >= 0);
  LLAMA2_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0);
}

void Sampler::apply_repetition_penalty(std::vector<float>& logits,
                                       const std::vector<int>& context) {
  const float penalty = params_.repetition_penalty;
  if (penalty == 1.0f) return;
  const int vocab = static_cast<int>(logits.size());
  seen_.resize(logits.size(), 0);
  // HF gathers the logits of all context ids, penalises them and scatters them back, so an id
  // that occurs many times is still penalised once: the `seen_` marks give the same result.
  for (int id : context) {
    if (id < 0 || id >= vocab) {
      throw Error("context token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
    if (seen_[id]) continue;
    seen_[id] = 1;
    float& x = logits[id];
    x = x < 0 ? x * penalty : x / penalty;
  }
  for (int id : context) seen_[id] = 0;  // O(context), not O(vocab), to reset
}

void Sampler::check_finite(const float* logits, size_t n, const int32_t* ids) {
  bool any_finite = false;
  for (size_t i = 0; i < n; ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      throw Error("logit of token " + std::to_string(ids ? ids[i] : static_cast<int32_t>(i)) +
                  " is " + (std::isnan(x) ? "NaN" : "+inf") + "; cannot sample");
    }
    any_finite = any_finite || std::isfinite(x);
  }
  if (!any_finite) throw Error("every logit is -inf; no token can be sampled");
}

int Sampler::candidates_needed(const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f) return 0;
  if (p.temperature == 0.0f) return 1;
  if (p.top_k >= 1 && p.top_k <= kMaxCandidates) return p.top_k;
  return 0;
}

int Sampler::sample(std::vector<float>& logits, const std::vector<int>& context) {
  LLAMA2_CHECK(!logits.empty());
  apply_repetition_penalty(logits, context);
  // After the penalty: a tiny penalty can push a large logit to +inf.
  check_finite(logits.data(), logits.size(), nullptr);

  if (params_.temperature == 0.0f) {
    // Strict > keeps the first of equal maxima, as torch.argmax does.
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return static_cast<int>(best);
  }
  return draw(logits.data(), logits.size());
}

int Sampler::sample_candidates(const float* values, const int32_t* ids, int n) {
  const int needed = candidates_needed(params_);
  LLAMA2_CHECK(needed >= 1 && needed <= n);
  // Padding (id -1, value -inf) sits at the end when a vocabulary slice had fewer than n tokens.
  while (n > 0 && ids[n - 1] < 0) --n;
  LLAMA2_CHECK(n >= 1);
  check_finite(values, static_cast<size_t>(n), ids);
  if (params_.temperature == 0.0f) return ids[0];  // best first, ties by lower id
  // The candidates are ordered with equal values by increasing id, so draw()'s tie rule (lower
  // index first) is the full-vocabulary rule (lower id first).
  return ids[draw(values, static_cast<size_t>(n))];
}

int Sampler::draw(const float* logits, size_t vocab) {
  // Scaled in double: a tiny temperature would overflow float (HF would produce inf and fail).
  const double t = params_.temperature;
  work_.resize(vocab);
  order_.clear();
  double max_logit = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < vocab; ++i) {
    work_[i] = static_cast<double>(logits[i]) / t;
    // -inf tokens (masked upstream) get probability 0 and never survive; leave them out early.
    if (std::isfinite(work_[i])) {
      order_.push_back(static_cast<int>(i));
      max_logit = std::max(max_logit, work_[i]);
    }
  }
  const auto before = [this](int a, int b) {
    return work_[a] != work_[b] ? work_[a] > work_[b] : a < b;
  };

  // Makes order_[0, n) the n best candidates in order, leaving the rest unsorted behind them.
  // Sampling rarely needs more than a short sorted head (a nucleus, the tokens before the draw
  // lands): sorting all 32000 ids up front cost ~2.5 ms per token, most of the sampler's time.
  // Each call is O(V) plus the sort of the new part and heads grow geometrically: O(V log V).
  size_t sorted = 0;
  const auto sort_head = [&](size_t n) {
    n = std::min(n, order_.size());
    if (n <= sorted) return;
    if (n < order_.size()) {
      std::nth_element(order_.begin() + sorted, order_.begin() + (n - 1), order_.end(), before);
    }
    std::sort(order_.begin() + sorted, order_.begin() + n, before);
    sorted = n;
  };
  constexpr size_t kFirstHead = 64;

  // top-k as HF: remove tokens whose logit is < the k-th largest, so ties with the k-th all stay.
  const size_t k = static_cast<size_t>(params_.top_k);
  if (k > 0 && k < order_.size()) {
    sort_head(k);
    const double kth = work_[order_[k - 1]];
    order_.erase(
        std::remove_if(order_.begin() + k, order_.end(), [&](int id) { return work_[id] < kth; }),
        order_.end());
  }

  // Unnormalised softmax over the top-k survivors, in place of the scaled logits.
  double total = 0;
  for (int id : order_) {
    work_[id] = std::exp(work_[id] - max_logit);
    total += work_[id];
  }

  // top-p as HF: in ascending order, remove tokens whose cumulative probability is <= 1 - top_p;
  // the most probable token always stays. An ascending cumulative sum is a tail sum of the
  // descending order. Every token past a sorted head whose unsorted rest has mass <= the
  // threshold is removed, so only that head needs sorting.
  size_t kept = order_.size();
  double mass = total;
  if (params_.top_p < 1.0f) {
    const double threshold = (1.0 - static_cast<double>(params_.top_p) + kTopPSlack) * total;
    double rest = 0;
    for (size_t head = kFirstHead;; head *= 4) {
      sort_head(head);
      rest = 0;
      for (size_t i = sorted; i < order_.size(); ++i) rest += work_[order_[i]];
      if (rest <= threshold || sorted == order_.size()) break;
    }
    kept = sorted;
    double tail = rest;
    for (size_t i = sorted; i-- > 1;) {
      tail += work_[order_[i]];
      if (tail > threshold) break;  // tails only grow from here: every earlier token stays
      kept = i;
    }
    mass = 0;
    for (size_t i = kept; i-- > 0;) mass += work_[order_[i]];
  }

  // Inverse CDF over the survivors, most probable first, sorting further only as the walk needs.
  const double target = uniform01(rng_) * mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    if (i == sorted) sort_head(std::max(kFirstHead, 4 * sorted));
    cumulative += work_[order_[i]];
    if (target < cumulative) return order_[i];
  }
  return order_[kept - 1];  // rounding left target just past the last cumulative sum
}

}  // namespace llama2
