#include "common/step_plan.h"

#include <string>

#include "common/check.h"

namespace llama2 {
namespace {
constexpr int32_t kMagic = 0x4c325350;  // "L2SP": catches a rank reading a foreign broadcast
constexpr int kSeqFields = 7;
}  // namespace

int StepPlan::logit_rows() const {
  int n = 0;
  for (const auto& s : seqs) n += s.want_logits ? 1 : 0;
  return n;
}

std::vector<int32_t> StepPlan::logprob_flags() const {
  std::vector<int32_t> flags;
  for (const auto& s : seqs) {
    if (s.want_logits) flags.push_back(s.want_logprobs);
  }
  return flags;
}

bool StepPlan::any_logprobs() const {
  for (const auto& s : seqs) {
    if (s.want_logits && s.want_logprobs) return true;
  }
  return false;
}

int StepPlan::score_rows() const {
  int n = 0;
  for (int32_t t : targets) n += t >= 0 ? 1 : 0;
  return n;
}

void append_seq(StepPlan* plan, int32_t seq_id, int32_t pos_begin, const int32_t* tokens,
                int32_t n_tokens, bool want_logits, const int32_t* table, int32_t table_len,
                bool want_logprobs) {
  SeqStep s;
  s.seq_id = seq_id;
  s.pos_begin = pos_begin;
  s.n_tokens = n_tokens;
  s.want_logits = want_logits ? 1 : 0;
  s.table_begin = static_cast<int32_t>(plan->block_ids.size());
  s.table_len = table_len;
  s.want_logprobs = want_logits && want_logprobs ? 1 : 0;
  plan->seqs.push_back(s);
  plan->tokens.insert(plan->tokens.end(), tokens, tokens + n_tokens);
  plan->block_ids.insert(plan->block_ids.end(), table, table + table_len);
}

std::vector<int32_t> encode_step_plan(const StepPlan& p) {
  std::vector<int32_t> w;
  w.reserve(7 + p.seqs.size() * kSeqFields + p.tokens.size() + p.block_ids.size());
  w.push_back(kMagic);
  w.push_back(static_cast<int32_t>(p.kind));
  w.push_back(p.exit_code);
  w.push_back(p.candidates);
  w.push_back(static_cast<int32_t>(p.seqs.size()));
  w.push_back(static_cast<int32_t>(p.tokens.size()));
  w.push_back(static_cast<int32_t>(p.block_ids.size()));
  for (const auto& s : p.seqs) {
    w.insert(w.end(), {s.seq_id, s.pos_begin, s.n_tokens, s.want_logits, s.table_begin, s.table_len,
                       s.want_logprobs});
  }
  w.insert(w.end(), p.tokens.begin(), p.tokens.end());
  w.insert(w.end(), p.block_ids.begin(), p.block_ids.end());
  if (p.kind == StepKind::kScore) {
    LLAMA2_CHECK(p.targets.size() == p.tokens.size());
    w.insert(w.end(), p.targets.begin(), p.targets.end());
  }
  return w;
}

StepPlan decode_step_plan(const std::vector<int32_t>& w) {
  auto bad = [](const std::string& why) { return Error("malformed step plan: " + why); };
  constexpr size_t kHeader = 7;
  if (w.size() < kHeader || w[0] != kMagic) throw bad("missing header");
  StepPlan p;
  p.kind = static_cast<StepKind>(w[1]);
  if (p.kind != StepKind::kForward && p.kind != StepKind::kShutdown && p.kind != StepKind::kScore) {
    throw bad("unknown kind");
  }
  const int64_t n_targets = p.kind == StepKind::kScore ? w[5] : 0;  // one per token
  p.exit_code = w[2];
  p.candidates = w[3];
  if (p.candidates < 0 || p.candidates > kMaxCandidates) throw bad("candidates out of range");
  const int64_t n_seqs = w[4], n_tokens = w[5], n_blocks = w[6];
  if (n_seqs < 0 || n_tokens < 0 || n_blocks < 0 ||
      static_cast<int64_t>(w.size()) !=
          static_cast<int64_t>(kHeader) + n_seqs * kSeqFields + n_tokens + n_blocks + n_targets) {
    throw bad("length mismatch");
  }
  size_t i = kHeader;
  int64_t token_sum = 0;
  for (int64_t s = 0; s < n_seqs; ++s, i += kSeqFields) {
    SeqStep q{w[i], w[i + 1], w[i + 2], w[i + 3], w[i + 4], w[i + 5], w[i + 6]};
    if (q.pos_begin < 0 || q.n_tokens < 1 || q.table_begin < 0 || q.table_len < 0 ||
        (q.want_logprobs != 0 && (q.want_logprobs != 1 || q.want_logits != 1)) ||
        q.table_begin + static_cast<int64_t>(q.table_len) > n_blocks) {
      throw bad("sequence " + std::to_string(q.seq_id) + " has invalid fields");
    }
    token_sum += q.n_tokens;
    p.seqs.push_back(q);
  }
  if (token_sum != n_tokens) throw bad("token count mismatch");
  p.tokens.assign(w.begin() + i, w.begin() + i + n_tokens);
  i += n_tokens;
  p.block_ids.assign(w.begin() + i, w.begin() + i + n_blocks);
  i += n_blocks;
  p.targets.assign(w.begin() + i, w.end());
  return p;
}

}  // namespace llama2
