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

struct CpuLayer {
  std::vector<float> attn_norm;  // [H]
  std::vector<float> wq;         // [heads_local * d, H]
  std::vector<float> wk, wv;     // [kv_local * d, H]
  std::vector<float> wo;         // [H, heads_local * d]  (input columns of o_proj)
  std::vector<float> mlp_norm;   // [H]
  std::vector<float> w_gate;     // [ffn_local, H]
  std::vector<float> w_up;       // [ffn_local, H]
  std::vector<float> w_down;     // [H, ffn_local]        (input columns of down_proj)
  std::vector<float> k_cache;    // [num_blocks, kv_local, block_size, d]
  std::vector<float> v_cache;    // [num_blocks, kv_local, block_size, d]
};

class CpuModel final : public ModelRunner {
 public:
  CpuModel(const ModelConfig& c, const ShardPlan& s, const WeightStore& w, Comm& comm, int threads)
      : c_(c), s_(s), comm_(comm), pool_(threads) {
    for (int r = 0; r < s.tp; ++r) all_shards_.push_back(make_shard_plan(c, s.tp, r));
    embed_ = load(w, embedding_slice(c, s));
    final_norm_ = load(w, final_norm_slice(c));
    if (!c.tie_word_embeddings) lm_head_ = load(w, lm_head_slice(c, s));
    layers_.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
      CpuLayer& L = layers_[l];
      auto get = [&](LayerTensor t) { return load(w, layer_slice(c, s, l, t)); };
      L.attn_norm = get(LayerTensor::kAttnNorm);
      L.wq = get(LayerTensor::kWq);
      L.wk = get(LayerTensor::kWk);
      L.wv = get(LayerTensor::kWv);
      L.wo = get(LayerTensor::kWo);
      L.mlp_norm = get(LayerTensor::kMlpNorm);
      L.w_gate = get(LayerTensor::kWgate);
      L.w_up = get(LayerTensor::kWup);
      L.w_down = get(LayerTensor::kWdown);
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

  uint64_t weight_bytes() const override {
    uint64_t n = embed_.size() + final_norm_.size() + lm_head_.size();
    for (const auto& L : layers_) {
      n += L.attn_norm.size() + L.wq.size() + L.wk.size() + L.wv.size() + L.wo.size() +
           L.mlp_norm.size() + L.w_gate.size() + L.w_up.size() + L.w_down.size();
    }
    return n * sizeof(float);
  }

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
    std::vector<float> x, h, q, k, v, attn, gate, up, partial, last, logits, gathered;
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

    std::vector<float>& h = sized(&ws.h, T * H);             // [T, H]
    std::vector<float>& q = sized(&ws.q, T * nq);            // [T, heads_local, d]
    std::vector<float>& k = sized(&ws.k, T * nkv);           // [T, kv_local, d]
    std::vector<float>& v = sized(&ws.v, T * nkv);           // [T, kv_local, d]
    std::vector<float>& attn = sized(&ws.attn, T * nq);      // [T, heads_local, d]
    std::vector<float>& gate = sized(&ws.gate, T * F);       // [T, ffn_local]
    std::vector<float>& up = sized(&ws.up, T * F);           // [T, ffn_local]
    std::vector<float>& partial = sized(&ws.partial, T * H); // [T, H] this rank's row-split sum

    for (int l = 0; l < c_.num_layers; ++l) {
      CpuLayer& L = layers_[l];
      cpu::rmsnorm(x.data(), L.attn_norm.data(), T, H, c_.rms_norm_eps, h.data());
      cpu::linear(h.data(), L.wq.data(), T, H, nq, q.data(), &pool_);
      cpu::linear(h.data(), L.wk.data(), T, H, nkv, k.data(), &pool_);
      cpu::linear(h.data(), L.wv.data(), T, H, nkv, v.data(), &pool_);
      cpu::rope(q.data(), rope, T, s_.num_heads, d);
      cpu::rope(k.data(), rope, T, s_.num_kv_heads, d);
      const cpu::KvLayerView cache{L.k_cache.data(), L.v_cache.data(), s_.num_kv_heads,
                                   kv_.block_size, d, kv_.num_blocks};
      cpu::kv_write(cache, plan, k.data(), v.data());
      cpu::paged_attention(cache, plan, q.data(), s_.num_heads, kv_head_of_, attn.data(), &pool_);
      cpu::linear(attn.data(), L.wo.data(), T, nq, H, partial.data(), &pool_);
      comm_.all_reduce_sum(partial.data(), partial.size());  // row-parallel O projection
      cpu::add_inplace(x.data(), partial.data(), static_cast<int64_t>(x.size()));

      cpu::rmsnorm(x.data(), L.mlp_norm.data(), T, H, c_.rms_norm_eps, h.data());
      cpu::linear(h.data(), L.w_gate.data(), T, H, F, gate.data(), &pool_);
      cpu::linear(h.data(), L.w_up.data(), T, H, F, up.data(), &pool_);
      cpu::swiglu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
      cpu::linear(gate.data(), L.w_down.data(), T, F, H, partial.data(), &pool_);
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
    const std::vector<float>& head = c_.tie_word_embeddings ? embed_ : lm_head_;
    logits_local->resize(static_cast<size_t>(rows) * s_.vocab_size);
    cpu::linear(last.data(), head.data(), rows, H, s_.vocab_size, logits_local->data(), &pool_);
  }

  ModelConfig c_;
  ShardPlan s_;
  std::vector<ShardPlan> all_shards_;  // every rank's split, for stitching the vocab slices
  KvCacheSpec kv_;
  Comm& comm_;
  std::vector<float> embed_;       // [vocab_local, H]
  std::vector<float> final_norm_;  // [H]
  std::vector<float> lm_head_;     // [vocab_local, H]; empty when tied to embed_
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
