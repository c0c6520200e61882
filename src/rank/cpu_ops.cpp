#include "rank/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/check.h"
#include "rank/cpu_vec.h"

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
// Fixed-order horizontal sum: part of what makes a row's result independent of its block.
inline float hsum(v8f a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// hsum of 8 accumulators at once, lane j of the result = hsum(a[j]) bit for bit (same pairing, same
// order), in 7 vector adds instead of 8 x 7 scalar ones: for short rows (head_dim 8 in the tiny
// models) the scalar sums would cost more than the multiply-adds.
inline v8f hsum8(const v8f* a) {
  // __builtin_shufflevector (GCC >= 12 and clang) takes the lane indices as constants: index j < 8
  // is lane j of the first operand, 8 + j lane j of the second.
  v8f p[4], q[2];
  // p[i] = [a0 pairs, a1 pairs interleaved]: (x0+x1), (y0+y1), (x2+x3), (y2+y3), ...
  for (int i = 0; i < 4; ++i) {
    p[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  // q[i]: ((x0+x1)+(x2+x3)) for four accumulators, then their ((x4+x5)+(x6+x7)).
  for (int i = 0; i < 2; ++i) {
    q[i] = __builtin_shufflevector(p[2 * i], p[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(p[2 * i], p[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  return __builtin_shufflevector(q[0], q[1], 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(q[0], q[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

// The scalar tail of a dot product (in % 8 trailing elements), in index order.
inline float dot_tail(const float* x, const float* w, int k, int in) {
  float tail = 0.f;
  for (; k < in; ++k) tail += x[k] * w[k];
  return tail;
}

// out[r, 8c + j] for R activation rows x C column panels (PackedLinear): each k step loads C
// weight vectors and broadcasts R activations into R x C independent multiply-add chains, enough to
// cover the FMA latency (R = 1 needs C = 8). Every output is one chain, k = 0, 1, ..., in - 1 in
// order, whatever R, C or the thread that runs it: a row's result does not depend on its batch.
// `panels` points at the first of the C panels; `width` (> 0) is how many of the 8C columns from
// `out` exist, the rest being padding.
template <int R, int C>
inline __attribute__((always_inline)) void linear_tile(const float* x, int in, const float* panels,
                                                       float* out, int64_t os, int width) {
  v8f acc[R][C] = {};
  for (int k = 0; k < in; ++k) {
    v8f w[C];
    for (int c = 0; c < C; ++c) w[c] = load8(panels + (static_cast<int64_t>(c) * in + k) * 8);
    for (int r = 0; r < R; ++r) {
      const v8f xv = v8f{} + x[static_cast<int64_t>(r) * in + k];
      for (int c = 0; c < C; ++c) acc[r][c] += xv * w[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C && 8 * c < width; ++c) {
      float* dst = out + r * os + 8 * c;
      if (8 * c + 8 <= width) {
        store8(dst, acc[r][c]);
      } else {
        for (int j = 0; j < width - 8 * c; ++j) dst[j] = acc[r][c][j];
      }
    }
  }
}

// linear_tile<R, c> for a runtime c in [1, C].
template <int R, int C>
inline __attribute__((always_inline)) void linear_tile_upto(int c, const float* x, int in,
                                                            const float* panels, float* out,
                                                            int64_t os, int width) {
  if constexpr (C > 1) {
    if (c < C) return linear_tile_upto<R, C - 1>(c, x, in, panels, out, os, width);
  }
  linear_tile<R, C>(x, in, panels, out, os, width);
}

// R rows over output columns [n0, n1) (multiples of 8 except at w.out), C vectors at a time.
template <int R, int C>
inline __attribute__((always_inline)) void linear_rows(const float* x, const PackedLinear& w,
                                                       int n0, int n1, float* out, int64_t os) {
  for (int n = n0; n < n1; n += 8 * C) {
    const int c = std::min(C, (n1 - n + 7) / 8);
    linear_tile_upto<R, C>(c, x, w.in, w.wt.data() + static_cast<int64_t>(n) * w.in, out + n, os,
                           n1 - n);
  }
}

// Every row over output columns [n0, n1), 64 columns (8 panels) at a time so that the panels stay
// in L1/L2 while every row block passes over them (a model larger than the caches streams its
// weights from memory once per step, not once per 4 rows): blocks of 4 rows (12 chains, 3 weight
// vectors per 4 broadcasts), then the 1-3 left over in shapes that still keep >= 8 chains.
LLAMA2_CPU_CLONES void linear_range(const float* x, int rows, const PackedLinear& w, int n0, int n1,
                                    float* out, int64_t os) {
  for (int c0 = n0; c0 < n1; c0 += 64) {
    const int c1 = std::min(n1, c0 + 64);
    int r = 0;
    for (; r + 4 <= rows; r += 4)
      linear_rows<4, 3>(x + int64_t{r} * w.in, w, c0, c1, out + r * os, os);
    const float* xr = x + int64_t{r} * w.in;
    float* o = out + r * os;
    switch (rows - r) {
      case 3:
        linear_rows<3, 3>(xr, w, c0, c1, o, os);
        break;
      case 2:
        linear_rows<2, 4>(xr, w, c0, c1, o, os);
        break;
      case 1:
        linear_rows<1, 8>(xr, w, c0, c1, o, os);
        break;
      default:
        break;
    }
  }
}
}  // namespace

PackedLinear pack_linear(const std::vector<std::pair<const float*, int>>& parts, int in) {
  PackedLinear p;
  p.in = in;
  for (const auto& part : parts) p.out += part.second;
  p.ld = (p.out + 7) / 8 * 8;
  p.wt.assign(static_cast<size_t>(in) * p.ld, 0.f);
  int col = 0;
  for (const auto& [w, rows] : parts) {
    for (int n = 0; n < rows; ++n, ++col) {
      float* panel = p.wt.data() + static_cast<size_t>(col / 8) * in * 8;
      for (int k = 0; k < in; ++k)
        panel[static_cast<size_t>(k) * 8 + col % 8] = w[static_cast<int64_t>(n) * in + k];
    }
  }
  return p;
}

void linear(const float* x, const PackedLinear& w, int rows, float* out, int64_t out_stride,
            ThreadPool* pool) {
  LLAMA2_CHECK(out_stride >= w.out);
  // Threads split the output columns in multiples of 8 (any split gives the same bits).
  const int64_t macs = static_cast<int64_t>(rows) * w.in * w.out;
  const int groups = (w.out + 7) / 8;
  const int parts = parallel_parts(pool, macs, groups);
  if (parts <= 1) {
    linear_range(x, rows, w, 0, w.out, out, out_stride);
    return;
  }
  pool->run(parts, [&](int part) {
    const int n0 = std::min(w.out, 8 * (groups * part / parts));
    const int n1 = std::min(w.out, 8 * (groups * (part + 1) / parts));
    if (n0 < n1) linear_range(x, rows, w, n0, n1, out, out_stride);
  });
}

void linear(const float* x, const float* w, int rows, int in, int out_features, float* out,
            ThreadPool* pool) {
  linear(x, pack_linear(w, out_features, in), rows, out, out_features, pool);
}

RopeTable rope_table(const int32_t* positions, int n_tokens, int head_dim, double theta) {
  // HF builds inv_freq and the angles in fp32; doing the same keeps long positions bit-close.
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta),
                                  static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  return rope_table(positions, n_tokens, head_dim, inv_freq.data(), 0);
}

RopeTable rope_table(const int32_t* positions, int n_tokens, int head_dim, const float* inv_freq,
                     int64_t inv_freq_stride) {
  RopeTable t;
  t.half = head_dim / 2;
  t.cos.resize(static_cast<size_t>(n_tokens) * t.half);
  t.sin.resize(t.cos.size());
  for (int tok = 0; tok < n_tokens; ++tok) {
    const float* f = inv_freq + tok * inv_freq_stride;
    for (int i = 0; i < t.half; ++i) {
      // An fp32 angle, as HF forms it; cos and sin in double, rounded once (kernels/rope_kv.cu's
      // table does the same, so the GPU rotates by the same numbers).
      const float angle = static_cast<float>(positions[tok]) * f[i];
      t.cos[static_cast<size_t>(tok) * t.half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      t.sin[static_cast<size_t>(tok) * t.half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return t;
}

void rope(float* x, const RopeTable& table, int n_tokens, int n_heads, int head_dim) {
  const int half = head_dim / 2;
  LLAMA2_CHECK(half == table.half);
  for (int t = 0; t < n_tokens; ++t) {
    const float* cos_t = table.cos.data() + static_cast<size_t>(t) * half;
    const float* sin_t = table.sin.data() + static_cast<size_t>(t) * half;
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

void rope(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
          double theta) {
  rope(x, rope_table(positions, n_tokens, head_dim, theta), n_tokens, n_heads, head_dim);
}

namespace {
// e^x for x <= 0 (softmax after the max is subtracted), 8 lanes: x = n ln2 + r with |r| <= ln2/2,
// e^r by its degree-7 Taylor polynomial (error below 1e-7 relative, under an fp32 ulp of
// rounding), 2^n put in the exponent bits. libm's expf is a call per element and was 8% of a
// decode step.
inline v8f exp8(v8f x) {
  x = x < -80.0f ? v8f{} - 80.0f : x;      // e^-80 ~ 2e-35 counts as 0 and keeps 2^n normal
  const v8f t = x * 1.44269504088896341f;  // x / ln2
  const v8i n = __builtin_convertvector(t - 0.5f, v8i);  // round to nearest for t <= 0
  const v8f nf = __builtin_convertvector(n, v8f);
  // r = x - n ln2, with ln2 split in two so the product is exact in its high part.
  const v8f r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;
  v8f p = v8f{} + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  v8i bits;
  std::memcpy(&bits, &p, sizeof(bits));
  bits += (n << 23);
  v8f out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

}  // namespace

// silu(g) * up with sigmoid(g) from e^-|g| (exp8 wants x <= 0): 1 / (1 + e) for g >= 0, e / (1 + e)
// below. The last n % 8 go through a zero-padded vector, so every element gets the same arithmetic
// wherever it sits.
LLAMA2_CPU_BODY void swiglu_body(const float* gate, const float* up, int64_t n, float* out) {
  auto eval = [](v8f g, v8f u) {
    const v8f e = exp8(g < 0 ? g : -g);
    const v8f one = v8f{} + 1.0f;
    return g * ((g < 0 ? e : one) / (one + e)) * u;
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, eval(load8(gate + i), load8(up + i)));
  if (i < n) {
    v8f g = {}, u = {};
    for (int64_t j = i; j < n; ++j) g[j - i] = gate[j], u[j - i] = up[j];
    const v8f r = eval(g, u);
    for (int64_t j = i; j < n; ++j) out[j] = r[j - i];
  }
}
LLAMA2_CPU_CLONES void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  swiglu_body(gate, up, n, out);
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

namespace {
inline float dot(const float* a, const float* b, int d) {
  v8f acc = {};
  int j = 0;
  for (; j + 8 <= d; j += 8) acc += load8(a + j) * load8(b + j);
  return hsum(acc) + dot_tail(a, b, j, d);
}

// Attention of one token at position `pos` for the query heads that share KV head `kvh`: each K
// and V row is read once for the whole group (GQA), block by block through the sequence's table.
// q_tok, out_tok: [n_heads, d] of this token; heads: [n_group] query heads of the group;
// scores: [n_group, pos + 1] scratch.
LLAMA2_CPU_BODY void attend_group_body(const KvLayerView& c, const int32_t* table, int pos, int kvh,
                                       const float* q_tok, const int* heads, int n_group,
                                       float* scores, float* out_tok) {
  const int d = c.head_dim, bs = c.block_size, len = pos + 1;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // [block_size, d] rows of (block bi, kvh); the table was validated by the caller (nothing may
  // throw here: this runs on pool threads and in a target_clones function).
  auto rows_of = [&](const float* cache, int bi) {
    return cache + (static_cast<int64_t>(table[bi]) * c.kv_heads + kvh) * bs * d;
  };
  // scores[g, p] = (q_g . k_p) * scale.
  for (int p0 = 0, bi = 0; p0 < len; p0 += bs, ++bi) {
    const float* kb = rows_of(c.k, bi);
    const int pe = std::min(len, p0 + bs);
    int p = p0;
    // 8 positions at a time: their 8 dot products share one transposed reduction (hsum8); the
    // scores are bit-identical to dot()'s.
    for (; p + 8 <= pe; p += 8) {
      const float* kp = kb + static_cast<int64_t>(p - p0) * d;
      for (int g = 0; g < n_group; ++g) {
        const float* qh = q_tok + heads[g] * d;
        v8f acc[8] = {};
        int j = 0;
        for (; j + 8 <= d; j += 8) {
          const v8f qv = load8(qh + j);
          for (int i = 0; i < 8; ++i) acc[i] += qv * load8(kp + i * d + j);
        }
        v8f dots = hsum8(acc);
        if (j < d) {
          for (int i = 0; i < 8; ++i) dots[i] += dot_tail(qh, kp + i * d, j, d);
        }
        store8(scores + g * len + p, dots * scale);
      }
    }
    for (; p < pe; ++p) {
      const float* kp = kb + static_cast<int64_t>(p - p0) * d;
      for (int g = 0; g < n_group; ++g) {
        scores[g * len + p] = dot(q_tok + heads[g] * d, kp, d) * scale;
      }
    }
  }
  // Softmax in place, 8 lanes at a time; the last partial chunk goes through a padded copy.
  const int full = len & ~7;
  for (int g = 0; g < n_group; ++g) {
    float* sg = scores + g * len;
    v8f vmax = v8f{} - std::numeric_limits<float>::infinity();
    for (int p = 0; p < full; p += 8) {
      const v8f s8 = load8(sg + p);
      vmax = s8 > vmax ? s8 : vmax;
    }
    float max_score = vmax[0];
    for (int i = 1; i < 8; ++i) max_score = std::max(max_score, vmax[i]);
    for (int p = full; p < len; ++p) max_score = std::max(max_score, sg[p]);
    v8f sum = {};
    for (int p = 0; p < full; p += 8) {
      const v8f e = exp8(load8(sg + p) - max_score);
      store8(sg + p, e);
      sum += e;
    }
    float denom = hsum(sum);
    if (full < len) {
      v8f x = {};
      for (int i = 0; i < len - full; ++i) x[i] = sg[full + i] - max_score;
      const v8f e = exp8(x);
      for (int i = 0; i < len - full; ++i) {
        sg[full + i] = e[i];
        denom += e[i];
      }
    }
    const float inv = 1.0f / denom;
    for (int p = 0; p < len; ++p) sg[p] *= inv;
  }
  // out[g] = sum_p scores[g, p] v_p, with up to 4 heads' 8 output lanes held in registers while
  // the V rows stream by (one read of each row per 4 heads).
  for (int g0 = 0; g0 < n_group; g0 += 4) {
    const int ng = std::min(4, n_group - g0);
    int j = 0;
    for (; j + 8 <= d; j += 8) {
      v8f acc[4] = {};
      for (int p0 = 0, bi = 0; p0 < len; p0 += bs, ++bi) {
        const float* vb = rows_of(c.v, bi) + j;
        for (int p = p0; p < std::min(len, p0 + bs); ++p) {
          const v8f vv = load8(vb + static_cast<int64_t>(p - p0) * d);
          for (int gi = 0; gi < ng; ++gi) acc[gi] += scores[(g0 + gi) * len + p] * vv;
        }
      }
      for (int gi = 0; gi < ng; ++gi) store8(out_tok + heads[g0 + gi] * d + j, acc[gi]);
    }
    for (; j < d; ++j) {  // head sizes that are not a multiple of 8
      for (int gi = 0; gi < ng; ++gi) {
        float acc = 0.f;
        for (int p = 0; p < len; ++p) {
          acc += scores[(g0 + gi) * len + p] * rows_of(c.v, p / bs)[(p % bs) * d + j];
        }
        out_tok[heads[g0 + gi] * d + j] = acc;
      }
    }
  }
}
LLAMA2_CPU_CLONES void attend_group(const KvLayerView& c, const int32_t* table, int pos, int kvh,
                                    const float* q_tok, const int* heads, int n_group,
                                    float* scores, float* out_tok) {
  attend_group_body(c, table, pos, kvh, q_tok, heads, n_group, scores, out_tok);
}
}  // namespace

void paged_attention(const KvLayerView& c, const StepPlan& plan, const float* q, int n_heads,
                     const std::vector<int>& kv_head_of, float* out, ThreadPool* pool) {
  const int d = c.head_dim;
  // Query heads of each local KV head, in head order.
  std::vector<std::vector<int>> group(c.kv_heads);
  for (int h = 0; h < n_heads; ++h) group[kv_head_of[h]].push_back(h);
  // Every new token's sequence and position, then one work item per (token, KV head).
  const std::vector<int32_t> pos_of = plan_positions(plan);  // [tokens]
  std::vector<int> seq_of;                                   // [tokens] index into plan.seqs
  int64_t work = 0;
  for (int32_t p : pos_of) work += static_cast<int64_t>(p + 1) * n_heads * d * 2;
  for (size_t si = 0; si < plan.seqs.size(); ++si) {
    const SeqStep& s = plan.seqs[si];
    const int blocks = (s.pos_begin + s.n_tokens + c.block_size - 1) / c.block_size;
    LLAMA2_CHECK(blocks <= s.table_len);
    for (int b = 0; b < blocks; ++b) {
      const int block = plan.block_ids[s.table_begin + b];
      LLAMA2_CHECK(block >= 0 && block < c.num_blocks);
    }
    seq_of.insert(seq_of.end(), s.n_tokens, static_cast<int>(si));
  }
  const int items = static_cast<int>(seq_of.size()) * c.kv_heads;
  const int parts = parallel_parts(pool, work, items);
  auto run_part = [&](int part) {
    std::vector<float> scores;
    for (int it = static_cast<int>(int64_t{items} * part / parts),
             end = static_cast<int>(int64_t{items} * (part + 1) / parts);
         it < end; ++it) {
      const int t = it / c.kv_heads, kvh = it % c.kv_heads;
      const std::vector<int>& heads = group[kvh];
      if (heads.empty()) continue;
      const SeqStep& s = plan.seqs[seq_of[t]];
      scores.resize(heads.size() * static_cast<size_t>(pos_of[t] + 1));
      attend_group(c, plan.block_ids.data() + s.table_begin, pos_of[t], kvh,
                   q + static_cast<int64_t>(t) * n_heads * d, heads.data(),
                   static_cast<int>(heads.size()), scores.data(),
                   out + static_cast<int64_t>(t) * n_heads * d);
    }
  };
  if (parts <= 1) {
    run_part(0);
  } else {
    pool->run(parts, run_part);
  }
}

}  // namespace llama2::cpu
