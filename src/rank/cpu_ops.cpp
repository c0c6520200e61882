#include "rank/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/check.h"

namespace llama2::cpu {

void embedding(const int32_t* tokens, int n_tokens, const float* table, int vocab_begin,
               int vocab_local, int hidden, float* out) {
  for (int t = 0; t < n_tokens; ++t) {
    const int local = tokens[t] - vocab_begin;
    float* dst = out + static_cast<int64_t>(t) * hidden;
    if (local >= 0 && local < vocab_local) {
      std::memcpy(dst, table + static_cast<int64_t>(local) * hidden, sizeof(float) * hidden);
    } else {
      std::memset(dst, 0, sizeof(float) * hidden);
    }
  }
}

void rmsnorm(const float* x, const float* weight, int n, int hidden, double eps, float* out) {
  for (int t = 0; t < n; ++t) {
    const float* row = x + static_cast<int64_t>(t) * hidden;
    float* dst = out + static_cast<int64_t>(t) * hidden;
    // Accumulate in double so the reference is at least as accurate as torch's fp32 reduction.
    double ss = 0.0;
    for (int i = 0; i < hidden; ++i) ss += static_cast<double>(row[i]) * row[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / hidden + static_cast<float>(eps)));
    for (int i = 0; i < hidden; ++i) dst[i] = weight[i] * (row[i] * inv);
  }
}

namespace {
// 8 float lanes; the compiler lowers this to SSE/AVX as the target allows.
typedef float v8f __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Fixed-order horizontal sum: part of what makes a row's result independent of its block.
inline float hsum(v8f a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// out[r, n + c] for R activation rows x C weight rows: each weight vector load serves R rows and
// each activation load serves C weight rows, so an 8-row batch step reads every weight once per
// 4 tokens and keeps the FMA units fed instead of waiting on loads.
template <int R, int C>
__attribute__((target_clones("arch=x86-64-v3", "default"))) void dot_block(
    const float* x, int64_t x_stride, const float* w, int64_t w_stride, int in, float* out,
    int64_t out_stride) {
  v8f acc[R][C] = {};
  int k = 0;
  for (; k + 8 <= in; k += 8) {
    v8f wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load8(w + c * w_stride + k);
    for (int r = 0; r < R; ++r) {
      const v8f xv = load8(x + r * x_stride + k);
      for (int c = 0; c < C; ++c) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float tail = 0.f;
      for (int kk = k; kk < in; ++kk) tail += x[r * x_stride + kk] * w[c * w_stride + kk];
      out[r * out_stride + c] = hsum(acc[r][c]) + tail;
    }
  }
}

template <int C>
void linear_cols(const float* x, const float* wn, int rows, int in, int out_features, float* out) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    dot_block<4, C>(x + static_cast<int64_t>(r) * in, in, wn, in, in,
                    out + static_cast<int64_t>(r) * out_features, out_features);
  }
  for (; r < rows; ++r) {
    dot_block<1, C>(x + static_cast<int64_t>(r) * in, in, wn, in, in,
                    out + static_cast<int64_t>(r) * out_features, out_features);
  }
}
}  // namespace

void linear(const float* x, const float* w, int rows, int in, int out_features, float* out) {
  // Every (row, n) is computed with the same lane split and summation order whatever block it
  // falls in, so a sequence's logits do not depend on what else is batched.
  int n = 0;
  for (; n + 2 <= out_features; n += 2) {
    linear_cols<2>(x, w + static_cast<int64_t>(n) * in, rows, in, out_features, out + n);
  }
  for (; n < out_features; ++n) {
    linear_cols<1>(x, w + static_cast<int64_t>(n) * in, rows, in, out_features, out + n);
  }
}

void rope(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
          double theta) {
  const int half = head_dim / 2;
  // HF builds inv_freq and the angles in fp32; doing the same keeps long positions bit-close.
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta),
                                  static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  std::vector<float> cos_t(half), sin_t(half);
  for (int t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_t[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_t[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<int64_t>(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = b * cos_t[i] + a * sin_t[i];
      }
    }
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

std::vector<int32_t> plan_positions(const StepPlan& plan) {
  std::vector<int32_t> pos;
  pos.reserve(plan.tokens.size());
  for (const auto& s : plan.seqs) {
    for (int i = 0; i < s.n_tokens; ++i) pos.push_back(s.pos_begin + i);
  }
  return pos;
}

namespace {
// Offset of (block slot, head) in a [num_blocks, kv_heads, block_size, head_dim] cache.
int64_t slot_offset(const KvLayerView& c, const StepPlan& plan, const SeqStep& s, int pos,
                    int head) {
  const int table_idx = pos / c.block_size;
  LLAMA2_CHECK(table_idx < s.table_len);
  const int block = plan.block_ids[s.table_begin + table_idx];
  LLAMA2_CHECK(block >= 0 && block < c.num_blocks);
  return ((static_cast<int64_t>(block) * c.kv_heads + head) * c.block_size + pos % c.block_size) *
         c.head_dim;
}
}  // namespace

void kv_write(const KvLayerView& c, const StepPlan& plan, const float* k, const float* v) {
  int t = 0;
  for (const auto& s : plan.seqs) {
    for (int i = 0; i < s.n_tokens; ++i, ++t) {
      for (int h = 0; h < c.kv_heads; ++h) {
        const int64_t dst = slot_offset(c, plan, s, s.pos_begin + i, h);
        const int64_t src = (static_cast<int64_t>(t) * c.kv_heads + h) * c.head_dim;
        std::memcpy(c.k + dst, k + src, sizeof(float) * c.head_dim);
        std::memcpy(c.v + dst, v + src, sizeof(float) * c.head_dim);
      }
    }
  }
}

void paged_attention(const KvLayerView& c, const StepPlan& plan, const float* q, int n_heads,
                     const std::vector<int>& kv_head_of, float* out) {
  const int d = c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> scores;
  std::vector<double> acc;  // [d], reused: no allocation per (token, head)
  int t = 0;
  for (const auto& s : plan.seqs) {
    for (int i = 0; i < s.n_tokens; ++i, ++t) {
      const int pos = s.pos_begin + i;
      scores.resize(pos + 1);
      for (int h = 0; h < n_heads; ++h) {
        const float* qh = q + (static_cast<int64_t>(t) * n_heads + h) * d;
        const int kvh = kv_head_of[h];
        float max_score = -INFINITY;
        for (int p = 0; p <= pos; ++p) {
          const float* kp = c.k + slot_offset(c, plan, s, p, kvh);
          float dot = 0.f;
          for (int j = 0; j < d; ++j) dot += qh[j] * kp[j];
          scores[p] = dot * scale;
          max_score = std::max(max_score, scores[p]);
        }
        double denom = 0.0;
        for (int p = 0; p <= pos; ++p) {
          scores[p] = std::exp(scores[p] - max_score);
          denom += scores[p];
        }
        float* oh = out + (static_cast<int64_t>(t) * n_heads + h) * d;
        acc.assign(d, 0.0);
        for (int p = 0; p <= pos; ++p) {
          const float* vp = c.v + slot_offset(c, plan, s, p, kvh);
          for (int j = 0; j < d; ++j) acc[j] += static_cast<double>(scores[p]) * vp[j];
        }
        for (int j = 0; j < d; ++j) oh[j] = static_cast<float>(acc[j] / denom);
      }
    }
  }
}

}  // namespace llama2::cpu
