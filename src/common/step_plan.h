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
  // owns it) and rank 0 combines them: full logits never leave a rank. n_logits is ignored.
  kScore = 3,
};

// One sequence's part of a step: `n_tokens` new tokens at positions [pos_begin,
// pos_begin+n_tokens). Its KV block table covers positions [0, pos_begin + n_tokens).
struct SeqStep {
  int32_t seq_id = 0;     // coordinator's id, for diagnostics only
  int32_t pos_begin = 0;  // position of the first new token (= tokens already in the KV cache)
  int32_t n_tokens = 0;   // new tokens this step (prompt chunk, or 1 when decoding)
  // Logit rows of this sequence: the logits at its last n_logits new tokens, in position order
  // (0: none; 1: the next token after the chunk; up to n_tokens: several consecutive positions in
  // one step, as speculative verification scores K proposed tokens).
  int32_t n_logits = 0;
  int32_t table_begin = 0;  // offset of this sequence's block table in StepPlan::block_ids
  int32_t table_len = 0;    // number of blocks in the table
  // 1 (with n_logits): rank 0 also needs each of its rows' log-sum-exp over the whole vocabulary,
  // for the sampled token's log-probability (StepLogits::lse). Only steps with such a row pay.
  int32_t want_logprobs = 0;
};

// A logit row's vocabulary adjustments (constrained decoding's allowed tokens, logit_bias,
// min_tokens, stop ids), in full-vocabulary terms as the coordinator writes them. Every rank
// applies its slice's part to the raw logits before any reduction (argmax, top-k candidates,
// log-sum-exp; rank/logits_adjust.h): disallowed tokens become -inf, biases are added. So the
// candidates, the sampled token and its logprobs all come from the adjusted row, exactly as if
// the adjustment had been applied to the full row on one rank.
struct VocabAdjust {
  std::vector<uint32_t> allowed;   // [ceil(vocab / 32)]: bit id % 32 of word id / 32 set = allowed;
                                   // empty: every token allowed
  std::vector<int32_t> bias_ids;   // [n] token ids, each at most once
  std::vector<float> bias_values;  // [n] added to those tokens' logits
};

// One adjusted logit row in a plan: where its mask words and biases are.
struct RowAdjust {
  int32_t row = 0;          // the logit row (plan order, over all sequences' rows); ascending
  int32_t mask_begin = -1;  // offset of its mask_words_per_row words in StepPlan::mask_words;
                            // -1: no mask (every token allowed)
  int32_t bias_begin = 0;   // its biases: bias_ids / bias_values [bias_begin, +bias_count)
  int32_t bias_count = 0;
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

  // Vocabulary adjustments of some logit rows (kForward only). A mask covers the token ids
  // [mask_base, mask_base + 32 * mask_words_per_row): bit (id - mask_base) % 32 of word
  // (id - mask_base) / 32. Rank 0 writes full-vocabulary masks (mask_base 0); each other rank
  // receives only the words and bias entries of its own vocabulary slice (slice_adjustments).
  std::vector<RowAdjust> adjust;  // ascending rows
  int32_t mask_base = 0;
  int32_t mask_words_per_row = 0;
  std::vector<uint32_t> mask_words;  // [rows with a mask, mask_words_per_row]
  std::vector<int32_t> bias_ids;     // token ids
  std::vector<float> bias_values;

  int total_tokens() const { return static_cast<int>(tokens.size()); }
  int logit_rows() const;  // sum of the sequences' n_logits
  // [logit_rows()]: 1 for each logit row whose sequence has want_logprobs, in plan order.
  std::vector<int32_t> logprob_flags() const;
  bool any_logprobs() const;  // some logit row has want_logprobs
  int score_rows() const;     // kScore: number of targets >= 0
};

// Appends one sequence's part of a step: `n_tokens` new tokens at positions [pos_begin,
// pos_begin + n_tokens), the logits of its last `n_logits` of them, and the first `table_len` ids
// of its block table (enough blocks to cover those positions; the engine checks). want_logprobs
// counts only with n_logits.
void append_seq(StepPlan* plan, int32_t seq_id, int32_t pos_begin, const int32_t* tokens,
                int32_t n_tokens, int32_t n_logits, const int32_t* table, int32_t table_len,
                bool want_logprobs = false);

// Adds `a` (full-vocabulary terms, `vocab` tokens) to logit row `row`, which must come after
// every row adjusted so far. Error for a mask of the wrong size, a bias id outside the vocabulary
// or given twice, or a row out of order.
void add_row_adjust(StepPlan* plan, int32_t row, const VocabAdjust& a, int32_t vocab);

// The plan as the rank holding token ids [vocab_begin, vocab_begin + vocab_size) receives it: the
// same plan with only the mask words covering that slice (mask_base rounded down to a word) and
// the bias entries inside it. A plan without adjustments is returned unchanged.
StepPlan slice_adjustments(const StepPlan& plan, int32_t vocab_begin, int32_t vocab_size);

std::vector<int32_t> encode_step_plan(const StepPlan& plan);
// Throws Error when the buffer is not a well-formed plan (lengths, offsets, kinds).
StepPlan decode_step_plan(const std::vector<int32_t>& wire);

}  // namespace llama2
