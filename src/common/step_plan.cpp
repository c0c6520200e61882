#include "common/step_plan.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/check.h"

namespace llama2 {
namespace {
constexpr int32_t kMagic = 0x4c325350;        // "L2SP": catches a rank reading a foreign broadcast
constexpr int32_t kAdjustMagic = 0x4c32564a;  // "L2VJ": starts the optional adjustments section
constexpr int kSeqFields = 7;
constexpr int kAdjustFields = 4;
constexpr size_t kAdjustHeader = 6;  // magic, rows, mask_base, words per row, mask words, biases

Error malformed(const std::string& why) {
  return Error("malformed step plan: " + why);
}

int32_t float_bits(float f) {
  int32_t w;
  std::memcpy(&w, &f, sizeof(w));
  return w;
}

float bits_float(int32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
}

int32_t mask_words_for(int32_t vocab) {
  return (vocab + 31) / 32;
}
}  // namespace

int StepPlan::logit_rows() const {
  int n = 0;
  for (const auto& s : seqs) n += s.n_logits;
  return n;
}

std::vector<int32_t> StepPlan::logprob_flags() const {
  std::vector<int32_t> flags;
  for (const auto& s : seqs)
    flags.insert(flags.end(), static_cast<size_t>(s.n_logits), s.want_logprobs);
  return flags;
}

bool StepPlan::any_logprobs() const {
  for (const auto& s : seqs) {
    if (s.n_logits > 0 && s.want_logprobs) return true;
  }
  return false;
}

int StepPlan::score_rows() const {
  int n = 0;
  for (int32_t t : targets) n += t >= 0 ? 1 : 0;
  return n;
}

void append_seq(StepPlan* plan, int32_t seq_id, int32_t pos_begin, const int32_t* tokens,
                int32_t n_tokens, int32_t n_logits, const int32_t* table, int32_t table_len,
                bool want_logprobs) {
  LLAMA2_CHECK(n_logits >= 0 && n_logits <= n_tokens);
  SeqStep s;
  s.seq_id = seq_id;
  s.pos_begin = pos_begin;
  s.n_tokens = n_tokens;
  s.n_logits = n_logits;
  s.table_begin = static_cast<int32_t>(plan->block_ids.size());
  s.table_len = table_len;
  s.want_logprobs = n_logits > 0 && want_logprobs ? 1 : 0;
  plan->seqs.push_back(s);
  plan->tokens.insert(plan->tokens.end(), tokens, tokens + n_tokens);
  plan->block_ids.insert(plan->block_ids.end(), table, table + table_len);
}

void add_row_adjust(StepPlan* plan, int32_t row, const VocabAdjust& a, int32_t vocab) {
  if (!plan->adjust.empty() && plan->adjust.back().row >= row) {
    throw Error("vocabulary adjustments must be added in ascending row order (row " +
                std::to_string(row) + " after " + std::to_string(plan->adjust.back().row) + ")");
  }
  LLAMA2_CHECK(plan->mask_base == 0);  // a full-vocabulary plan, not a rank's slice
  RowAdjust r;
  r.row = row;
  if (!a.allowed.empty()) {
    const int32_t words = mask_words_for(vocab);
    if (static_cast<int32_t>(a.allowed.size()) != words) {
      throw Error("an allowed-token mask over " + std::to_string(vocab) + " tokens has " +
                  std::to_string(words) + " words (got " + std::to_string(a.allowed.size()) + ")");
    }
    plan->mask_words_per_row = words;
    r.mask_begin = static_cast<int32_t>(plan->mask_words.size());
    plan->mask_words.insert(plan->mask_words.end(), a.allowed.begin(), a.allowed.end());
  }
  LLAMA2_CHECK(a.bias_ids.size() == a.bias_values.size());
  std::vector<int32_t> ids = a.bias_ids;
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab || (i > 0 && ids[i] == ids[i - 1])) {
      throw Error("a logit bias names token id " + std::to_string(ids[i]) +
                  (ids[i] >= 0 && ids[i] < vocab
                       ? " twice"
                       : " outside the vocabulary [0, " + std::to_string(vocab) + ")"));
    }
  }
  r.bias_begin = static_cast<int32_t>(plan->bias_ids.size());
  r.bias_count = static_cast<int32_t>(a.bias_ids.size());
  plan->bias_ids.insert(plan->bias_ids.end(), a.bias_ids.begin(), a.bias_ids.end());
  plan->bias_values.insert(plan->bias_values.end(), a.bias_values.begin(), a.bias_values.end());
  plan->adjust.push_back(r);
}

StepPlan slice_adjustments(const StepPlan& plan, int32_t vocab_begin, int32_t vocab_size) {
  if (plan.adjust.empty()) return plan;
  StepPlan out = plan;
  out.mask_words.clear();
  out.bias_ids.clear();
  out.bias_values.clear();
  const int32_t first = (vocab_begin - plan.mask_base) / 32;
  const int32_t end = (vocab_begin + vocab_size - plan.mask_base + 31) / 32;
  out.mask_base = plan.mask_base + first * 32;
  out.mask_words_per_row = 0;
  for (RowAdjust& r : out.adjust) {
    const int32_t mask_from = r.mask_begin;
    if (mask_from >= 0) {
      out.mask_words_per_row = std::max(0, std::min(end, plan.mask_words_per_row) - first);
      r.mask_begin = static_cast<int32_t>(out.mask_words.size());
      const auto at = plan.mask_words.begin() + mask_from;
      out.mask_words.insert(out.mask_words.end(), at + first, at + first + out.mask_words_per_row);
    }
    const int32_t bias_from = r.bias_begin, bias_n = r.bias_count;
    r.bias_begin = static_cast<int32_t>(out.bias_ids.size());
    for (int32_t i = bias_from; i < bias_from + bias_n; ++i) {
      const int32_t id = plan.bias_ids[static_cast<size_t>(i)];
      if (id < vocab_begin || id >= vocab_begin + vocab_size) continue;
      out.bias_ids.push_back(id);
      out.bias_values.push_back(plan.bias_values[static_cast<size_t>(i)]);
    }
    r.bias_count = static_cast<int32_t>(out.bias_ids.size()) - r.bias_begin;
  }
  return out;
}

namespace {

void encode_adjustments(const StepPlan& p, std::vector<int32_t>* w) {
  w->insert(w->end(),
            {kAdjustMagic, static_cast<int32_t>(p.adjust.size()), p.mask_base, p.mask_words_per_row,
             static_cast<int32_t>(p.mask_words.size()), static_cast<int32_t>(p.bias_ids.size())});
  for (const RowAdjust& r : p.adjust) {
    w->insert(w->end(), {r.row, r.mask_begin, r.bias_begin, r.bias_count});
  }
  for (uint32_t m : p.mask_words) w->push_back(static_cast<int32_t>(m));
  w->insert(w->end(), p.bias_ids.begin(), p.bias_ids.end());
  for (float v : p.bias_values) w->push_back(float_bits(v));
}

// The adjustments section of `w` from offset `i` to its end (a forward plan's last part).
void decode_adjustments(const std::vector<int32_t>& w, size_t i, StepPlan* p) {
  if (w.size() - i < kAdjustHeader || w[i] != kAdjustMagic) throw malformed("length mismatch");
  const int64_t rows = w[i + 1], words = w[i + 4], biases = w[i + 5];
  p->mask_base = w[i + 2];
  p->mask_words_per_row = w[i + 3];
  if (rows < 1 || words < 0 || biases < 0 || p->mask_words_per_row < 0 || p->mask_base < 0 ||
      p->mask_base % 32 != 0 ||
      static_cast<int64_t>(w.size() - i) !=
          static_cast<int64_t>(kAdjustHeader) + rows * kAdjustFields + words + 2 * biases) {
    throw malformed("length mismatch");
  }
  if (p->kind != StepKind::kForward) throw malformed("adjustments outside a forward step");
  i += kAdjustHeader;
  const int logit_rows = p->logit_rows();
  for (int64_t k = 0; k < rows; ++k, i += kAdjustFields) {
    const RowAdjust r{w[i], w[i + 1], w[i + 2], w[i + 3]};
    const bool in_order = p->adjust.empty() || p->adjust.back().row < r.row;
    if (!in_order || r.row < 0 || r.row >= logit_rows || r.mask_begin < -1 ||
        (r.mask_begin >= 0 && r.mask_begin + int64_t{p->mask_words_per_row} > words) ||
        r.bias_begin < 0 || r.bias_count < 0 || r.bias_begin + int64_t{r.bias_count} > biases) {
      throw malformed("adjustment of logit row " + std::to_string(r.row) + " has invalid fields");
    }
    p->adjust.push_back(r);
  }
  for (int64_t k = 0; k < words; ++k) p->mask_words.push_back(static_cast<uint32_t>(w[i++]));
  p->bias_ids.assign(w.begin() + static_cast<std::ptrdiff_t>(i),
                     w.begin() + static_cast<std::ptrdiff_t>(i + biases));
  i += static_cast<size_t>(biases);
  for (int64_t k = 0; k < biases; ++k) p->bias_values.push_back(bits_float(w[i++]));
}

}  // namespace

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
    w.insert(w.end(), {s.seq_id, s.pos_begin, s.n_tokens, s.n_logits, s.table_begin, s.table_len,
                       s.want_logprobs});
  }
  w.insert(w.end(), p.tokens.begin(), p.tokens.end());
  w.insert(w.end(), p.block_ids.begin(), p.block_ids.end());
  if (p.kind == StepKind::kScore) {
    LLAMA2_CHECK(p.targets.size() == p.tokens.size());
    w.insert(w.end(), p.targets.begin(), p.targets.end());
  }
  // Steps without adjusted rows (nearly all of them) carry no trace of the section.
  if (!p.adjust.empty()) encode_adjustments(p, &w);
  return w;
}

StepPlan decode_step_plan(const std::vector<int32_t>& w) {
  constexpr size_t kHeader = 7;
  if (w.size() < kHeader || w[0] != kMagic) throw malformed("missing header");
  StepPlan p;
  p.kind = static_cast<StepKind>(w[1]);
  if (p.kind != StepKind::kForward && p.kind != StepKind::kShutdown && p.kind != StepKind::kScore) {
    throw malformed("unknown kind");
  }
  const int64_t n_targets = p.kind == StepKind::kScore ? w[5] : 0;  // one per token
  p.exit_code = w[2];
  p.candidates = w[3];
  if (p.candidates < 0 || p.candidates > kMaxCandidates) throw malformed("candidates out of range");
  const int64_t n_seqs = w[4], n_tokens = w[5], n_blocks = w[6];
  const int64_t base =
      static_cast<int64_t>(kHeader) + n_seqs * kSeqFields + n_tokens + n_blocks + n_targets;
  if (n_seqs < 0 || n_tokens < 0 || n_blocks < 0 || base > static_cast<int64_t>(w.size())) {
    throw malformed("length mismatch");
  }
  // Anything after the plan must be the adjustments section (checked in full below).
  const size_t rest = w.size() - static_cast<size_t>(base);
  if (rest > 0 && (rest < kAdjustHeader || w[static_cast<size_t>(base)] != kAdjustMagic)) {
    throw malformed("length mismatch");
  }
  size_t i = kHeader;
  int64_t token_sum = 0;
  for (int64_t s = 0; s < n_seqs; ++s, i += kSeqFields) {
    SeqStep q{w[i], w[i + 1], w[i + 2], w[i + 3], w[i + 4], w[i + 5], w[i + 6]};
    if (q.pos_begin < 0 || q.n_tokens < 1 || q.n_logits < 0 || q.n_logits > q.n_tokens ||
        q.table_begin < 0 || q.table_len < 0 ||
        (q.want_logprobs != 0 && (q.want_logprobs != 1 || q.n_logits == 0)) ||
        q.table_begin + static_cast<int64_t>(q.table_len) > n_blocks) {
      throw malformed("sequence " + std::to_string(q.seq_id) + " has invalid fields");
    }
    token_sum += q.n_tokens;
    p.seqs.push_back(q);
  }
  if (token_sum != n_tokens) throw malformed("token count mismatch");
  p.tokens.assign(w.begin() + i, w.begin() + i + n_tokens);
  i += n_tokens;
  p.block_ids.assign(w.begin() + i, w.begin() + i + n_blocks);
  i += n_blocks;
  p.targets.assign(w.begin() + i, w.begin() + i + n_targets);
  i += n_targets;
  if (i < w.size()) decode_adjustments(w, i, &p);
  return p;
}

}  // namespace llama2
