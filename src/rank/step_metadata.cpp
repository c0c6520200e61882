#include "rank/step_metadata.h"

#include <algorithm>
#include <string>

#include "common/check.h"

namespace llama2 {

StepLayout::StepLayout(int tokens, int seqs, int max_seq_len, int block_size_, int num_blocks_)
    : max_tokens(tokens),
      max_seqs(seqs),
      max_blocks((max_seq_len + block_size_ - 1) / block_size_),
      block_size(block_size_),
      num_blocks(num_blocks_) {
  LLAMA2_CHECK(tokens > 0 && seqs > 0 && max_seq_len > 0 && block_size_ > 0 && num_blocks_ > 0);
}

bool is_decode_step(const StepPlan& plan) {
  return !plan.seqs.empty() &&
         std::all_of(plan.seqs.begin(), plan.seqs.end(),
                     [](const SeqStep& q) { return q.n_tokens == 1 && q.n_logits == 1; });
}

StepShape fill_step_metadata(const StepPlan& plan, const StepLayout& L, int bucket, int32_t* host,
                             int context_bound) {
  const int S = static_cast<int>(plan.seqs.size());
  const int T = plan.total_tokens();
  if (T > L.max_tokens) {
    throw Error("step has " + std::to_string(T) + " tokens; this engine was sized for " +
                std::to_string(L.max_tokens) +
                " per step (lower --prefill-chunk or raise "
                "--max-step-tokens)");
  }
  if (S > L.max_seqs) {
    throw Error("step has " + std::to_string(S) + " sequences; this engine was sized for " +
                std::to_string(L.max_seqs) + " (--max-batch-size)");
  }
  // The LM head's buffers hold max_seqs rows: several logit rows per sequence fit while the step
  // has no more rows than the batch has sequences.
  if (plan.logit_rows() > L.max_seqs) {
    throw Error("step asks for " + std::to_string(plan.logit_rows()) +
                " logit rows; this engine was sized for " + std::to_string(L.max_seqs) +
                " (--max-batch-size)");
  }
  StepShape sh;
  sh.decode = is_decode_step(plan);
  LLAMA2_CHECK(bucket == 0 || (sh.decode && bucket >= S && bucket <= L.max_seqs));
  int32_t* tokens = host + L.tokens_at();
  int32_t* pos = host + L.pos_at();
  int32_t* slot = host + L.slot_at();
  int32_t* logit_rows = host + L.logit_rows_at();
  int32_t* cu = host + L.cu_tokens_at();
  int32_t* pos_begin = host + L.pos_begin_at();
  int32_t* ctx = host + L.context_lens_at();
  int32_t* tables = host + L.block_tables_at();

  int t = 0, rows = 0;
  cu[0] = 0;
  for (int i = 0; i < S; ++i) {
    const SeqStep& q = plan.seqs[i];
    const int len = q.pos_begin + q.n_tokens;
    const int need = (len + L.block_size - 1) / L.block_size;
    if (need > L.max_blocks || q.table_len < need) {
      throw Error("sequence " + std::to_string(q.seq_id) + " reaches position " +
                  std::to_string(len) + ", beyond the engine's maximum sequence length " +
                  std::to_string(L.max_blocks * L.block_size) + " or its block table");
    }
    const int32_t* table = plan.block_ids.data() + q.table_begin;
    for (int b = 0; b < need; ++b) {
      if (table[b] < 0 || table[b] >= L.num_blocks) {
        throw Error("sequence " + std::to_string(q.seq_id) + " names KV block " +
                    std::to_string(table[b]) + "; the cache has blocks [0, " +
                    std::to_string(L.num_blocks) + ")");
      }
      tables[static_cast<size_t>(i) * L.max_blocks + b] = table[b];
    }
    for (int j = 0; j < q.n_tokens; ++j, ++t) {
      const int p = q.pos_begin + j;
      tokens[t] = plan.tokens[t];
      pos[t] = p;
      slot[t] = table[p / L.block_size] * L.block_size + p % L.block_size;
    }
    for (int j = q.n_logits; j > 0; --j) logit_rows[rows++] = t - j;
    cu[i + 1] = t;
    pos_begin[i] = q.pos_begin;
    ctx[i] = len;
    sh.max_context = std::max(sh.max_context, len);
    sh.max_new_tokens = std::max(sh.max_new_tokens, q.n_tokens);
    if (q.n_tokens == 1 && sh.decode_seqs == i) {
      sh.decode_seqs = i + 1;
      sh.decode_context = std::max(sh.decode_context, len);
    }
  }
  sh.tokens = T;
  sh.seqs = S;
  sh.logit_rows = rows;
  if (bucket > 0) {
    for (int i = S; i < bucket; ++i) {  // padding sequences: one inert token each
      tokens[i] = 0;
      pos[i] = 0;
      slot[i] = -1;
      logit_rows[i] = i;
      cu[i + 1] = i + 1;
      pos_begin[i] = 0;
      ctx[i] = 0;
    }
    sh.tokens = sh.seqs = sh.logit_rows = bucket;
    const int longest = L.max_blocks * L.block_size;
    LLAMA2_CHECK(context_bound == 0 ||
                 (context_bound <= longest && context_bound >= sh.max_context));
    sh.max_context = context_bound > 0 ? context_bound : longest;
    sh.max_new_tokens = 1;
    sh.decode_seqs = bucket;
    sh.decode_context = sh.max_context;
  }
  sh.words_used = L.block_tables_at() + static_cast<size_t>(sh.seqs) * L.max_blocks;
  return sh;
}

int graph_batch_bucket(int S, int cap) {
  if (S > cap) return 0;
  int b = 1;
  while (b < S) b = b < 8 ? b * 2 : (b < 64 ? b + 8 : b + 32);
  return std::min(b, cap);
}

int graph_context_bound(int longest_context, int longest_possible) {
  int b = 256;
  while (b < longest_context) b *= 2;
  return std::min(b, longest_possible);
}

std::vector<int> fp8_tuned_row_counts(int cap, int max_step_tokens) {
  std::vector<int> rows;
  for (int b = graph_batch_bucket(1, cap); b > 0; b = graph_batch_bucket(b + 1, cap)) {
    rows.push_back(b);
  }
  int m = rows.empty() ? 1 : rows.back();
  while (m < max_step_tokens) {
    m = std::min(2 * m, max_step_tokens);
    rows.push_back(m);
  }
  return rows;
}

}  // namespace llama2
