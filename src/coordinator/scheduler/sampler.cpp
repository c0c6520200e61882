#include "coordinator/scheduler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/step_plan.h"
#include "coordinator/scheduler/speculative_rule.h"

namespace llama2 {
namespace {

// top-p compares a float32 threshold (1 - top_p) with sums of probabilities that carry ~1e-7
// relative error from the fp32 logits; HF's fp32 comparison is noise at that scale too. Counting
// tail masses within this slack as equal makes a top_p that lands exactly on a boundary of the
// distribution (top_p 0.8 over 0.5/0.3/0.15/0.05) follow the exact rule (the boundary token is
// removed) instead of rounding noise. It can drop at most 1e-6 of probability mass.
constexpr double kTopPSlack = 1e-6;

// Sorted head length the top-p cut starts from (grown 4x as needed).
constexpr size_t kFirstHead = 64;

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
  LLAMA2_CHECK(p.presence_penalty >= -2 && p.presence_penalty <= 2);
  LLAMA2_CHECK(p.frequency_penalty >= -2 && p.frequency_penalty <= 2);
  LLAMA2_CHECK(p.min_p >= 0 && p.min_p <= 1);
}

void Sampler::apply_openai_penalties(std::vector<float>& logits) const {
  for (const auto& [id, count] : generated_) {
    if (id < 0 || id >= static_cast<int>(logits.size())) continue;  // a vocabulary from a test
    logits[id] -= params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
  }
}

int Sampler::returned(int id) {
  if (params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f) return id;
  for (auto& [seen, count] : generated_) {
    if (seen == id) {
      ++count;
      return id;
    }
  }
  generated_.emplace_back(id, 1);
  return id;
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
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) return 0;
  if (p.temperature == 0.0f) return 1;
  if (p.top_k >= 1 && p.top_k < kMaxCandidates) return kMaxCandidates;
  return 0;
}

int Sampler::sample(std::vector<float>& logits, const std::vector<int>& context) {
  LLAMA2_CHECK(!logits.empty());
  apply_repetition_penalty(logits, context);
  apply_openai_penalties(logits);
  // After the penalty: a tiny penalty can push a large logit to +inf.
  check_finite(logits.data(), logits.size(), nullptr);

  if (params_.temperature == 0.0f) {
    // Strict > keeps the first of equal maxima, as torch.argmax does.
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return returned(static_cast<int>(best));
  }
  return returned(draw(logits.data(), nullptr, logits.size()));
}

int Sampler::sample_candidates(const float* values, const int32_t* ids, int n) {
  const int needed = candidates_needed(params_);
  LLAMA2_CHECK(needed >= 1 && needed <= n);
  // Padding (id -1, value -inf) sits at the end when a vocabulary slice had fewer than n tokens.
  while (n > 0 && ids[n - 1] < 0) --n;
  LLAMA2_CHECK(n >= 1);
  check_finite(values, static_cast<size_t>(n), ids);
  if (params_.temperature == 0.0f) return returned(ids[0]);  // best first, ties by lower id
  return returned(ids[draw(values, ids, static_cast<size_t>(n))]);
}

// A row's candidates while the cuts run: indices into the row's logits (the finite ones; -inf
// tokens, masked upstream, get probability 0 and never survive), the best first as far as sorted.
// Equal logits rank by lower id. The cuts rarely need more than a short sorted head (the k best,
// a nucleus): sorting all 32000 ids up front cost ~2.5 ms per token, most of the sampler's time.
class Sampler::Ranked {
 public:
  // order: the Sampler's scratch, reused from row to row.
  Ranked(const float* logits, const int32_t* ids, size_t n, std::vector<int>& scratch)
      : order(scratch), logits_(logits), ids_(ids) {
    order.clear();
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(logits[i])) {
        order.push_back(static_cast<int>(i));
        top = std::max(top, value(static_cast<int>(i)));
      }
    }
  }
  double value(int i) const { return static_cast<double>(logits_[i]); }
  int id(int i) const { return ids_ != nullptr ? ids_[i] : i; }
  // Half-width of the group of logits counted as equal to the cut value `cut` (sampler.h).
  double tolerance(double cut) const {
    return kTieTolerance * std::max(std::abs(top), std::abs(cut));
  }
  // Makes order[0, m) the m best candidates in order, leaving the rest unsorted behind them. Each
  // call is O(V) plus the sort of the new part, and heads grow geometrically: O(V log V) at worst.
  void sort_head(size_t m) {
    m = std::min(m, order.size());
    if (m <= sorted) return;
    const auto before = [this](int a, int b) {
      return logits_[a] != logits_[b] ? logits_[a] > logits_[b] : id(a) < id(b);
    };
    if (m < order.size()) {
      std::nth_element(order.begin() + sorted, order.begin() + (m - 1), order.end(), before);
    }
    std::sort(order.begin() + sorted, order.begin() + m, before);
    sorted = m;
  }
  // Keeps the candidates whose logit is >= floor (> floor when strict). remove_if is stable, so
  // the sorted head stays the best of what is left.
  void keep_from(double floor, bool strict) {
    order.erase(
        std::remove_if(order.begin(), order.end(),
                       [&](int i) { return strict ? value(i) <= floor : value(i) < floor; }),
        order.end());
    sorted = std::min(sorted, order.size());
  }

  std::vector<int>& order;                                // the survivors so far
  double top = -std::numeric_limits<double>::infinity();  // the largest finite logit
  size_t sorted = 0;                                      // order[0, sorted) is sorted

 private:
  const float* logits_;
  const int32_t* ids_;
};

void Sampler::weigh(Ranked& r, size_t n) {
  cut_top_k(r);
  // Softmax weights relative to the largest logit (a last-bit change of it scales all alike).
  work_.resize(n);
  for (int i : r.order) work_[i] = std::exp((r.value(i) - r.top) / params_.temperature);
  cut_min_p(r);
  cut_top_p(r);
}

int Sampler::draw(const float* logits, const int32_t* ids, size_t n) {
  Ranked r(logits, ids, n, order_);
  weigh(r, n);
  return inverse_cdf(r, ids, n);
}

int Sampler::draw_verified(const float* logits, const int32_t* ids, size_t n, int proposal,
                           const float* q, bool* accepted) {
  Ranked r(logits, ids, n, order_);
  weigh(r, n);
  order_by_id(r, ids, n, kept_);
  p_.clear();
  q_.clear();
  long x = -1;
  for (int i : r.order) {
    const int id = r.id(i);
    if (id == proposal) x = static_cast<long>(p_.size());
    p_.push_back(work_[i]);
    if (q != nullptr) q_.push_back(static_cast<double>(q[id]));
  }
  const double* qp = q != nullptr ? q_.data() : nullptr;
  // The second draw only on a rejection: an accepted token costs one number, as sample() does.
  *accepted = speculative_accepts(p_.data(), qp, p_.size(), x, uniform01(rng_));
  const size_t pick = *accepted
                          ? static_cast<size_t>(x)
                          : speculative_resample(p_.data(), qp, p_.size(), x, uniform01(rng_));
  return r.order[pick];
}

int Sampler::verify(std::vector<float>& logits, const std::vector<int>& context, int proposal,
                    const float* q, bool* accepted) {
  LLAMA2_CHECK(!logits.empty());
  if (params_.temperature == 0.0f) {
    const int token = sample(logits, context);
    *accepted = token == proposal;
    return token;
  }
  apply_repetition_penalty(logits, context);
  apply_openai_penalties(logits);
  check_finite(logits.data(), logits.size(), nullptr);
  return returned(draw_verified(logits.data(), nullptr, logits.size(), proposal, q, accepted));
}

int Sampler::verify_candidates(const float* values, const int32_t* ids, int n, int proposal,
                               const float* q, bool* accepted) {
  if (params_.temperature == 0.0f) {
    const int token = sample_candidates(values, ids, n);
    *accepted = token == proposal;
    return token;
  }
  const int needed = candidates_needed(params_);
  LLAMA2_CHECK(needed >= 1 && needed <= n);
  while (n > 0 && ids[n - 1] < 0) --n;
  LLAMA2_CHECK(n >= 1);
  check_finite(values, static_cast<size_t>(n), ids);
  return returned(ids[draw_verified(values, ids, static_cast<size_t>(n), proposal, q, accepted)]);
}

// top-k (HF: remove logits < the k-th largest, the cut value). When the next logit is outside the
// cut value's group, the k best stay, as in HF. When a group of near-equal logits straddles the
// cut, it is dropped whole, unless it holds the most probable token: then it is kept whole, at
// most its kMaxCandidates best when top_k < kMaxCandidates. Dropping never keeps a token outside
// the k best, so the candidates the ranks send (candidates_needed) hold every survivor; keeping
// the group would need every token near the k-th value, which can be hundreds (a trained model's
// byte-fallback tokens), and the full-logit and candidate paths would disagree: a request's tokens
// would depend on whether another request in its step forced full logits. (HF keeps exact ties
// with the k-th value: here they are such a group.)
void Sampler::cut_top_k(Ranked& r) const {
  const size_t k = static_cast<size_t>(params_.top_k);
  if (k == 0 || k >= r.order.size()) return;
  r.sort_head(k + 1);
  const double cut = r.value(r.order[k - 1]);
  const double tol = r.tolerance(cut);
  const bool straddles = r.value(r.order[k]) >= cut - tol;
  if (straddles && r.top > cut + tol) {
    r.keep_from(cut + tol, /*strict=*/true);
    return;
  }
  r.keep_from(cut - tol, /*strict=*/false);  // the k best, or the group of the top
  if (k < static_cast<size_t>(kMaxCandidates) && r.order.size() > kMaxCandidates) {
    r.sort_head(kMaxCandidates);
    r.order.resize(kMaxCandidates);
  }
}

// min_p: a token's probability relative to the top one's is its weight in work_ (the softmax
// relative to the largest logit, after temperature), so the cut is weight < min_p. In logit terms
// the floor is top + T * log(min_p); tokens within the tie tolerance of it are kept with it, as the
// other cuts keep groups (sampler.h), so a last-bit change of the logits never splits a group.
void Sampler::cut_min_p(Ranked& r) const {
  if (params_.min_p <= 0.0f) return;
  const double floor = r.top + static_cast<double>(params_.temperature) *
                                   std::log(static_cast<double>(params_.min_p));
  r.keep_from(floor - r.tolerance(floor), /*strict=*/false);
}

// top-p (HF: in ascending order, remove tokens whose cumulative probability is <= 1 - top_p; the
// most probable token always stays). An ascending cumulative sum is a tail sum of the descending
// order. Every token past a sorted head whose unsorted rest has mass <= the threshold is removed,
// so only that head needs sorting. Tail sums by rank are sums of order statistics: rounding moves
// them by last bits, whichever tokens hold the ranks. The group at the cut (the smallest kept
// logit) is kept whole: top-p promises the survivors at least top_p of the probability, which
// dropping a group of many near-equal tokens could break by far, and the cut always sees every
// survivor of top-k, so keeping costs nothing. Reads the softmax weights in work_.
void Sampler::cut_top_p(Ranked& r) const {
  if (params_.top_p >= 1.0f) return;
  double total = 0;
  for (int i : r.order) total += work_[i];
  const double threshold = (1.0 - static_cast<double>(params_.top_p) + kTopPSlack) * total;
  double rest = 0;
  for (size_t head = kFirstHead;; head *= 4) {
    r.sort_head(head);
    rest = 0;
    for (size_t i = r.sorted; i < r.order.size(); ++i) rest += work_[r.order[i]];
    if (rest <= threshold || r.sorted == r.order.size()) break;
  }
  size_t kept = r.sorted;
  double tail = rest;
  for (size_t i = r.sorted; i-- > 1;) {
    tail += work_[r.order[i]];
    if (tail > threshold) break;  // tails only grow from here: every earlier token stays
    kept = i;
  }
  const double cut = r.value(r.order[kept - 1]);
  r.keep_from(cut - r.tolerance(cut), /*strict=*/false);
}

// One uniform draw mapped by inverse CDF over the survivors in id order (sampler.h says why id
// order). Full logits are indexed by id: a pass over the vocabulary; candidates (at most
// kMaxCandidates) are sorted by id. Returns an index into the row.
void Sampler::order_by_id(Ranked& r, const int32_t* ids, size_t n, std::vector<uint8_t>& kept) {
  std::vector<int>& order = r.order;
  if (ids == nullptr) {
    kept.assign(n, 0);
    for (int i : order) kept[i] = 1;
    order.clear();
    for (size_t i = 0; i < n; ++i) {
      if (kept[i]) order.push_back(static_cast<int>(i));
    }
  } else {
    std::sort(order.begin(), order.end(), [ids](int a, int b) { return ids[a] < ids[b]; });
  }
}

int Sampler::inverse_cdf(Ranked& r, const int32_t* ids, size_t n) {
  order_by_id(r, ids, n, kept_);
  std::vector<int>& order = r.order;
  double mass = 0;
  for (int i : order) mass += work_[i];
  const double target = uniform01(rng_) * mass;
  double cumulative = 0;
  int last = order.front();
  for (int i : order) {
    cumulative += work_[i];
    if (target < cumulative) return i;
    if (work_[i] > 0) last = i;
  }
  return last;  // rounding left target at the total: the last token that has any probability
}

}  // namespace llama2
