// The fp32 CPU backend: the same tensor-parallel forward pass the CUDA backend runs, on the vector
// operators of cpu_ops.h and this rank's thread pool.
#include <algorithm>

#include "common/check.h"
#include "rank/comm.h"
#include "rank/cpu_ops.h"
#include "rank/logits_gather.h"
#include "rank/model_runner.h"
#include "rank/safetensors.h"
#include "rank/weight_layout.h"

namespace llama2 {
namespace {

std::vector<float> load(const WeightStore& w, const TensorSlice& s) {
  std::vector<float> out(static_cast<size_t>(s.numel()));
  w.read_block_f32(s.name, s.row_begin, s.row_end, s.col_begin, s.col_end, out.data());
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
  CpuModel(const ModelConfig& c, const ShardPlan& s, const WeightStore& w, Comm& comm, int threads)
      : c_(c), s_(s), comm_(comm), pool_(threads) {
    for (int r = 0; r < s.tp; ++r) all_shards_.push_back(make_shard_plan(c, s.tp, r));
    const int H = c.hidden_size, d = s.head_dim, nq = s.num_heads * d, nkv = s.num_kv_heads * d;
    const int F = s.ffn_size;
    embed_ = load(w, embedding_slice(c, s));
    final_norm_ = load(w, final_norm_slice(c));
    // A tied head is packed from the embedding table, which stays row-major for the lookup.
    lm_head_ = cpu::pack_linear(
        c.tie_word_embeddings ? embed_.data() : load(w, lm_head_slice(c, s)).data(), s.vocab_size, H);
    params_ = embed_.size() + final_norm_.size() +
              (c.tie_word_embeddings ? 0 : static_cast<uint64_t>(s.vocab_size) * H);
    layers_.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
      CpuLayer& L = layers_[l];
      auto get = [&](LayerTensor t) { return load(w, layer_slice(c, s, l, t)); };
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
  }

  std::string backend_name() const override { return "cpu"; }
  std::string device_description() const override {
    return "host, " + std::to_string(pool_.size()) + (pool_.size() == 1 ? " thread" : " threads");
  }
  int dtype_bytes() const override { return sizeof(float); }
  int kv_dtype_bytes() const override { return sizeof(float); }
  int64_t kv_blocks_that_fit(int) const override { return -1; }

  void allocate_kv(const KvCacheSpec& kv) override {
    kv_ = kv;
    const size_t cache_elems = static_cast<size_t>(kv.num_blocks) * s_.num_kv_heads *
                               kv.block_size * s_.head_dim;
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

  void forward(const StepPlan& plan, StepLogits* out) override {
    std::vector<float>& local = ws_.logits;  // [rows, vocab_local]
    local_logits(plan, &local);
    const int rows = plan.logit_rows();
    if (plan.candidates > 0) {
      const int k = plan.candidates;
      std::vector<float> values(static_cast<size_t>(rows) * k);
      std::vector<int32_t> ids(values.size());
      local_candidates(local.data(), rows, s_.vocab_size, s_.vocab_begin, k, values.data(),
                       ids.data());
      const bool root = comm_.rank() == 0;
      std::vector<float> all_values(root ? values.size() * s_.tp : 0);
      std::vector<int32_t> all_ids(all_values.size());
      const std::vector<int> counts(s_.tp, rows * k);
      comm_.gather_to_root(values.data(), counts, all_values.data());
      comm_.gather_to_root(ids.data(), counts, all_ids.data());
      if (!root || out == nullptr) return;
      merge_candidates(all_values.data(), all_ids.data(), s_.tp, rows, k, out);
      return;
    }
    std::vector<int> counts(s_.tp);
    for (int r = 0; r < s_.tp; ++r) counts[r] = rows * all_shards_[r].vocab_size;
    std::vector<float>& gathered =
        sized(&ws_.gathered, comm_.rank() == 0 ? int64_t{rows} * c_.vocab_size : 0);
    comm_.gather_to_root(local.data(), counts, gathered.data());
    if (comm_.rank() != 0 || out == nullptr) return;
    stitch_vocab_slices(gathered.data(), all_shards_, rows, c_.vocab_size, out);
  }

 private:
  // Per-step activations, reused from step to step.
  struct Workspace {
    std::vector<float> x, h, qkv, q, k, v, attn, gate_up, act, partial, last, logits, gathered;
  };
  // `buf` resized to n elements: its contents are garbage, the operators overwrite them.
  static std::vector<float>& sized(std::vector<float>* buf, int64_t n) {
    buf->resize(static_cast<size_t>(n));
    return *buf;
  }

  // logits_local: [plan.logit_rows(), shard.vocab_size], this rank's vocabulary slice.
  void local_logits(const StepPlan& plan, std::vector<float>* logits_local) {
    const int T = plan.total_tokens(), H = c_.hidden_size, d = s_.head_dim;
    const int nq = s_.num_heads * d, nkv = s_.num_kv_heads * d, F = s_.ffn_size;
    const std::vector<int32_t> positions = cpu::plan_positions(plan);
    const cpu::RopeTable rope = cpu::rope_table(positions.data(), T, d, c_.rope_theta);

    // Activations live in a workspace that only grows: allocating them per step made glibc hand
    // the pages back and fault them in again every step (a third of a batch-32 step).
    Workspace& ws = ws_;
    std::vector<float>& x = sized(&ws.x, T * H);  // [T, H] residual stream, replicated
    cpu::embedding(plan.tokens.data(), T, embed_.data(), s_.vocab_begin, s_.vocab_size, H, x.data());
    comm_.all_reduce_sum(x.data(), x.size());  // vocab-parallel embedding: one rank owns each row

    const int ld_qkv = layers_[0].wqkv.ld, ld_gu = layers_[0].w_gate_up.ld;
    std::vector<float>& h = sized(&ws.h, T * H);               // [T, H]
    std::vector<float>& qkv = sized(&ws.qkv, T * ld_qkv);      // [T, q | k | v | padding]
    std::vector<float>& q = sized(&ws.q, T * nq);              // [T, heads_local, d]
    std::vector<float>& k = sized(&ws.k, T * nkv);             // [T, kv_local, d]
    std::vector<float>& v = sized(&ws.v, T * nkv);             // [T, kv_local, d]
    std::vector<float>& attn = sized(&ws.attn, T * nq);        // [T, heads_local, d]
    std::vector<float>& gate_up = sized(&ws.gate_up, T * ld_gu); // [T, gate | up | padding]
    std::vector<float>& act = sized(&ws.act, T * F);           // [T, ffn_local]
    std::vector<float>& partial = sized(&ws.partial, T * H);   // [T, H] this rank's row-split sum

    for (int l = 0; l < c_.num_layers; ++l) {
      CpuLayer& L = layers_[l];
      cpu::rmsnorm(x.data(), L.attn_norm.data(), T, H, c_.rms_norm_eps, h.data());
      cpu::linear(h.data(), L.wqkv, T, qkv.data(), ld_qkv, &pool_);
      for (int t = 0; t < T; ++t) {
        const float* row = qkv.data() + static_cast<int64_t>(t) * ld_qkv;
        std::copy_n(row, nq, q.data() + static_cast<int64_t>(t) * nq);
        std::copy_n(row + nq, nkv, k.data() + static_cast<int64_t>(t) * nkv);
        std::copy_n(row + nq + nkv, nkv, v.data() + static_cast<int64_t>(t) * nkv);
      }
      cpu::rope(q.data(), rope, T, s_.num_heads, d);
      cpu::rope(k.data(), rope, T, s_.num_kv_heads, d);
      const cpu::KvLayerView cache{L.k_cache.data(), L.v_cache.data(), s_.num_kv_heads,
                                   kv_.block_size, d, kv_.num_blocks};
      cpu::kv_write(cache, plan, k.data(), v.data());
      cpu::paged_attention(cache, plan, q.data(), s_.num_heads, kv_head_of_, attn.data(), &pool_);
      cpu::linear(attn.data(), L.wo, T, partial.data(), H, &pool_);
      comm_.all_reduce_sum(partial.data(), partial.size());  // row-parallel O projection
      cpu::add_inplace(x.data(), partial.data(), static_cast<int64_t>(x.size()));

      cpu::rmsnorm(x.data(), L.mlp_norm.data(), T, H, c_.rms_norm_eps, h.data());
      cpu::linear(h.data(), L.w_gate_up, T, gate_up.data(), ld_gu, &pool_);
      for (int t = 0; t < T; ++t) {
        const float* row = gate_up.data() + static_cast<int64_t>(t) * ld_gu;
        cpu::swiglu(row, row + F, F, act.data() + static_cast<int64_t>(t) * F);
      }
      cpu::linear(act.data(), L.w_down, T, partial.data(), H, &pool_);
      comm_.all_reduce_sum(partial.data(), partial.size());  // row-parallel down projection
      cpu::add_inplace(x.data(), partial.data(), static_cast<int64_t>(x.size()));
    }

    // Only the last token of sequences that asked for logits goes through the norm and LM head.
    const int rows = plan.logit_rows();
    std::vector<float>& last = sized(&ws.last, rows * H);  // [rows, H]
    int t_end = 0, r = 0;
    for (const auto& sq : plan.seqs) {
      t_end += sq.n_tokens;
      if (!sq.want_logits) continue;
      std::copy_n(x.data() + static_cast<size_t>(t_end - 1) * H, H, last.data() + static_cast<size_t>(r++) * H);
    }
    cpu::rmsnorm(last.data(), final_norm_.data(), rows, H, c_.rms_norm_eps, last.data());
    logits_local->resize(static_cast<size_t>(rows) * s_.vocab_size);
    cpu::linear(last.data(), lm_head_, rows, logits_local->data(), s_.vocab_size, &pool_);
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
  std::vector<int> kv_head_of_;    // [heads_local] local KV head of each local query head
  ThreadPool pool_;
  Workspace ws_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, const ShardPlan& shard,
                                             const WeightStore& weights, Comm& comm,
                                             int threads) {
  return std::make_unique<CpuModel>(config, shard, weights, comm, threads);
}

}  // namespace llama2
