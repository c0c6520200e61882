// Next-token selection on rank 0, with the semantics of Hugging Face `transformers` generate so
// that a request gives the same kind of text as the reference implementation:
//   1. repetition penalty over the distinct ids of prompt + generated (also when greedy);
//   2. temperature == 0: argmax, ties to the lowest id (torch.argmax);
//   3. else logits / temperature, then top-k, then top-p, then a draw from the softmax of the
//      survivors.
// The draw is one uniform number per step from std::mt19937_64, mapped by inverse CDF over the
// survivors in descending probability (ties by id), so the token depends only on the logits, the
// seed and the number of earlier calls, never on sort stability or the standard library.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/sampling_params.h"

namespace llama2 {

class Sampler {
 public:
  // `p` must pass validate_sampling (checked again here as an internal invariant). One Sampler per
  // request: its RNG advances with each sample() call, so a seed fixes the whole sequence.
  Sampler(const SamplingParams& p, uint64_t seed);

  // logits: [vocab] fp32 for the next position, overwritten with the penalised logits.
  // context: prompt + generated ids so far, each in [0, vocab).
  // Throws llama2::Error on a NaN or +inf logit (a numerics bug upstream, not something to sample
  // around) or when every logit is -inf.
  int sample(std::vector<float>& logits, const std::vector<int>& context);

  // The same choice from a row's best candidates (values/ids [n], best first, ties by lower id,
  // as StepLogits gives them). Exact when candidates_needed(params) <= n: greedy needs the best
  // one; top-k sampling never looks past the k best (HF also keeps every token tied with the
  // k-th, which only differs when such ties run past the n-th candidate). Same errors as sample().
  int sample_candidates(const float* values, const int32_t* ids, int n);

  // How many candidates per row sample_candidates needs for `p`: 1 for greedy, top_k for top-k
  // sampling (<= kMaxCandidates); 0 when it needs the full logits (a repetition penalty changes
  // the ranking; plain temperature or top-p sampling reads the whole distribution).
  static int candidates_needed(const SamplingParams& p);

 private:
  void apply_repetition_penalty(std::vector<float>& logits, const std::vector<int>& context);
  static void check_finite(const float* logits, size_t n, const int32_t* ids);
  // Index into logits[0, n) drawn after temperature, top-k and top-p; equal values rank by index.
  int draw(const float* logits, size_t n);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> seen_;  // [vocab] scratch for distinct context ids, all 0 between calls
  std::vector<int> order_;     // [vocab] scratch: candidate ids, best first as far as sorted
  std::vector<double> work_;   // [vocab] scratch: scaled logits, then probabilities
};

}  // namespace llama2
