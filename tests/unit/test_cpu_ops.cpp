// The fp32 CPU operators (src/rank/cpu_ops.{h,cpp}) against straightforward double-precision
// references written here, on odd shapes (hidden 111, rows 19, out 37, head_dim 6/10, 1 and 1000
// positions). Attention is compared with a dense causal attention computed from the same q/k/v
// arrays directly, never through the paged cache; the cache starts filled with NaN so a read of a
// slot that was never written poisons the result.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/check.h"
#include "common/step_plan.h"
#include "rank/cpu_ops.h"

namespace cpu = llama2::cpu;
using llama2::SeqStep;
using llama2::StepPlan;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------- references (double precision)

std::vector<double> ref_rmsnorm(const std::vector<float>& x, const std::vector<float>& w, int n,
                                int hidden, double eps) {
  std::vector<double> out(x.size());
  for (int t = 0; t < n; ++t) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(x[t * hidden + i]) * x[t * hidden + i];
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[t * hidden + i] = double(w[i]) * x[t * hidden + i] * inv;
  }
  return out;
}

// Rotate-half RoPE on one head vector: pairs (i, i + d/2), angle pos * theta^(-2i/d).
std::vector<double> ref_rope_head(const float* x, int pos, int d, double theta) {
  std::vector<double> out(d);
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = pos * std::pow(theta, -2.0 * i / d);
    const double a = x[i], b = x[i + half];
    out[i] = a * std::cos(angle) - b * std::sin(angle);
    out[i + half] = a * std::sin(angle) + b * std::cos(angle);
  }
  return out;
}

// ---------------------------------------------------------------- paged attention fixture

struct Seq {
  int pos_begin = 0, n_tokens = 0;
  std::vector<float> q;     // [n_tokens, n_heads, d]: queries of the new tokens
  std::vector<float> k, v;  // [pos_begin + n_tokens, kv_heads, d]: every position's K/V
  std::vector<int> table;   // block ids, deliberately shuffled
  int positions() const { return pos_begin + n_tokens; }
};

struct AttnWorld {
  int n_heads, kv_heads, d, block_size, num_blocks = 0;
  std::vector<int> kv_head_of;
  std::vector<Seq> seqs;
  std::vector<float> kc, vc;  // [num_blocks, kv_heads, block_size, d]

  AttnWorld(int heads, int kv, int head_dim, int bs, std::vector<int> mapping,
            const std::vector<std::pair<int, int>>& specs, uint32_t seed)
      : n_heads(heads), kv_heads(kv), d(head_dim), block_size(bs), kv_head_of(std::move(mapping)) {
    int needed = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      Seq s;
      s.pos_begin = specs[i].first;
      s.n_tokens = specs[i].second;
      // q scaled by 2.5 so the softmax is far from uniform.
      s.q = random_vec(size_t(s.n_tokens) * n_heads * d, seed + 17 * uint32_t(i), -2.5f, 2.5f);
      s.k = random_vec(size_t(s.positions()) * kv_heads * d, seed + 17 * uint32_t(i) + 1);
      s.v = random_vec(size_t(s.positions()) * kv_heads * d, seed + 17 * uint32_t(i) + 2);
      // Odd sequences get one spare block at the end of their table: tables may over-cover.
      const int blocks = (s.positions() + bs - 1) / bs + int(i % 2);
      s.table.resize(blocks);
      needed += blocks;
      seqs.push_back(std::move(s));
    }
    num_blocks = needed + 3;  // spare blocks nobody owns
    std::vector<int> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed ^ 0x5eedu));
    int next = 0;
    for (auto& s : seqs) {
      for (auto& b : s.table) b = ids[next++];
    }
    const size_t cache_floats = size_t(num_blocks) * kv_heads * bs * d;
    kc.assign(cache_floats, kNaN);
    vc.assign(cache_floats, kNaN);
  }

  cpu::KvLayerView view() {
    cpu::KvLayerView c;
    c.k = kc.data();
    c.v = vc.data();
    c.kv_heads = kv_heads;
    c.block_size = block_size;
    c.head_dim = d;
    c.num_blocks = num_blocks;
    return c;
  }

  // history: positions [0, pos_begin) of every sequence that has any; else the new tokens.
  StepPlan plan(const std::vector<int>& order, bool history) const {
    StepPlan p;
    for (int idx : order) {
      const Seq& s = seqs[idx];
      SeqStep st;
      st.seq_id = 100 + idx;
      if (history) {
        if (s.pos_begin == 0) continue;
        st.pos_begin = 0;
        st.n_tokens = s.pos_begin;
      } else {
        st.pos_begin = s.pos_begin;
        st.n_tokens = s.n_tokens;
        st.n_logits = 1;
      }
      st.table_begin = int(p.block_ids.size());
      st.table_len = int(s.table.size());
      p.block_ids.insert(p.block_ids.end(), s.table.begin(), s.table.end());
      for (int t = 0; t < st.n_tokens; ++t) p.tokens.push_back(7 + t);
      p.seqs.push_back(st);
    }
    return p;
  }

  // K/V rows of the plan's tokens, sequence after sequence: [tokens, kv_heads, d].
  void plan_kv(const StepPlan& p, std::vector<float>* k, std::vector<float>* v) const {
    k->clear();
    v->clear();
    const size_t row = size_t(kv_heads) * d;
    for (const auto& st : p.seqs) {
      const Seq& s = seqs[st.seq_id - 100];
      k->insert(k->end(), s.k.begin() + st.pos_begin * row,
                s.k.begin() + (st.pos_begin + st.n_tokens) * row);
      v->insert(v->end(), s.v.begin() + st.pos_begin * row,
                s.v.begin() + (st.pos_begin + st.n_tokens) * row);
    }
  }

  void write(const std::vector<int>& order, bool history) {
    const StepPlan p = plan(order, history);
    std::vector<float> k, v;
    plan_kv(p, &k, &v);
    cpu::kv_write(view(), p, k.data(), v.data());
  }

  // Runs paged_attention for the sequences in `order`; returns each one's output, by index.
  std::vector<std::vector<float>> attend(const std::vector<int>& order) {
    const StepPlan p = plan(order, false);
    std::vector<float> q;
    for (int idx : order) q.insert(q.end(), seqs[idx].q.begin(), seqs[idx].q.end());
    std::vector<float> out(size_t(p.total_tokens()) * n_heads * d, kNaN);
    cpu::paged_attention(view(), p, q.data(), n_heads, kv_head_of, out.data());
    std::vector<std::vector<float>> per_seq(seqs.size());
    size_t off = 0;
    for (int idx : order) {
      const size_t n = size_t(seqs[idx].n_tokens) * n_heads * d;
      per_seq[idx].assign(out.begin() + off, out.begin() + off + n);
      off += n;
    }
    return per_seq;
  }

  std::vector<int> all() const {
    std::vector<int> o(seqs.size());
    std::iota(o.begin(), o.end(), 0);
    return o;
  }
};

// Dense causal attention from the sequence's own arrays: token at position p attends to [0, p].
std::vector<double> ref_attention(const Seq& s, int n_heads, int kv_heads, int d,
                                  const std::vector<int>& kv_head_of) {
  std::vector<double> out(size_t(s.n_tokens) * n_heads * d, 0.0);
  for (int i = 0; i < s.n_tokens; ++i) {
    const int pos = s.pos_begin + i;
    for (int h = 0; h < n_heads; ++h) {
      const int g = kv_head_of[h];
      const float* q = &s.q[(size_t(i) * n_heads + h) * d];
      std::vector<double> score(pos + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos; ++p) {
        const float* k = &s.k[(size_t(p) * kv_heads + g) * d];
        double dot = 0;
        for (int j = 0; j < d; ++j) dot += double(q[j]) * k[j];
        score[p] = dot / std::sqrt(double(d));
        mx = std::max(mx, score[p]);
      }
      double denom = 0;
      for (auto& x : score) denom += (x = std::exp(x - mx));
      double* o = &out[(size_t(i) * n_heads + h) * d];
      for (int p = 0; p <= pos; ++p) {
        const float* v = &s.v[(size_t(p) * kv_heads + g) * d];
        for (int j = 0; j < d; ++j) o[j] += score[p] / denom * v[j];
      }
    }
  }
  return out;
}

}  // namespace

TEST_SUITE("cpu_ops") {
  TEST_CASE("embedding: rows inside the vocab slice are copied, others are zero") {
    const int hidden = 111, vocab_begin = 17, vocab_local = 13;
    const auto table = random_vec(size_t(vocab_local) * hidden, 1);
    // 16 and 30 are just outside [17, 30); -1 and 1000 far outside.
    const std::vector<int32_t> tokens = {17, 16, 29, 30, 23, -1, 1000, 17, 0};
    std::vector<float> out(tokens.size() * hidden, kNaN);
    cpu::embedding(tokens.data(), int(tokens.size()), table.data(), vocab_begin, vocab_local,
                   hidden, out.data());
    for (size_t t = 0; t < tokens.size(); ++t) {
      CAPTURE(tokens[t]);
      const bool inside = tokens[t] >= 17 && tokens[t] < 30;
      for (int i = 0; i < hidden; ++i) {
        const float expected = inside ? table[size_t(tokens[t] - 17) * hidden + i] : 0.0f;
        REQUIRE(out[t * hidden + i] == expected);
      }
    }
  }

  TEST_CASE("rmsnorm matches the double reference, with and without aliasing") {
    const int hidden = 111, n = 19;
    auto x = random_vec(size_t(n) * hidden, 2, -3.f, 3.f);
    const auto w = random_vec(hidden, 3, 0.5f, 1.5f);
    // Row 3 is tiny so eps dominates the mean square; row 5 is large; row 7 is all zeros.
    for (int i = 0; i < hidden; ++i) {
      x[3 * hidden + i] *= 1e-3f;
      x[5 * hidden + i] *= 1e3f;
      x[7 * hidden + i] = 0.f;
    }
    for (double eps : {1e-5, 1e-6}) {
      CAPTURE(eps);
      const auto ref = ref_rmsnorm(x, w, n, hidden, eps);
      std::vector<float> out(x.size(), kNaN);
      cpu::rmsnorm(x.data(), w.data(), n, hidden, eps, out.data());
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(i);
        REQUIRE(std::abs(out[i] - ref[i]) <= 1e-6 * std::abs(ref[i]) + 1e-30);
      }
      std::vector<float> inplace = x;
      cpu::rmsnorm(inplace.data(), w.data(), n, hidden, eps, inplace.data());
      CHECK(bitwise_equal(inplace, out));
    }
  }

  TEST_CASE("linear: out = x W^T with W [out, in]") {
    struct Shape {
      int rows, in, out;
    };
    for (Shape s : {Shape{19, 111, 37}, Shape{1, 1, 1}, Shape{3, 3, 5}, Shape{2, 4, 3},
                    Shape{5, 5, 2}, Shape{1, 1000, 7}, Shape{7, 2, 9}}) {
      CAPTURE(s.rows);
      CAPTURE(s.in);
      CAPTURE(s.out);
      const auto x = random_vec(size_t(s.rows) * s.in, 4);
      const auto w = random_vec(size_t(s.out) * s.in, 5);
      std::vector<float> out(size_t(s.rows) * s.out, kNaN);
      cpu::linear(x.data(), w.data(), s.rows, s.in, s.out, out.data());
      for (int r = 0; r < s.rows; ++r) {
        for (int n = 0; n < s.out; ++n) {
          double ref = 0, mag = 0;
          for (int k = 0; k < s.in; ++k) {
            ref += double(x[size_t(r) * s.in + k]) * w[size_t(n) * s.in + k];
            mag += std::abs(double(x[size_t(r) * s.in + k]) * w[size_t(n) * s.in + k]);
          }
          CAPTURE(r);
          CAPTURE(n);
          REQUIRE(std::abs(out[size_t(r) * s.out + n] - ref) <= 4e-6 * mag + 1e-7);
        }
      }
    }
  }

  TEST_CASE("linear: hand-worked 2x3 by 3x2") {
    const float x[] = {1, 2, 3, -1, 0, 2};     // [2, 3]
    const float w[] = {1, 0, -1, 0.5f, 2, 1};  // [2 out, 3 in]
    float out[4];
    cpu::linear(x, w, 2, 3, 2, out);
    CHECK(out[0] == -2.0f);  // 1 - 3
    CHECK(out[1] == 7.5f);   // 0.5 + 4 + 3
    CHECK(out[2] == -3.0f);  // -1 - 2
    CHECK(out[3] == 1.5f);   // -0.5 + 0 + 2
  }

  TEST_CASE("linear: matrices packed side by side (q|k|v) give each matrix's own bits") {
    // Parts of 13, 5 and 5 outputs: the second and third start mid-panel, the last panel is padded.
    const int rows = 6, in = 37;
    const auto x = random_vec(size_t(rows) * in, 21);
    const auto a = random_vec(size_t(13) * in, 22), b = random_vec(size_t(5) * in, 23),
               c = random_vec(size_t(5) * in, 24);
    const cpu::PackedLinear fused =
        cpu::pack_linear({{a.data(), 13}, {b.data(), 5}, {c.data(), 5}}, in);
    REQUIRE(fused.out == 23);
    REQUIRE(fused.ld == 24);
    const int stride = 30;  // wider than the padded width: the padding column is not written
    std::vector<float> out(size_t(rows) * stride, kNaN);
    cpu::linear(x.data(), fused, rows, out.data(), stride);
    int col = 0;
    for (const auto& [w, n] : {std::pair{&a, 13}, std::pair{&b, 5}, std::pair{&c, 5}}) {
      std::vector<float> alone(size_t(rows) * n);
      cpu::linear(x.data(), w->data(), rows, in, n, alone.data());
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> got(out.begin() + r * stride + col,
                                     out.begin() + r * stride + col + n);
        const std::vector<float> want(alone.begin() + r * n, alone.begin() + (r + 1) * n);
        CHECK(bitwise_equal(got, want));
      }
      col += n;
    }
    for (int r = 0; r < rows; ++r) {
      for (int j = 23; j < stride; ++j) CHECK(std::isnan(out[size_t(r) * stride + j]));
    }
  }

  TEST_CASE("rope: hand-worked rotate-half pairing, head_dim 4") {
    // inv_freq = {1, theta^-0.5}; pairs are (0, 2) and (1, 3), not (0, 1) and (2, 3).
    for (double theta : {10000.0, 500000.0}) {
      CAPTURE(theta);
      const double f1 = 1.0 / std::sqrt(theta);
      float x[8] = {1, 0, 0, 0, /*head 1*/ 0, 1, 0, 0};
      const int32_t pos[] = {1};
      cpu::rope(x, pos, 1, 2, 4, theta);
      CHECK(x[0] == doctest::Approx(std::cos(1.0)).epsilon(1e-6));
      CHECK(x[1] == 0.0f);
      CHECK(x[2] == doctest::Approx(std::sin(1.0)).epsilon(1e-6));
      CHECK(x[3] == 0.0f);
      CHECK(x[4] == 0.0f);
      CHECK(x[5] == doctest::Approx(std::cos(f1)).epsilon(1e-6));
      CHECK(x[6] == 0.0f);
      CHECK(x[7] == doctest::Approx(std::sin(f1)).epsilon(1e-5));
    }
  }

  TEST_CASE("rope matches the rotate-half formula; position 0 is identity; pairs keep norm") {
    for (int d : {6, 10, 128}) {
      for (double theta : {10000.0, 500000.0}) {
        for (int n_tokens : {1, 1000}) {
          CAPTURE(d);
          CAPTURE(theta);
          CAPTURE(n_tokens);
          const int n_heads = 3;
          std::vector<int32_t> pos(n_tokens);
          if (n_tokens == 1) {
            pos[0] = 37;
          } else {
            std::iota(pos.begin(), pos.end(), 0);  // 0..999
            std::swap(pos[5], pos[900]);           // positions need not be sorted
          }
          const auto x0 = random_vec(size_t(n_tokens) * n_heads * d, 6 + uint32_t(d));
          auto x = x0;
          cpu::rope(x.data(), pos.data(), n_tokens, n_heads, d, theta);
          const int half = d / 2;
          // Counted rather than asserted per element: 1000 x 3 x 64 pairs per configuration.
          int bad_identity = 0, bad_value = 0, bad_norm = 0;
          int first_bad_t = -1, first_bad_i = -1;
          for (int t = 0; t < n_tokens; ++t) {
            for (int h = 0; h < n_heads; ++h) {
              const size_t off = (size_t(t) * n_heads + h) * d;
              const float* in = &x0[off];
              const float* got = &x[off];
              if (pos[t] == 0) {
                bad_identity += std::memcmp(in, got, sizeof(float) * d) != 0;
                continue;
              }
              const auto ref = ref_rope_head(in, pos[t], d, theta);
              for (int i = 0; i < half; ++i) {
                // HF forms inv_freq and the angle in fp32: the angle's relative error is a few
                // ulp, so the absolute error grows with the position (inv_freq <= 1).
                const double scale = std::abs(in[i]) + std::abs(in[i + half]);
                const double tol = 2e-6 + 3e-7 * pos[t] * scale;
                const bool ok = std::abs(got[i] - ref[i]) <= tol &&
                                std::abs(got[i + half] - ref[i + half]) <= tol;
                const double n_in = double(in[i]) * in[i] + double(in[i + half]) * in[i + half];
                const double n_out =
                    double(got[i]) * got[i] + double(got[i + half]) * got[i + half];
                const bool norm_ok = std::abs(n_out - n_in) <= 1e-5 * n_in + 1e-12;
                bad_value += !ok;
                bad_norm += !norm_ok;
                if ((!ok || !norm_ok) && first_bad_t < 0) {
                  first_bad_t = t;
                  first_bad_i = i;
                }
              }
            }
          }
          CAPTURE(first_bad_t);
          CAPTURE(first_bad_i);
          CHECK(bad_identity == 0);
          CHECK(bad_value == 0);
          CHECK(bad_norm == 0);
        }
      }
    }
  }

  TEST_CASE("swiglu: silu(gate) * up, with and without aliasing") {
    const int64_t n = 1001;
    auto gate = random_vec(n, 7, -8.f, 8.f);
    const auto up = random_vec(n, 8, -2.f, 2.f);
    gate[0] = 0.f;
    gate[1] = -100.f;  // exp overflows in fp32: silu must still be ~0, not NaN
    gate[2] = 100.f;
    gate[3] = 88.f;
    gate[4] = -88.f;
    std::vector<float> out(n, kNaN);
    cpu::swiglu(gate.data(), up.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double ref = g / (1.0 + std::exp(-g)) * up[i];
      CAPTURE(i);
      REQUIRE(std::abs(out[i] - ref) <= 1e-6 * std::abs(ref) + 1e-30);
    }
    auto aliased = gate;
    cpu::swiglu(aliased.data(), up.data(), n, aliased.data());
    CHECK(bitwise_equal(aliased, out));
  }

  TEST_CASE("add_inplace") {
    auto x = random_vec(1001, 9);
    const auto y = random_vec(1001, 10);
    const auto x0 = x;
    cpu::add_inplace(x.data(), y.data(), 1001);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == x0[i] + y[i]);
    cpu::add_inplace(x.data(), y.data(), 0);  // n = 0 touches nothing
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == x0[i] + y[i]);
  }

  TEST_CASE("plan_positions") {
    StepPlan p;
    p.seqs = {SeqStep{0, 0, 3, 1, 0, 1, 0}, SeqStep{1, 13, 2, 1, 1, 1, 0},
              SeqStep{2, 999, 1, 1, 2, 1, 0}};
    p.tokens = {5, 6, 7, 8, 9, 10};
    p.block_ids = {0, 1, 2};
    CHECK(cpu::plan_positions(p) == std::vector<int32_t>{0, 1, 2, 13, 14, 999});
  }

  TEST_CASE("kv_write places K/V at [block, head, slot, :] of the shuffled table") {
    for (int bs : {1, 4, 16}) {
      CAPTURE(bs);
      AttnWorld w(6, 3, 10, bs, {0, 0, 1, 1, 2, 2}, {{0, 7}, {13, 5}, {20, 1}}, 11);
      w.write(w.all(), true);
      w.write(w.all(), false);
      size_t written = 0;
      for (const Seq& s : w.seqs) {
        for (int p = 0; p < s.positions(); ++p) {
          const int block = s.table[p / bs];
          for (int g = 0; g < w.kv_heads; ++g) {
            const size_t dst = ((size_t(block) * w.kv_heads + g) * bs + p % bs) * w.d;
            const size_t src = (size_t(p) * w.kv_heads + g) * w.d;
            REQUIRE(std::memcmp(&w.kc[dst], &s.k[src], sizeof(float) * w.d) == 0);
            REQUIRE(std::memcmp(&w.vc[dst], &s.v[src], sizeof(float) * w.d) == 0);
          }
        }
        written += size_t(s.positions()) * w.kv_heads * w.d;
      }
      // Nothing else in the cache was touched.
      CHECK(size_t(std::count_if(w.kc.begin(), w.kc.end(),
                                 [](float f) { return !std::isnan(f); })) == written);
      CHECK(size_t(std::count_if(w.vc.begin(), w.vc.end(),
                                 [](float f) { return !std::isnan(f); })) == written);
    }
  }

  TEST_CASE("paged_attention matches dense causal attention") {
    struct Heads {
      int n_heads, kv_heads, d;
      std::vector<int> kv_head_of;
    };
    const Heads heads[] = {
        {6, 2, 10, {0, 0, 0, 1, 1, 1}},  // GQA: h / 3
        {4, 4, 6, {0, 1, 2, 3}},         // MHA
        {5, 1, 6, {0, 0, 0, 0, 0}},      // MQA
        {4, 2, 6, {1, 0, 0, 1}},         // arbitrary mapping: kv_head_of is honoured as given
        // Head sizes of 8 dims per slice with more query heads than slices take the transposed-K
        // scores; {2, 1, 16} (2 heads, 2 slices) the hsum8 ones.
        {8, 2, 8, {0, 0, 0, 0, 1, 1, 1, 1}},
        {6, 2, 16, {0, 0, 0, 1, 1, 1}},
        {2, 1, 16, {0, 0}},
    };
    // (pos_begin, n_tokens): prefill from scratch, a later prefill chunk, decode steps, the very
    // first token alone, and a decode over 1000 positions.
    const std::vector<std::pair<int, int>> specs = {{0, 7}, {13, 5}, {20, 1}, {0, 1}, {999, 1}};
    for (int bs : {1, 4, 16}) {
      for (const Heads& hd : heads) {
        CAPTURE(bs);
        CAPTURE(hd.n_heads);
        CAPTURE(hd.kv_heads);
        CAPTURE(hd.d);
        AttnWorld w(hd.n_heads, hd.kv_heads, hd.d, bs, hd.kv_head_of, specs, 21 + uint32_t(bs));
        w.write(w.all(), true);
        w.write(w.all(), false);
        const auto got = w.attend(w.all());
        for (size_t si = 0; si < w.seqs.size(); ++si) {
          CAPTURE(si);
          const auto ref = ref_attention(w.seqs[si], hd.n_heads, hd.kv_heads, hd.d, hd.kv_head_of);
          REQUIRE(got[si].size() == ref.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            CAPTURE(i);
            REQUIRE(std::abs(got[si][i] - ref[i]) <= 2e-5);
          }
        }
      }
    }
  }

  TEST_CASE("GQA mapping from h / (heads / kv_heads) matches a per-head reference") {
    // 8 query heads over 2 KV heads: heads 0-3 read KV 0, heads 4-7 read KV 1. If the op ignored
    // the mapping (e.g. used h % kv_heads) heads 1 and 4 would read the wrong KV head.
    std::vector<int> mapping(8);
    for (int h = 0; h < 8; ++h) mapping[h] = h / (8 / 2);
    AttnWorld w(8, 2, 6, 4, mapping, {{5, 3}, {0, 1}}, 31);
    w.write(w.all(), true);
    w.write(w.all(), false);
    const auto got = w.attend(w.all());
    for (size_t si = 0; si < w.seqs.size(); ++si) {
      const auto ref = ref_attention(w.seqs[si], 8, 2, 6, mapping);
      for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(got[si][i] - ref[i]) <= 2e-5);
    }
    // And the two KV heads really differ, so the check above can tell them apart.
    std::vector<int> swapped(8);
    for (int h = 0; h < 8; ++h) swapped[h] = 1 - mapping[h];
    const auto wrong = ref_attention(w.seqs[0], 8, 2, 6, swapped);
    const auto right = ref_attention(w.seqs[0], 8, 2, 6, mapping);
    double max_diff = 0;
    for (size_t i = 0; i < right.size(); ++i)
      max_diff = std::max(max_diff, std::abs(wrong[i] - right[i]));
    CHECK(max_diff > 1e-2);
  }

  TEST_CASE("attention of a sequence does not depend on the other sequences in the plan") {
    for (int d : {10, 8}) {  // hsum8 scores, transposed-K scores
      for (int bs : {1, 4, 16}) {
        CAPTURE(d);
        CAPTURE(bs);
        AttnWorld w(6, 2, d, bs, {0, 0, 0, 1, 1, 1}, {{0, 9}, {13, 4}, {40, 1}, {999, 1}}, 41);
        w.write(w.all(), true);
        w.write(w.all(), false);
        const auto together = w.attend(w.all());
        const auto reordered = w.attend({3, 2, 1, 0});
        for (int i = 0; i < 4; ++i) {
          CAPTURE(i);
          const auto alone = w.attend({i});
          CHECK(bitwise_equal(alone[i], together[i]));
          CHECK(bitwise_equal(reordered[i], together[i]));
        }
        // Scribbling over every block that sequence 1 does not own leaves its output unchanged.
        std::vector<char> owned(w.num_blocks, 0);
        for (int b : w.seqs[1].table) owned[b] = 1;
        const size_t block_floats = size_t(w.kv_heads) * bs * w.d;
        const auto noise = random_vec(w.kc.size(), 43, -50.f, 50.f);
        for (int b = 0; b < w.num_blocks; ++b) {
          if (owned[b]) continue;
          for (size_t j = 0; j < block_floats; ++j) {
            w.kc[b * block_floats + j] = noise[b * block_floats + j];
            w.vc[b * block_floats + j] = -noise[b * block_floats + j];
          }
        }
        CHECK(bitwise_equal(w.attend({1})[1], together[1]));
      }
    }
  }

  TEST_CASE("a block table too short for the positions is an Error, not a stray read") {
    AttnWorld w(2, 1, 6, 4, {0, 0}, {{8, 1}}, 51);  // needs 3 blocks of 4
    StepPlan p = w.plan({0}, false);
    p.seqs[0].table_len = 2;  // covers positions 0..7 only
    std::vector<float> k, v;
    w.plan_kv(p, &k, &v);
    CHECK_THROWS_AS(cpu::kv_write(w.view(), p, k.data(), v.data()), llama2::Error);
    std::vector<float> out(2 * 6);
    CHECK_THROWS_AS(
        cpu::paged_attention(w.view(), p, w.seqs[0].q.data(), 2, w.kv_head_of, out.data()),
        llama2::Error);
    // A block id beyond the cache is rejected too.
    StepPlan q = w.plan({0}, false);
    q.block_ids[q.seqs[0].table_begin + 2] = w.num_blocks;  // the block of position 8
    CHECK_THROWS_AS(cpu::kv_write(w.view(), q, k.data(), v.data()), llama2::Error);
  }
}
