// The fp32 CPU backend: the same tensor-parallel forward pass the CUDA backend runs, on the vector
// operators of cpu_ops.h and this rank's thread pool.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>

#include "common/check.h"
#include "common/rope_frequencies.h"
#include "rank/comm.h"
#include "rank/cpu_ops.h"
#include "rank/fp8_checkpoint.h"
#include "rank/int4_checkpoint.h"
#include "rank/logits_adjust.h"
#include "rank/logits_gather.h"
#include "rank/model_runner.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"

namespace llama2 {
namespace {

// One core's L2 cache as the C library reports it (1 MiB when it does not say).
uint64_t l2_cache_bytes() {
  const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v > 0 ? static_cast<uint64_t>(v) : uint64_t{1} << 20;
}

// fp32 copies of the slice; the projections of an FP8 (fp8_checkpoint.h) or 4-bit
// (int4_checkpoint.h) checkpoint dequantized.
std::vector<float> load(const WeightStore& w, const ModelConfig& c, const TensorSlice& s) {
  std::vector<float> out(static_cast<size_t>(s.numel()));
  if (is_int4_slice(c, s)) {
    read_int4_slice_f32(w, c, s, out.data());
  } else {
    read_slice_f32(w, s, out.data());
  }
  return out;
}

// Projection weights are packed k-major (cpu::PackedLinear) at load, q|k|v and gate|up side by side
// so that each is one pass over the activations (and one fork/join of the pool).
struct CpuLayer {
  std::vector<float> attn_norm;  // [H]
  cpu::PackedLinear wqkv;        // in H, out (heads_local + 2 kv_local) * d
  cpu::PackedLinear wo;          // in heads_local * d (input columns of o_proj), out H
  std::vector<float> mlp_norm;   // [H]
  cpu::PackedLinear w_gate_up;   // in H, out 2 ffn_local
  cpu::PackedLinear w_down;      // in ffn_local (input columns of down_proj), out H
  std::vector<float> k_cache;    // [num_blocks, kv_local, block_size, d]
  std::vector<float> v_cache;    // [num_blocks, kv_local, block_size, d]
};

class CpuModel final : public ModelRunner {
 public:
  CpuModel(const ModelConfig& c, const ShardPlan& s, const WeightStore& w, Comm& comm, int threads,
           CpuSplit split)
      : c_(c), s_(s), comm_(comm), inv_freq_(rope_inv_freq(c)), split_(split), pool_(threads) {
    for (int r = 0; r < s.tp; ++r) all_shards_.push_back(make_shard_plan(c, s.tp, r));
    const int H = c.hidden_size, d = s.head_dim, nq = s.num_heads * d, nkv = s.num_kv_heads * d;
    const int F = s.ffn_size;
    embed_ = load(w, c, embedding_slice(c, s));
    final_norm_ = load(w, c, final_norm_slice(c));
    // A tied head is packed from the embedding table, which stays row-major for the lookup.
    lm_head_ = cpu::pack_linear(
        c.tie_word_embeddings ? embed_.data() : load(w, c, lm_head_slice(c, s)).data(),
        s.vocab_size, H);
    params_ = embed_.size() + final_norm_.size() +
              (c.tie_word_embeddings ? 0 : static_cast<uint64_t>(s.vocab_size) * H);
    layers_.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
      CpuLayer& L = layers_[l];
      auto get = [&](LayerTensor t) { return load(w, c, layer_slice(c, s, l, t)); };
      L.attn_norm = get(LayerTensor::kAttnNorm);
      L.mlp_norm = get(LayerTensor::kMlpNorm);
      const auto wq = get(LayerTensor::kWq), wk = get(LayerTensor::kWk), wv = get(LayerTensor::kWv);
      L.wqkv = cpu::pack_linear({{wq.data(), nq}, {wk.data(), nkv}, {wv.data(), nkv}}, H);
      L.wo = cpu::pack_linear(get(LayerTensor::kWo).data(), H, nq);
      const auto gate = get(LayerTensor::kWgate), up = get(LayerTensor::kWup);
      L.w_gate_up = cpu::pack_linear({{gate.data(), F}, {up.data(), F}}, H);
      L.w_down = cpu::pack_linear(get(LayerTensor::kWdown).data(), H, F);
      params_ += L.attn_norm.size() + L.mlp_norm.size() +
                 static_cast<uint64_t>(H) * (nq + 2 * nkv + nq + 3 * F);
    }
    for (int h = 0; h < s.num_heads; ++h) kv_head_of_.push_back(s.kv_head_for(h));
    // What a step streams through each thread that takes rows: every projection and the head.
    uint64_t streamed = lm_head_.wt.size();
    for (const CpuLayer& L : layers_) {
      streamed += L.wqkv.wt.size() + L.wo.wt.size() + L.w_gate_up.wt.size() + L.w_down.wt.size();
    }
    weights_fit_l2_ = streamed * sizeof(float) <= l2_cache_bytes();
  }

  std::string device_description() const override {
    if (pool_.size() == 1) return "host, 1 thread";
    return "host, " + std::to_string(pool_.size()) + " threads" +
           (split_by_sequence() ? " (batched steps split by sequence)"
                                : " (operators split across threads)");
  }
  int dtype_bytes() const override { return sizeof(float); }
  int kv_dtype_bytes() const override { return sizeof(float); }
  int64_t kv_blocks_that_fit(int) const override { return -1; }

  void allocate_kv(const KvCacheSpec& kv) override {
    kv_ = kv;
    const size_t cache_elems =
        static_cast<size_t>(kv.num_blocks) * s_.num_kv_heads * kv.block_size * s_.head_dim;
    for (CpuLayer& L : layers_) {
      L.k_cache.assign(cache_elems, 0.f);
      L.v_cache.assign(cache_elems, 0.f);
    }
  }

  // The shard's parameters, as `llama2 plan` counts them. Not counted: packing pads each
  // projection's outputs to a multiple of 8 (< 1% for any Llama shape), and a tied LM head holds a
  // packed copy of the embedding table.
  uint64_t weight_bytes() const override { return params_ * sizeof(float); }

  uint64_t kv_cache_bytes() const override {
    uint64_t n = 0;
    for (const auto& L : layers_) n += L.k_cache.size() + L.v_cache.size();
    return n * sizeof(float);
  }

  void score(const StepPlan& plan, std::vector<double>* logprobs) override {
    LLAMA2_CHECK(plan.kind == StepKind::kScore && plan.targets.size() == plan.tokens.size());
    std::vector<int32_t> targets;  // [rows] the scored rows' targets, in token order
    for (int32_t t : plan.targets) {
      if (t >= c_.vocab_size) {
        throw Error("score step: target id " + std::to_string(t) +
                    " is outside the vocabulary [0, " + std::to_string(c_.vocab_size) + ")");
      }
      if (t >= 0) targets.push_back(t);
    }
    local_logits(plan);
    const int rows = static_cast<int>(targets.size());
    std::vector<float> part(static_cast<size_t>(rows) * kSliceLseFields);
    slice_logsumexp(ws_.logits.data(), rows, s_.vocab_size, s_.vocab_begin, targets.data(),
                    part.data());
    const bool root = comm_.rank() == 0;
    std::vector<float> all(root ? part.size() * s_.tp : 0);
    comm_.gather_to_root(part.data(), std::vector<size_t>(s_.tp, part.size()), CommType::kF32,
                         all.data());
    if (!root || logprobs == nullptr) return;
    logprobs->resize(static_cast<size_t>(rows));
    combine_logsumexp(all.data(), all_shards_, rows, targets.data(), nullptr, logprobs->data());
  }

  void forward(const StepPlan& plan, StepLogits* out) override {
    local_logits(plan);
    const int rows = plan.logit_rows();
    // Before any reduction or gather reads the rows (rank/logits_adjust.h).
    apply_adjustments(plan, ws_.logits.data(), s_.vocab_begin, s_.vocab_size);
    const std::vector<float>& local = ws_.logits;  // [rows, vocab_local]
    if (plan.candidates > 0) {
      const int k = plan.candidates;
      std::vector<float> values(static_cast<size_t>(rows) * k);
      std::vector<int32_t> ids(values.size());
      local_candidates(local.data(), rows, s_.vocab_size, s_.vocab_begin, k, values.data(),
                       ids.data());
      const bool root = comm_.rank() == 0;
      std::vector<float> all_values(root ? values.size() * s_.tp : 0);
      std::vector<int32_t> all_ids(all_values.size());
      const std::vector<size_t> counts(s_.tp, values.size());
      comm_.gather_to_root(values.data(), counts, CommType::kF32, all_values.data());
      comm_.gather_to_root(ids.data(), counts, CommType::kI32, all_ids.data());
      // Logprob rows: the candidates hold the sampled token's raw logit (sampling picks among
      // them), so rank 0 only lacks the log-sum-exp: 3 floats per row from each rank.
      std::vector<float> all_lse;
      if (plan.any_logprobs()) all_lse = gather_slice_lse(plan, local.data(), rows);
      if (!root || out == nullptr) return;
      merge_candidates(all_values.data(), all_ids.data(), s_.tp, rows, k, out);
      if (plan.any_logprobs())
        lse_from_slices(all_lse.data(), all_shards_, plan.logprob_flags(), out);
      return;
    }
    std::vector<float>& gathered =
        sized(&ws_.gathered, comm_.rank() == 0 ? int64_t{rows} * c_.vocab_size : 0);
    comm_.gather_to_root(local.data(), vocab_slice_counts(all_shards_, rows), CommType::kF32,
                         gathered.data());
    if (comm_.rank() != 0 || out == nullptr) return;
    stitch_vocab_slices(gathered.data(), all_shards_, rows, c_.vocab_size, out);
    // Slice by slice, as a candidates step computes it (issue 41).
    if (plan.any_logprobs()) lse_from_full_rows(plan.logprob_flags(), all_shards_, out);
  }

 private:
  // Per-step activations, reused from step to step.
  struct Workspace {
    std::vector<float> x, h, qkv, q, k, v, attn, gate_up, act, partial, last, logits, gathered;
  };
  // Collective: this rank's slice summaries (slice_logsumexp) of the logprob rows of `local`
  // [rows, vocab_local], gathered to rank 0 as [rank][rows, kSliceLseFields] (rows without
  // want_logprobs are left as an empty slice, (-inf, 0, 0): only requests that ask pay).
  std::vector<float> gather_slice_lse(const StepPlan& plan, const float* local, int rows) {
    const std::vector<int32_t> flags = plan.logprob_flags();
    std::vector<float> part(static_cast<size_t>(rows) * kSliceLseFields, 0.f);
    for (int r = 0; r < rows; ++r) {
      float* f = part.data() + static_cast<int64_t>(r) * kSliceLseFields;
      if (flags[r]) {
        slice_logsumexp(local + int64_t{r} * s_.vocab_size, 1, s_.vocab_size, s_.vocab_begin,
                        nullptr, f);
      } else {
        f[0] = -std::numeric_limits<float>::infinity();
      }
    }
    std::vector<float> all(comm_.rank() == 0 ? part.size() * s_.tp : 0);
    comm_.gather_to_root(part.data(), std::vector<size_t>(s_.tp, part.size()), CommType::kF32,
                         all.data());
    return all;
  }

  // `buf` resized to n elements: its contents are garbage, the operators overwrite them.
  static std::vector<float>& sized(std::vector<float>* buf, int64_t n) {
    buf->resize(static_cast<size_t>(n));
    return *buf;
  }

  // A run of consecutive sequences of the step with their token rows [t0, t1) and logit rows
  // [r0, r1): what one thread takes through every layer when the step is split by sequence.
  struct RowGroup {
    const StepPlan* plan = nullptr;  // those sequences: the step's own plan, or `part`
    StepPlan part;                   // a split step's share, with its block tables rebased
    int t0 = 0, t1 = 0, r0 = 0, r1 = 0;
    std::vector<int> head_rows;  // [r1 - r0] token rows (from t0) that go through the LM head
    cpu::RopeTable rope;         // [t1 - t0] rows
  };

  // The token rows of `p` whose logits a step produces: the last n_logits tokens of each
  // sequence, or in a kScore step every row with a target.
  static std::vector<int> head_rows(const StepPlan& p) {
    std::vector<int> rows;
    if (p.kind == StepKind::kScore) {
      for (int t = 0; t < p.total_tokens(); ++t) {
        if (p.targets[t] >= 0) rows.push_back(t);
      }
      return rows;
    }
    int t_end = 0;
    for (const SeqStep& sq : p.seqs) {
      t_end += sq.n_tokens;
      for (int j = sq.n_logits; j > 0; --j) rows.push_back(t_end - j);
    }
    return rows;
  }

  // Whether steps with several sequences are split by sequence (CpuSplit).
  bool split_by_sequence() const {
    return pool_.size() > 1 &&
           (split_ == CpuSplit::kRows || (split_ == CpuSplit::kAuto && weights_fit_l2_));
  }

  // The group of rows [t0, t1) / logit rows [r0, r1) reading `p`; its rope table.
  void set_group(RowGroup* g, const StepPlan* p, int t0, int r0) {
    g->plan = p;
    g->t0 = g->t1 = t0;
    for (const SeqStep& sq : p->seqs) g->t1 += sq.n_tokens;
    g->head_rows = head_rows(*p);
    g->r0 = r0;
    g->r1 = r0 + static_cast<int>(g->head_rows.size());
    const std::vector<int32_t> positions = cpu::plan_positions(*p);
    g->rope = rope_table_for(*p, positions);
  }

  // RoPE's (cos, sin) for the tokens of `p`: the model's frequencies, or under dynamic NTK those
  // of each sequence's length after this step for a sequence past the original length
  // (common/rope_frequencies.h).
  cpu::RopeTable rope_table_for(const StepPlan& p, const std::vector<int32_t>& positions) const {
    const int n = static_cast<int>(positions.size());
    bool rescaled = false;
    for (const SeqStep& sq : p.seqs)
      rescaled = rescaled || rope_rescaled(c_, sq.pos_begin + sq.n_tokens);
    if (!rescaled) return cpu::rope_table(positions.data(), n, s_.head_dim, inv_freq_.data(), 0);
    const size_t half = inv_freq_.size();
    std::vector<float> per_token;  // [n, half]
    per_token.reserve(static_cast<size_t>(n) * half);
    for (const SeqStep& sq : p.seqs) {
      const std::vector<float> f = rope_inv_freq(c_, sq.pos_begin + sq.n_tokens);
      for (int t = 0; t < sq.n_tokens; ++t) per_token.insert(per_token.end(), f.begin(), f.end());
    }
    return cpu::rope_table(positions.data(), n, s_.head_dim, per_token.data(),
                           static_cast<int64_t>(half));
  }

  // Sequence groups for this step: one per thread when splitting by sequence pays (see
  // CpuSplit), else a single group whose operators split their own work over the pool.
  void make_groups(const StepPlan& plan) {
    const int T = plan.total_tokens(), n_seqs = static_cast<int>(plan.seqs.size());
    const int G = split_by_sequence() ? std::min(pool_.size(), n_seqs) : 1;
    // Contiguous sequences, at least one per group; group g - 1 ends where its next sequence's
    // midpoint would pass g * T / G tokens.
    std::vector<int> first_seq(1, 0);
    for (int g = 1, si = 0, cum = 0; g < G; ++g) {
      const int64_t target = int64_t{T} * g / G;
      do {
        cum += plan.seqs[si++].n_tokens;
      } while (si < n_seqs - (G - g) && 2 * cum + plan.seqs[si].n_tokens <= 2 * target);
      first_seq.push_back(si);
    }
    first_seq.push_back(n_seqs);
    // Auto mode: a group much longer than T / G (a long prompt beside a few decodes) would leave
    // the other threads idle; the operators split better then.
    int longest = 0;
    for (int g = 0; g < G; ++g) {
      int tokens = 0;
      for (int si = first_seq[g]; si < first_seq[g + 1]; ++si) tokens += plan.seqs[si].n_tokens;
      longest = std::max(longest, tokens);
    }
    if (G <= 1 || (split_ == CpuSplit::kAuto && 2 * longest * G > 3 * T)) {
      groups_.resize(1);
      set_group(&groups_[0], &plan, 0, 0);  // the step as it is: nothing copied
      return;
    }
    groups_.resize(G);
    for (int g = 0, t = 0, r = 0; g < G; ++g) {
      // Its sequences with their own block tables, rebased (every group's tables together are one
      // copy of the step's, not one per group).
      StepPlan& part = groups_[g].part;
      part.kind = plan.kind;
      part.seqs.assign(plan.seqs.begin() + first_seq[g], plan.seqs.begin() + first_seq[g + 1]);
      part.block_ids.clear();
      for (SeqStep& sq : part.seqs) {
        LLAMA2_CHECK(sq.table_begin >= 0 && sq.table_len >= 0 &&
                     int64_t{sq.table_begin} + sq.table_len <= int64_t(plan.block_ids.size()));
        const auto begin = plan.block_ids.begin() + sq.table_begin;
        sq.table_begin = static_cast<int32_t>(part.block_ids.size());
        part.block_ids.insert(part.block_ids.end(), begin, begin + sq.table_len);
      }
      int t1 = t;
      for (const SeqStep& sq : part.seqs) t1 += sq.n_tokens;
      part.tokens.assign(plan.tokens.begin() + t, plan.tokens.begin() + t1);
      if (plan.kind == StepKind::kScore) {
        part.targets.assign(plan.targets.begin() + t, plan.targets.begin() + t1);
      }
      set_group(&groups_[g], &part, t, r);
      t = groups_[g].t1;
      r = groups_[g].r1;
    }
  }

  // Stage 2l is layer l's attention, 2l + 1 its MLP, 2L the final norm and LM head. Every stage
  // after the first begins by adding the previous stage's all-reduced `partial` to the residual
  // stream. Rows [t0, t1) of the step's buffers only; `ops` splits each operator (nullptr: this
  // thread alone).
  void run_stage(int stage, const RowGroup& g, ThreadPool* ops) {
    Workspace& ws = ws_;
    const int H = c_.hidden_size, d = s_.head_dim, F = s_.ffn_size, T = g.t1 - g.t0;
    const int nq = s_.num_heads * d, nkv = s_.num_kv_heads * d;
    const int ld_qkv = layers_[0].wqkv.ld, ld_gu = layers_[0].w_gate_up.ld;
    float* x = ws.x.data() + int64_t{g.t0} * H;              // [T, H] residual stream
    float* h = ws.h.data() + int64_t{g.t0} * H;              // [T, H] normed
    float* partial = ws.partial.data() + int64_t{g.t0} * H;  // [T, H] this rank's part of a sum
    if (stage > 0) cpu::add_inplace(x, partial, int64_t{T} * H);
    if (stage == 2 * c_.num_layers) {
      // Only the rows whose logits the step returns go through the norm and head.
      float* last = ws.last.data() + int64_t{g.r0} * H;  // [r1 - r0, H]
      int r = 0;
      for (int t : g.head_rows) std::copy_n(x + int64_t{t} * H, H, last + int64_t{r++} * H);
      cpu::rmsnorm(last, final_norm_.data(), r, H, c_.rms_norm_eps, last);
      cpu::linear(last, lm_head_, r, ws.logits.data() + int64_t{g.r0} * s_.vocab_size,
                  s_.vocab_size, ops);
      return;
    }
    CpuLayer& L = layers_[stage / 2];
    if (stage % 2 == 0) {
      float* qkv = ws.qkv.data() + int64_t{g.t0} * ld_qkv;  // [T, q | k | v | padding]
      float* q = ws.q.data() + int64_t{g.t0} * nq;          // [T, heads_local, d]
      float* k = ws.k.data() + int64_t{g.t0} * nkv;         // [T, kv_local, d]
      float* v = ws.v.data() + int64_t{g.t0} * nkv;         // [T, kv_local, d]
      float* attn = ws.attn.data() + int64_t{g.t0} * nq;    // [T, heads_local, d]
      cpu::rmsnorm(x, L.attn_norm.data(), T, H, c_.rms_norm_eps, h);
      cpu::linear(h, L.wqkv, T, qkv, ld_qkv, ops);
      for (int t = 0; t < T; ++t) {
        const float* row = qkv + int64_t{t} * ld_qkv;
        std::copy_n(row, nq, q + int64_t{t} * nq);
        std::copy_n(row + nq, nkv, k + int64_t{t} * nkv);
        std::copy_n(row + nq + nkv, nkv, v + int64_t{t} * nkv);
      }
      cpu::rope(q, g.rope, T, s_.num_heads, d);
      cpu::rope(k, g.rope, T, s_.num_kv_heads, d);
      const cpu::KvLayerView cache{
          L.k_cache.data(), L.v_cache.data(), s_.num_kv_heads, kv_.block_size, d, kv_.num_blocks};
      cpu::kv_write(cache, *g.plan, k, v);
      cpu::paged_attention(cache, *g.plan, q, s_.num_heads, kv_head_of_, attn, ops);
      cpu::linear(attn, L.wo, T, partial, H, ops);  // row-parallel O projection
    } else {
      float* gate_up = ws.gate_up.data() + int64_t{g.t0} * ld_gu;  // [T, gate | up | padding]
      float* act = ws.act.data() + int64_t{g.t0} * F;              // [T, ffn_local]
      cpu::rmsnorm(x, L.mlp_norm.data(), T, H, c_.rms_norm_eps, h);
      cpu::linear(h, L.w_gate_up, T, gate_up, ld_gu, ops);
      for (int t = 0; t < T; ++t) {
        const float* row = gate_up + int64_t{t} * ld_gu;
        cpu::swiglu(row, row + F, F, act + int64_t{t} * F);
      }
      cpu::linear(act, L.w_down, T, partial, H, ops);  // row-parallel down projection
    }
  }

  // Stages [first, last] for every group: a single group on this thread with the pool splitting
  // each operator, or one group per pool thread (an exception on a worker is rethrown here).
  void run_stages(int first, int last) {
    if (groups_.size() == 1) {
      for (int st = first; st <= last; ++st) run_stage(st, groups_[0], &pool_);
      return;
    }
    std::vector<std::exception_ptr> errors(groups_.size());
    pool_.run(static_cast<int>(groups_.size()), [&](int g) {
      try {
        for (int st = first; st <= last; ++st) run_stage(st, groups_[g], nullptr);
      } catch (...) {
        errors[g] = std::current_exception();
      }
    });
    for (const auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

  // Leaves ws_.logits [head rows, shard.vocab_size]: this rank's vocabulary slice of the rows
  // head_rows(plan) names.
  void local_logits(const StepPlan& plan) {
    const int T = plan.total_tokens(), H = c_.hidden_size, d = s_.head_dim;
    const int nq = s_.num_heads * d, nkv = s_.num_kv_heads * d, F = s_.ffn_size;
    // Activations live in a workspace that only grows: allocating them per step made glibc hand
    // the pages back and fault them in again every step (a third of a batch-32 step).
    Workspace& ws = ws_;
    sized(&ws.x, T * H);                              // [T, H] residual stream, replicated
    sized(&ws.h, T * H);                              // [T, H]
    sized(&ws.qkv, T * layers_[0].wqkv.ld);           // [T, q | k | v | padding]
    sized(&ws.q, T * nq);                             // [T, heads_local, d]
    sized(&ws.k, T * nkv);                            // [T, kv_local, d]
    sized(&ws.v, T * nkv);                            // [T, kv_local, d]
    sized(&ws.attn, T * nq);                          // [T, heads_local, d]
    sized(&ws.gate_up, T * layers_[0].w_gate_up.ld);  // [T, gate | up | padding]
    sized(&ws.act, T * F);                            // [T, ffn_local]
    sized(&ws.partial, T * H);                        // [T, H] this rank's row-split sum
    const int rows = static_cast<int>(head_rows(plan).size());
    sized(&ws.last, int64_t{rows} * H);                // [rows, H]
    sized(&ws.logits, int64_t{rows} * s_.vocab_size);  // [rows, vocab_local]
    cpu::embedding(plan.tokens.data(), T, embed_.data(), s_.vocab_begin, s_.vocab_size, H,
                   ws.x.data());
    // Vocab-parallel embedding: one rank owns each row.
    comm_.all_reduce_sum(ws.x.data(), ws.x.size(), CommType::kF32);

    make_groups(plan);
    const int last_stage = 2 * c_.num_layers;
    if (s_.tp == 1) {
      run_stages(0, last_stage);  // no all-reduce between stages: one pass per group
    } else {
      for (int st = 0; st < last_stage; ++st) {
        run_stages(st, st);
        comm_.all_reduce_sum(ws.partial.data(), ws.partial.size(), CommType::kF32);
      }
      run_stages(last_stage, last_stage);
    }
  }

  ModelConfig c_;
  ShardPlan s_;
  std::vector<ShardPlan> all_shards_;  // every rank's split, for stitching the vocab slices
  KvCacheSpec kv_;
  Comm& comm_;
  std::vector<float> embed_;       // [vocab_local, H]
  std::vector<float> final_norm_;  // [H]
  cpu::PackedLinear lm_head_;      // in H, out vocab_local (packed from embed_ when tied)
  uint64_t params_ = 0;            // parameters of the shard, as the planner counts them
  std::vector<CpuLayer> layers_;
  std::vector<int> kv_head_of_;  // [heads_local] local KV head of each local query head
  std::vector<float> inv_freq_;  // [head_dim / 2] RoPE's frequencies (all but rescaled sequences)
  CpuSplit split_;
  bool weights_fit_l2_ = false;  // the projections and head fit in one core's L2 cache
  ThreadPool pool_;
  Workspace ws_;
  std::vector<RowGroup> groups_;  // this step's sequence groups (make_groups)
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, const ShardPlan& shard,
                                             const WeightStore& weights, Comm& comm, int threads,
                                             CpuSplit split) {
  return std::make_unique<CpuModel>(config, shard, weights, comm, threads, split);
}

}  // namespace llama2
