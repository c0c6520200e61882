// Next-token selection on rank 0, with the semantics of Hugging Face `transformers` generate so
// that a request gives the same kind of text as the reference implementation:
//   1. repetition penalty over the distinct ids of prompt + generated (also when greedy), then
//      OpenAI's presence and frequency penalties over the ids this Sampler has returned so far;
//   2. temperature == 0: argmax, ties to the lowest id (torch.argmax);
//   3. else logits / temperature, then top-k, then min_p (vLLM's: drop tokens whose probability is
//      below min_p times the top one's), then top-p, then a draw from the softmax of the survivors.
// A seed must give the same tokens whatever the rank count, and the rank count changes the
// logits in their last bits (a different summation order in the tensor-parallel reductions). The
// draw therefore depends on the logits only through quantities that such a change moves by a last
// bit, never by a whole token:
//   - The draw is one uniform number u per step from std::mt19937_64, mapped by inverse CDF over
//     the survivors in vocabulary-id order. (In descending-probability order, two tokens whose
//     logits differ by rounding swap places between rank counts, and every later boundary of the
//     walk moves by a whole token's probability.) A last-bit change of one probability moves each
//     boundary by a last bit, so it changes the token only when u lies within a last bit of a
//     boundary.
//   - The top-k and top-p cuts never split a group of near-equal logits: logits within
//     kTieTolerance * max(|largest logit|, |cut value|) of the cut value (the smallest logit HF
//     keeps) are kept or dropped together: top-p keeps such a group, top-k drops it unless it
//     holds the most probable token (sampler.cpp says why). The cut value is an order statistic,
//     which a last-bit change moves by a last bit whichever token holds it.
// The softmax is taken relative to the largest logit, whose change scales every weight alike, and
// its sum runs in id order. The groups are measured on the logits before the temperature: the
// rounding noise is in the logits, and dividing by T scales noise and differences alike.
// Greedy stays torch.argmax: two logits that differ only by rounding can still pick different
// tokens at different rank counts there.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/sampling_params.h"

namespace llama2 {

class Sampler {
 public:
  // Logits closer to a cut value than this, relative to max(|largest logit|, |cut value|), are one
  // group at that cut. Rank-count differences in fp32 are rounding: a few ulps (6e-8 relative
  // each) of the values summed, grown over the layers; trained checkpoints hold groups (the
  // byte-fallback tokens) within ~1e-5 absolute. 1e-5 relative covers both at logit sizes >= 1,
  // and groups only tokens whose probabilities differ by a factor below exp(1e-5 * size / T):
  // 1.0002 for size 20 at T = 1. fp16/bf16 rounding (CUDA) is far larger and not covered.
  static constexpr double kTieTolerance = 1e-5;

  // `p` must pass validate_sampling (checked again here as an internal invariant). One Sampler per
  // request: its RNG advances with each sample() call, so a seed fixes the whole sequence.
  Sampler(const SamplingParams& p, uint64_t seed);

  // logits: [vocab] fp32 for the next position, overwritten with the penalised logits.
  // context: prompt + generated ids so far, each in [0, vocab). The presence/frequency penalties
  // count the ids this Sampler returned (one call per generated token).
  // Throws llama2::Error on a NaN or +inf logit (a numerics bug upstream, not something to sample
  // around) or when every logit is -inf.
  int sample(std::vector<float>& logits, const std::vector<int>& context);

  // The same choice from a row's best candidates (values/ids [n], best first, ties by lower id,
  // as StepLogits gives them), bit for bit, when n >= candidates_needed(params). Same errors as
  // sample().
  int sample_candidates(const float* values, const int32_t* ids, int n);

  // Speculative verification of `proposal` at this row (docs/speculative.md): the token this row
  // gives and *accepted, whether it is the proposal. Greedy: the argmax, as sample() (accepted when
  // the proposal is it). Sampled: the proposal is accepted with probability min(1, p(x) / q(x)), p
  // the distribution sample() draws from (after penalties, temperature and the cuts), else a token
  // is drawn from normalize(max(0, p - q)) (speculative_rule.h); the token follows p exactly.
  // q: [vocab] the proposer's probabilities by token id, or null for a point mass at the proposal
  // (n-gram lookup). Penalties, errors and the OpenAI counts as sample(). One or two uniform draws.
  int verify(std::vector<float>& logits, const std::vector<int>& context, int proposal,
             const float* q, bool* accepted);
  // The same from a row's candidates (sample_candidates' terms).
  int verify_candidates(const float* values, const int32_t* ids, int n, int proposal,
                        const float* q, bool* accepted);

  // How many candidates per row sample_candidates needs for `p`: 1 for greedy; kMaxCandidates for
  // top-k sampling with top_k < kMaxCandidates (the cut reads the value after the k-th, and keeps
  // a group of near-equal logits that holds the most probable token whole, capped at
  // kMaxCandidates); 0 when it needs the full logits (a repetition penalty changes the ranking;
  // plain temperature or top-p sampling reads the whole distribution; so do presence and
  // frequency penalties).
  static int candidates_needed(const SamplingParams& p);

 private:
  void apply_repetition_penalty(std::vector<float>& logits, const std::vector<int>& context);
  void apply_openai_penalties(std::vector<float>& logits) const;
  int returned(int id);  // counts `id` for the OpenAI penalties, returns it
  static void check_finite(const float* logits, size_t n, const int32_t* ids);
  // Index into logits[0, n) drawn after temperature, top-k and top-p, in named steps (sampler.cpp):
  // rank the finite candidates, cut top-k, weigh by softmax, cut top-p, draw by inverse CDF.
  // ids: [n] the token id of each entry, or null when the index is the id. Equal logits rank by
  // lower id.
  int draw(const float* logits, const int32_t* ids, size_t n);
  class Ranked;
  // verify's sampled path: draw()'s cuts, then the accept / resample rule over the survivors.
  int draw_verified(const float* logits, const int32_t* ids, size_t n, int proposal, const float* q,
                    bool* accepted);
  // The survivors of the cuts in `r` and their weights (work_), before a draw.
  void weigh(Ranked& r, size_t n);
  // r.order becomes the survivors in token-id order (above: why id order).
  static void order_by_id(Ranked& r, const int32_t* ids, size_t n, std::vector<uint8_t>& kept);
  void cut_top_k(Ranked& r) const;
  void cut_min_p(Ranked& r) const;
  void cut_top_p(Ranked& r) const;
  int inverse_cdf(Ranked& r, const int32_t* ids, size_t n);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> seen_;  // [vocab] scratch for distinct context ids, all 0 between calls
  std::vector<uint8_t> kept_;  // [vocab] scratch: 1 for the survivors of the cuts
  std::vector<int> order_;     // [vocab] scratch: candidate indices, best first as far as sorted
  std::vector<double> work_;   // [vocab] scratch: softmax weights relative to the largest logit
  std::vector<double> p_,
      q_;  // verify's scratch: the survivors' weights and proposer probabilities
  // Generated ids and how often each was returned, in first-seen order (a request generates far
  // fewer distinct ids than the vocabulary has); kept only when a presence/frequency penalty is on.
  std::vector<std::pair<int, int>> generated_;
};

}  // namespace llama2
