#include "rank/logits_gather.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.h"
#include "rank/cpu_vec.h"

namespace llama2 {

bool candidate_before(float va, int32_t ia, float vb, int32_t ib) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  if (ia < 0 || ib < 0) return ib < 0 && ia >= 0;  // padding last
  return ia < ib;
}

namespace {
using cpu::load8;
using cpu::v8f;
using cpu::v8i;

// The index candidate_before ranks first in row [n] (-1 when n == 0): the largest value found 8
// lanes at a time, then its first index; a NaN, ranked before everything, is looked for only when
// the row has one.
LLAMA2_CPU_BODY int32_t first_best_body(const float* row, int32_t n) {
  v8f top8 = v8f{} - std::numeric_limits<float>::infinity();
  v8i nan8 = {};
  int32_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8f x = load8(row + j);
    top8 = x > top8 ? x : top8;
    nan8 |= x != x;  // NOLINT(misc-redundant-expression): true in the NaN lanes
  }
  float top = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int i = 0; i < 8; ++i) {
    top = top8[i] > top ? top8[i] : top;
    nan |= nan8[i] != 0;
  }
  for (; j < n; ++j) {
    top = row[j] > top ? row[j] : top;
    nan |= row[j] != row[j];
  }
  for (j = 0; j < n; ++j) {
    if (nan ? std::isnan(row[j]) : row[j] == top) return j;
  }
  return n > 0 ? 0 : -1;  // not reached for n > 0
}
LLAMA2_CPU_CLONES int32_t first_best(const float* row, int32_t n) {
  return first_best_body(row, n);
}
}  // namespace

void local_candidates(const float* logits, int rows, int vocab_local, int vocab_begin, int k,
                      float* values, int32_t* ids) {
  LLAMA2_CHECK(k >= 1 && rows >= 0 && vocab_local >= 0);
  if (k == 1) {
    // Greedy rows: one scan per row (the general path's iota and partial sort cost more than the
    // tiny model's whole LM head at batch 8).
    for (int r = 0; r < rows; ++r) {
      const float* row = logits + static_cast<int64_t>(r) * vocab_local;
      const int32_t best = first_best(row, vocab_local);
      values[r] = best >= 0 ? row[best] : -std::numeric_limits<float>::infinity();
      ids[r] = best >= 0 ? vocab_begin + best : -1;
    }
    return;
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab_local));
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<int64_t>(r) * vocab_local;
    std::iota(order.begin(), order.end(), 0);
    const int n = std::min(k, vocab_local);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return candidate_before(row[a], a, row[b], b); });
    for (int j = 0; j < k; ++j) {
      const int64_t o = static_cast<int64_t>(r) * k + j;
      values[o] = j < n ? row[order[j]] : -std::numeric_limits<float>::infinity();
      ids[o] = j < n ? vocab_begin + order[j] : -1;
    }
  }
}

void merge_candidates(const float* values, const int32_t* ids, int ranks, int rows, int k,
                      StepLogits* out) {
  out->rows = rows;
  out->width = k;
  out->values.assign(static_cast<size_t>(rows) * k, 0.f);
  out->ids.assign(static_cast<size_t>(rows) * k, -1);
  std::vector<int> pick;  // flat indices into values/ids of this row's tp * k pairs
  for (int r = 0; r < rows; ++r) {
    pick.clear();
    for (int rank = 0; rank < ranks; ++rank) {
      for (int j = 0; j < k; ++j) pick.push_back((rank * rows + r) * k + j);
    }
    std::partial_sort(pick.begin(), pick.begin() + k, pick.end(), [&](int a, int b) {
      return candidate_before(values[a], ids[a], values[b], ids[b]);
    });
    for (int j = 0; j < k; ++j) {
      out->values[static_cast<size_t>(r) * k + j] = values[pick[j]];
      out->ids[static_cast<size_t>(r) * k + j] = ids[pick[j]];
    }
  }
}

std::vector<size_t> vocab_slice_counts(const std::vector<ShardPlan>& shards, int rows) {
  std::vector<size_t> counts;
  for (const ShardPlan& s : shards) counts.push_back(static_cast<size_t>(rows) * s.vocab_size);
  return counts;
}

void stitch_vocab_slices(const float* gathered, const std::vector<ShardPlan>& shards, int rows,
                         int vocab, StepLogits* out) {
  out->rows = rows;
  out->width = vocab;
  out->ids.clear();
  out->values.assign(static_cast<size_t>(rows) * vocab, 0.f);
  const float* base = gathered;
  for (const ShardPlan& s : shards) {
    for (int row = 0; row < rows; ++row) {
      std::copy_n(base + static_cast<int64_t>(row) * s.vocab_size, s.vocab_size,
                  out->values.data() + static_cast<int64_t>(row) * vocab + s.vocab_begin);
    }
    base += static_cast<int64_t>(rows) * s.vocab_size;
  }
}

void slice_logsumexp(const float* logits, int rows, int vocab_local, int vocab_begin,
                     const int32_t* targets, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<int64_t>(r) * vocab_local;
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < vocab_local; ++j) m = std::max(m, row[j]);
    // Summed in double: the CPU result is the oracle the GPU kernel's fp32 sum is compared with.
    double sum = 0.0;
    if (vocab_local > 0 && std::isfinite(m)) {
      for (int j = 0; j < vocab_local; ++j) sum += std::exp(static_cast<double>(row[j] - m));
    }
    const int32_t t = targets != nullptr ? targets[r] : -1;
    const bool owned = t >= vocab_begin && t < vocab_begin + vocab_local;
    out[r * kSliceLseFields + 0] = m;
    out[r * kSliceLseFields + 1] = static_cast<float>(sum);
    out[r * kSliceLseFields + 2] = owned ? row[t - vocab_begin] : 0.f;
  }
}

void combine_logsumexp(const float* gathered, const std::vector<ShardPlan>& shards, int rows,
                       const int32_t* targets, double* lse, double* logprob) {
  const int64_t stride = static_cast<int64_t>(rows) * kSliceLseFields;  // one rank's block
  for (int r = 0; r < rows; ++r) {
    double m = -std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < shards.size(); ++k) {
      m = std::max(m, static_cast<double>(gathered[k * stride + r * kSliceLseFields]));
    }
    double sum = 0.0;
    for (size_t k = 0; k < shards.size(); ++k) {
      const float* f = gathered + k * stride + r * kSliceLseFields;
      if (f[1] > 0.f) sum += static_cast<double>(f[1]) * std::exp(static_cast<double>(f[0]) - m);
    }
    const double row_lse = m + std::log(sum);
    if (lse != nullptr) lse[r] = row_lse;
    if (targets == nullptr || logprob == nullptr) continue;
    logprob[r] = std::numeric_limits<double>::quiet_NaN();
    for (size_t k = 0; k < shards.size(); ++k) {
      const ShardPlan& s = shards[k];
      if (targets[r] >= s.vocab_begin && targets[r] < s.vocab_begin + s.vocab_size) {
        logprob[r] = static_cast<double>(gathered[k * stride + r * kSliceLseFields + 2]) - row_lse;
      }
    }
  }
}

void lse_from_slices(const float* gathered, const std::vector<ShardPlan>& shards,
                     const std::vector<int32_t>& flags, StepLogits* out) {
  const int rows = static_cast<int>(flags.size());
  out->lse.assign(flags.size(), std::numeric_limits<double>::quiet_NaN());
  std::vector<double> lse(flags.size());
  combine_logsumexp(gathered, shards, rows, nullptr, lse.data(), nullptr);
  for (int r = 0; r < rows; ++r) {
    if (flags[r]) out->lse[r] = lse[r];
  }
}

void lse_from_full_rows(const std::vector<int32_t>& flags, StepLogits* out) {
  LLAMA2_CHECK(out->full() && out->rows == static_cast<int>(flags.size()));
  const int V = out->width;
  ShardPlan whole;
  whole.vocab_size = V;
  const std::vector<ShardPlan> one = {whole};
  out->lse.assign(flags.size(), std::numeric_limits<double>::quiet_NaN());
  for (int r = 0; r < out->rows; ++r) {
    if (!flags[r]) continue;
    float part[kSliceLseFields];
    slice_logsumexp(out->values.data() + static_cast<int64_t>(r) * V, 1, V, 0, nullptr, part);
    combine_logsumexp(part, one, 1, nullptr, &out->lse[r], nullptr);
  }
}

void lse_from_full_rows(const std::vector<int32_t>& flags, const std::vector<ShardPlan>& shards,
                        StepLogits* out) {
  LLAMA2_CHECK(out->full() && out->rows == static_cast<int>(flags.size()));
  const int rows = out->rows, tp = static_cast<int>(shards.size());
  // [rank][rows, kSliceLseFields], as gather_to_root lays the ranks' summaries out.
  std::vector<float> parts(static_cast<size_t>(tp) * rows * kSliceLseFields);
  for (int k = 0; k < tp; ++k) {
    const ShardPlan& s = shards[static_cast<size_t>(k)];
    for (int r = 0; r < rows; ++r) {
      float* f = parts.data() + (static_cast<int64_t>(k) * rows + r) * kSliceLseFields;
      if (!flags[r]) {
        f[0] = -std::numeric_limits<float>::infinity(), f[1] = 0.f, f[2] = 0.f;
        continue;
      }
      slice_logsumexp(out->values.data() + static_cast<int64_t>(r) * out->width + s.vocab_begin, 1,
                      s.vocab_size, s.vocab_begin, nullptr, f);
    }
  }
  lse_from_slices(parts.data(), shards, flags, out);
}

}  // namespace llama2
