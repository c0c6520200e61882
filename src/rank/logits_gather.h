// Turning each rank's part of the logit rows into what rank 0's sampler reads (StepLogits): the
// vocabulary slices stitched back in order, or the per-rank candidates merged. Backend-neutral:
// both runners gather through their Comm (MPI on the CPU, NCCL on the GPU) and finish here.
#pragma once

#include <cstdint>
#include <vector>

#include "common/shard_plan.h"
#include "common/step_executor.h"

namespace llama2 {

// The k best (value, vocab_begin + j) of each row of logits [rows, vocab_local], best first in
// StepLogits' order; rows shorter than k are padded with (-inf, -1). values/ids: [rows, k].
void local_candidates(const float* logits, int rows, int vocab_local, int vocab_begin, int k,
                      float* values, int32_t* ids);

// gathered: [rank][rows, k] for every rank of the TP group, in rank order (values and ids).
// Writes the global best k per row into out.
void merge_candidates(const float* values, const int32_t* ids, int ranks, int rows, int k,
                      StepLogits* out);

// What each rank sends when the vocabulary slices of `rows` logit rows are gathered to rank 0
// (Comm::gather_to_root): rows * shards[rank].vocab_size elements.
std::vector<size_t> vocab_slice_counts(const std::vector<ShardPlan>& shards, int rows);

// gathered: the blocks [rows, shards[rank].vocab_size] fp32 of every rank, back to back in rank
// order. Writes full logits [rows, vocab] into out.
void stitch_vocab_slices(const float* gathered, const std::vector<ShardPlan>& shards, int rows,
                         int vocab, StepLogits* out);

// A log-softmax over a vocabulary split across ranks, without moving the logits: each rank reduces
// its slice of a row to three floats, rank 0 combines them. The per-slice part runs where the
// logits are (here on the CPU, kernels::launch_slice_logsumexp on the GPU, same layout); the
// combination is this file's. Used by `perplexity` (kScore steps); a sampled token's logprob is
// the same computation with the sampled id as the target.
//
// One row's slice summary, 3 floats: [max over the slice, sum over the slice of exp(x - max),
// the target's logit when vocab_begin <= target < vocab_begin + vocab_local, else 0].
constexpr int kSliceLseFields = 3;

// logits [rows, vocab_local] fp32; targets [rows] global ids (-1: none) or nullptr;
// out [rows, kSliceLseFields]. An empty slice gives (-inf, 0, 0).
void slice_logsumexp(const float* logits, int rows, int vocab_local, int vocab_begin,
                     const int32_t* targets, float* out);

// gathered: [rank][rows, kSliceLseFields], every rank's slice summaries in rank order. Writes the
// log-sum-exp of each row over the whole vocabulary into lse[rows] (if not nullptr) and, when
// targets is given, log p(targets[r]) = logit - lse into logprob[rows] (NaN for a target outside
// the vocabulary). Computed in double: the error is that of the fp32 inputs alone.
void combine_logsumexp(const float* gathered, const std::vector<ShardPlan>& shards, int rows,
                       const int32_t* targets, double* lse, double* logprob);

// StepLogits::lse of a step with logprob rows (flags: plan.logprob_flags()), NaN where the flag
// is 0. From the slice summaries of every rank ([rank][rows, kSliceLseFields], computed for all
// rows: on the GPU one launch over the contiguous logit rows is cheaper than picking rows), or,
// for a full-logit step, from out->values itself (one slice: the whole vocabulary).
void lse_from_slices(const float* gathered, const std::vector<ShardPlan>& shards,
                     const std::vector<int32_t>& flags, StepLogits* out);
void lse_from_full_rows(const std::vector<int32_t>& flags, StepLogits* out);
// The same summed slice by slice as `shards` cut the vocabulary, then combined: bit for bit what
// lse_from_slices gives when the ranks send their summaries, so a row's logprobs do not depend on
// whether its step gathered full rows (a top-p mate in the batch) or candidates (issue 41).
void lse_from_full_rows(const std::vector<int32_t>& flags, const std::vector<ShardPlan>& shards,
                        StepLogits* out);

// True when a is ranked before b: larger value first, NaN before everything, equal values (and
// -0 == +0) by lower id. The order of kernels::launch_topk.
bool candidate_before(float va, int32_t ia, float vb, int32_t ib);

}  // namespace llama2
