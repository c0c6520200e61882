// The accept / resample rule of speculative sampling (Leviathan et al. 2023, Chen et al. 2023),
// on exact distributions, apart from any model: the statistical test (test_speculative_rule.cpp)
// drives it directly, and Sampler::verify feeds it the distribution sample() would draw from.
//
// A proposal x drawn from the proposer's distribution q is accepted with probability
// min(1, p(x) / q(x)); when rejected, the token is drawn from the residual
// normalize(max(0, p - q)). The token so chosen follows p exactly, whatever q is. For n-gram
// lookup q is a point mass at x: accepted with probability p(x), residual p without x.
#pragma once

#include <cstddef>

namespace llama2 {

// p: [n] the target's weights over n entries (>= 0, not necessarily normalized; at least one
// > 0), in the order a draw walks them (Sampler: the survivors in token-id order).
// q: [n] the proposer's probabilities of the same entries (normalized over the whole vocabulary,
// so they may sum to less than 1 here), or null for a point mass at the proposal.
// x: the proposal's entry, or -1 when the target gives it no entry (p(x) = 0: always rejected).
//
// Whether the proposal is accepted, for a uniform u in [0, 1): u < p(x) / q(x).
bool speculative_accepts(const double* p, const double* q, size_t n, long x, double u);
// After a rejection: the entry drawn from normalize(max(0, p - q)) by inverse CDF with a second,
// independent uniform u.
size_t speculative_resample(const double* p, const double* q, size_t n, long x, double u);

// Index of the entry an inverse CDF over weights w[0, n) gives for u in [0, 1): the first whose
// cumulative weight exceeds u * total, or the last with weight > 0 when rounding leaves u * total
// at the total. At least one weight must be > 0.
size_t inverse_cdf_pick(const double* w, size_t n, double u);

}  // namespace llama2
