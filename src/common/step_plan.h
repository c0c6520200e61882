// The step plan: what rank 0 decides for one engine step and broadcasts to every rank.
// A shared value type with a compact int32 wire form (one MPI_Bcast of the length, one of the
// body).
#pragma once

#include <cstdint>
#include <vector>

namespace llama2 {

enum class StepKind : int32_t {
  kForward = 1,   // run the forward pass described by `seqs`
  kShutdown = 2,  // leave the worker loop; `exit_code` is the process exit status
  // Run the forward pass of `seqs` and score every token row t with targets[t] >= 0: the
  // log-probability of token targets[t] at the position after t (log-softmax of the raw logits).
  // Each rank reduces its vocabulary slice (max, sum of exponentials, the target's logit when it
  // owns it) and rank 0 combines them: full logits never leave a rank. want_logits is ignored.
  kScore = 3,
};

// One sequence's part of a step: `n_tokens` new tokens at positions [pos_begin,
// pos_begin+n_tokens). Its KV block table covers positions [0, pos_begin + n_tokens).
struct SeqStep {
  int32_t seq_id = 0;       // coordinator's id, for diagnostics only
  int32_t pos_begin = 0;    // position of the first new token (= tokens already in the KV cache)
  int32_t n_tokens = 0;     // new tokens this step (prompt chunk, or 1 when decoding)
  int32_t want_logits = 0;  // 1: produce logits for the last new token
  int32_t table_begin = 0;  // offset of this sequence's block table in StepPlan::block_ids
  int32_t table_len = 0;    // number of blocks in the table
  // 1 (with want_logits): rank 0 also needs this row's log-sum-exp over the whole vocabulary, for
  // the sampled token's log-probability (StepLogits::lse). Only steps with such a row pay for it.
  int32_t want_logprobs = 0;
};

constexpr int kMaxCandidates = 64;

struct StepPlan {
  StepKind kind = StepKind::kForward;
  int32_t exit_code = 0;
  // What the logit rows return to rank 0: 0 = full logits; k in [1, kMaxCandidates] = only the k
  // best (value, token id) pairs of each row, when greedy or top-k sampling needs no more: each
  // rank ranks its vocabulary slice on the device and rank 0 merges tp x k pairs per row.
  int32_t candidates = 0;
  std::vector<SeqStep> seqs;
  std::vector<int32_t> tokens;     // [sum of n_tokens], sequence after sequence
  std::vector<int32_t> block_ids;  // [sum of table_len], the block tables back to back
  std::vector<int32_t> targets;    // kScore: [total_tokens], target id of each row, -1 = unscored

  int total_tokens() const { return static_cast<int>(tokens.size()); }
  int logit_rows() const;  // number of sequences with want_logits
  // [logit_rows()]: 1 for each logit row whose sequence has want_logprobs, in plan order.
  std::vector<int32_t> logprob_flags() const;
  bool any_logprobs() const;  // some logit row has want_logprobs
  int score_rows() const;     // kScore: number of targets >= 0
};

// Appends one sequence's part of a step: `n_tokens` new tokens at positions [pos_begin,
// pos_begin + n_tokens) and the first `table_len` ids of its block table (enough blocks to cover
// those positions; the engine checks). want_logprobs counts only with want_logits.
void append_seq(StepPlan* plan, int32_t seq_id, int32_t pos_begin, const int32_t* tokens,
                int32_t n_tokens, bool want_logits, const int32_t* table, int32_t table_len,
                bool want_logprobs = false);

std::vector<int32_t> encode_step_plan(const StepPlan& plan);
// Throws Error when the buffer is not a well-formed plan (lengths, offsets, kinds).
StepPlan decode_step_plan(const std::vector<int32_t>& wire);

}  // namespace llama2
