#include <cmath>
#include <numeric>
#include <vector>

#include "common/rope_frequencies.h"
#include "rank/cuda/rope_tables.h"

namespace llama2 {

RopeTables::RopeTables(const ModelConfig& c, int head_dim, int max_seq_len, int max_step_tokens)
    : c_(c), head_dim_(head_dim), max_step_tokens_(max_step_tokens) {
  freqs_ = kernels::make_rope_freqs(head_dim, rope_inv_freq(c).data());
  // (cos, sin) for every position a sequence can reach, computed once on the host.
  std::vector<float2> table(static_cast<size_t>(max_seq_len) * head_dim / 2);
  kernels::make_rope_table(freqs_, max_seq_len, table.data());
  position_table_ = DeviceBuffer(table.size() * sizeof(float2), "RoPE table");
  CUDA_CHECK(cudaMemcpy(position_table_.as<void>(), table.data(), position_table_.bytes(),
                        cudaMemcpyHostToDevice));
  freqs_.table = position_table_.as<float2>();
  freqs_.table_positions = max_seq_len;
  if (c.rope_scaling.type != RopeScalingType::kDynamic) return;
  const size_t entries = static_cast<size_t>(max_step_tokens) * head_dim / 2;
  step_table_ = DeviceBuffer(entries * sizeof(float2), "dynamic RoPE step table");
  step_host_ = PinnedBuffer(entries * sizeof(float2));
  std::vector<int32_t> rows(static_cast<size_t>(max_step_tokens));
  std::iota(rows.begin(), rows.end(), 0);
  rows_ = DeviceBuffer(rows.size() * sizeof(int32_t), "dynamic RoPE step rows");
  CUDA_CHECK(cudaMemcpy(rows_.as<void>(), rows.data(), rows_.bytes(), cudaMemcpyHostToDevice));
  step_freqs_ = freqs_;
  step_freqs_.table = step_table_.as<float2>();
  step_freqs_.table_positions = max_step_tokens;
}

bool RopeTables::rescaled(const StepPlan& plan) const {
  for (const SeqStep& s : plan.seqs) {
    if (rope_rescaled(c_, s.pos_begin + s.n_tokens)) return true;
  }
  return false;
}

RopeTables::Step RopeTables::upload(const StepPlan& plan, cudaStream_t stream) {
  LLAMA2_CHECK(step_table_.bytes() > 0 && plan.total_tokens() <= max_step_tokens_);
  const int half = head_dim_ / 2;
  auto* host = step_host_.as<float2>();
  int64_t row = 0;
  for (const SeqStep& s : plan.seqs) {
    const std::vector<float> f = rope_inv_freq(c_, s.pos_begin + s.n_tokens);
    for (int t = 0; t < s.n_tokens; ++t, ++row) {
      for (int i = 0; i < half; ++i) {
        // The expression of cpu::rope_table and kernels::make_rope_table: an fp32 angle, cos and
        // sin in double rounded once.
        const float angle = static_cast<float>(s.pos_begin + t) * f[i];
        host[row * half + i] =
            make_float2(static_cast<float>(std::cos(static_cast<double>(angle))),
                        static_cast<float>(std::sin(static_cast<double>(angle))));
      }
    }
  }
  CUDA_CHECK(cudaMemcpyAsync(step_table_.as<void>(), host,
                             static_cast<size_t>(row) * half * sizeof(float2),
                             cudaMemcpyHostToDevice, stream));
  return Step{&step_freqs_, rows_.as<int32_t>()};
}

}  // namespace llama2
