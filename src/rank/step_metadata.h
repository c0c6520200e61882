// The per-step integer inputs of the GPU kernels (token ids, positions, KV slots, block tables,
// ...) laid out in one int32 array at fixed offsets, so one host-to-device copy moves them and a
// captured CUDA graph can keep reading the same addresses step after step. Host-only code: the
// CUDA runner uploads the array; the unit tests check the layout and the padding on any machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/step_plan.h"

namespace llama2 {

struct StepLayout {
  int max_tokens = 0;  // tokens per step (activation buffers)
  int max_seqs = 0;    // sequences per step, and logit rows per step
  int max_blocks = 0;  // block-table width: blocks of the longest sequence
  int block_size = 0;  // tokens per KV block
  int num_blocks = 0;  // blocks in the cache (every block id must be below)

  StepLayout(int tokens, int seqs, int max_seq_len, int block_size_, int num_blocks_);
  StepLayout() = default;

  // Offsets (in int32 words) of each region.
  size_t tokens_at() const { return 0; }                                        // [max_tokens]
  size_t pos_at() const { return static_cast<size_t>(max_tokens); }             // [max_tokens]
  size_t slot_at() const { return 2 * static_cast<size_t>(max_tokens); }        // [max_tokens]
  size_t logit_rows_at() const { return 3 * static_cast<size_t>(max_tokens); }  // [max_seqs]
  size_t cu_tokens_at() const { return logit_rows_at() + max_seqs; }            // [max_seqs + 1]
  size_t pos_begin_at() const { return cu_tokens_at() + max_seqs + 1; }         // [max_seqs]
  size_t context_lens_at() const { return pos_begin_at() + max_seqs; }          // [max_seqs]
  size_t block_tables_at() const { return context_lens_at() + max_seqs; }  // [max_seqs, max_blocks]
  size_t words() const { return block_tables_at() + static_cast<size_t>(max_seqs) * max_blocks; }
};

// What the kernels launch over this step.
struct StepShape {
  int tokens = 0;          // rows of the activations (padded in a graph step)
  int seqs = 0;            // sequences (padded in a graph step)
  int logit_rows = 0;      // rows gathered for the LM head (padded in a graph step)
  int max_context = 0;     // decode: bound on context_lens (the layout's longest in a graph)
  int max_new_tokens = 0;  // prefill: bound on each sequence's new tokens
  bool decode = false;     // every sequence adds one token and wants its logits
  // The leading sequences that add one token each (all of them in a decode step; in a mixed step
  // the batch scheduler puts its decoding sequences first): their attention can take the decode
  // kernel while the rest take the prefill kernel. decode_context bounds their context lengths.
  int decode_seqs = 0;
  int decode_context = 0;
  size_t words_used = 0;  // prefix of the array to upload
};

// True when every sequence adds one token and wants its logits (one row): the steps that replay
// graphs.
bool is_decode_step(const StepPlan& plan);

// Writes `plan` into host[0, layout.words()). bucket > 0 (decode steps only) pads the step to
// `bucket` sequences of one token: token 0, KV slot -1 (nothing written), context length 0 (zero
// attention rows), and sets max_context to `context_bound` (0: the layout's longest sequence;
// it must cover every context of the plan), so every step of that (bucket, bound) pair has the
// same launch shapes. Error (naming the limit) when the plan exceeds the layout or names a block
// id outside the cache.
StepShape fill_step_metadata(const StepPlan& plan, const StepLayout& layout, int bucket,
                             int32_t* host, int context_bound = 0);

// Decode batches are padded up to these sizes, one CUDA graph each: 1 2 4 8 16 24 ... 64 96 128
// ... (at most 7 padding rows up to 64, 31 above), at most cap; 0 when S > cap (no graph).
int graph_batch_bucket(int S, int cap);
// A graph's decode attention is sized for a context bound: the step's longest context rounded up
// to a power of two (>= 256), at most `longest_possible` (the layout's longest sequence). Short
// contexts then get short grids instead of the grid for max_seq_len.
int graph_context_bound(int longest_context, int longest_possible);
// The row counts the fp8 GEMM is tuned for at start-up (LLAMA2_FP8_TUNE, CudaLinear::tune_fp8):
// every graph batch bucket up to cap, then doublings up to max_step_tokens (which ends the list).
std::vector<int> fp8_tuned_row_counts(int cap, int max_step_tokens);

}  // namespace llama2
