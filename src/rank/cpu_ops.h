// The fp32 CPU operators on row-major arrays: the oracle the CUDA kernels are tested against, and
// the backend of machines without a GPU. Numerics follow HF in fp32; speed comes from 8-lane
// vectors, register blocking and a thread pool, never from reordering a row's arithmetic by batch
// (a sequence's logits do not depend on what else is in the step).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/step_plan.h"
#include "rank/cpu_threads.h"

namespace llama2::cpu {

// out[t, :] = table[tokens[t] - vocab_begin, :] when the token is in this rank's vocab slice, else
// 0. table: [vocab_local, hidden], out: [n_tokens, hidden]. The vocab-parallel all-reduce completes
// it.
void embedding(const int32_t* tokens, int n_tokens, const float* table, int vocab_begin,
               int vocab_local, int hidden, float* out);

// out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight, as HF LlamaRMSNorm in fp32.
// x, out: [n, hidden] (may alias), weight: [hidden].
void rmsnorm(const float* x, const float* weight, int n, int hidden, double eps, float* out);

// A linear layer's weight packed for linear(): the output columns of one or more HF [out_i, in]
// matrices side by side (q|k|v, gate|up), zero-padded to ld (a multiple of 8), in panels of 8
// columns, each k-major: 8 consecutive outputs are one vector load per input element, batch rows
// share every load, and each panel streams from memory front to back.
struct PackedLinear {
  int in = 0, out = 0, ld = 0;
  std::vector<float> wt;  // [ld / 8 panels, in, 8]
};
// parts: {w_i [out_i, in], out_i}, concatenated along the output dimension.
PackedLinear pack_linear(const std::vector<std::pair<const float*, int>>& parts, int in);
inline PackedLinear pack_linear(const float* w, int out_features, int in) {
  return pack_linear({{w, out_features}}, in);
}

// out[t, n] = sum_k x[t, k] * w[n, k] for n < w.out: a linear layer. x: [rows, w.in],
// out: [rows, out_stride >= w.out]. Each out[t, n] is one fp32 multiply-add chain over k in order,
// so it is bit-identical whatever `rows` and whichever threads `pool` (optional) splits the
// columns over.
void linear(const float* x, const PackedLinear& w, int rows, float* out, int64_t out_stride,
            ThreadPool* pool = nullptr);
// The same from HF's [out_features, in] layout, packing on every call (tests and one-off uses).
// x: [rows, in], w: [out_features, in], out: [rows, out_features].
void linear(const float* x, const float* w, int rows, int in, int out_features, float* out,
            ThreadPool* pool = nullptr);

// cos and sin of pos * theta^(-2i/d) for every token and i < d/2, computed as HF does (fp32
// angles): built once per step and shared by q and k of every layer.
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [n_tokens, head_dim / 2]
};
RopeTable rope_table(const int32_t* positions, int n_tokens, int head_dim, double theta);
// The same with the inverse frequencies given (common/rope_frequencies.h): token t rotates by
// positions[t] * inv_freq[t * inv_freq_stride + i]; stride 0 shares one set [head_dim / 2].
RopeTable rope_table(const int32_t* positions, int n_tokens, int head_dim, const float* inv_freq,
                     int64_t inv_freq_stride);

// Rotary embedding, HF rotate-half convention: for i < d/2, (x_i, x_{i+d/2}) is rotated by the
// table's angle. x: [n_tokens, n_heads, head_dim] in place.
void rope(float* x, const RopeTable& table, int n_tokens, int n_heads, int head_dim);
// The same with the table built on the spot; positions: [n_tokens].
void rope(float* x, const int32_t* positions, int n_tokens, int n_heads, int head_dim,
          double theta);

// out = silu(gate) * up elementwise; gate, up, out: [n] (out may alias gate).
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// x += y; both [n].
void add_inplace(float* x, const float* y, int64_t n);

// Paged KV cache of one layer on one rank: k and v are [num_blocks, kv_heads, block_size,
// head_dim].
struct KvLayerView {
  float* k = nullptr;
  float* v = nullptr;
  int kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
  int num_blocks = 0;
};

// Writes the new tokens' K and V into their cache slots. k, v: [n_tokens, kv_heads, head_dim].
void kv_write(const KvLayerView& cache, const StepPlan& plan, const float* k, const float* v);

// Causal attention of every new token over its sequence's cached keys/values (positions
// 0..pos inclusive), softmax in fp32 with max subtraction. Query head h reads KV head
// kv_head_of[h] (grouped-query attention). q: [n_tokens, n_heads, head_dim],
// out: [n_tokens, n_heads, head_dim]. A token's result does not depend on the other sequences of
// the plan or on `pool` (optional), which splits the (token, KV head) pairs over its threads.
void paged_attention(const KvLayerView& cache, const StepPlan& plan, const float* q, int n_heads,
                     const std::vector<int>& kv_head_of, float* out, ThreadPool* pool = nullptr);

// Positions of the plan's tokens, sequence after sequence: [total_tokens].
std::vector<int32_t> plan_positions(const StepPlan& plan);

}  // namespace llama2::cpu
