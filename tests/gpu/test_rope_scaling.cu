// rope_scaling on the GPU (src/rank/cuda/rope_tables.h): the RoPE kernel reading the tables the
// CUDA runner builds rotates q exactly as the CPU backend's per-sequence tables do
// (src/rank/cpu_model.cpp, common/rope_frequencies.h), in fp32:
//   linear x4: the position table built from the scaled frequencies;
//   dynamic NTK x2: a step mixing a sequence below the original length (the position table's
//     frequencies) with two past it (each its own length's), through the per-step table indexed
//     by token row.
// cos/sin are the same fp32 numbers on both sides (one expression), so the tolerance is fp32's.
#include <vector>

#include "common/model_config.h"
#include "common/rope_frequencies.h"
#include "gpu_test_util.h"
#include "kernels/rope_kv.cuh"
#include "rank/cpu_ops.h"
#include "rank/cuda/rope_tables.h"

namespace cpu = llama2::cpu;
namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

llama2::ModelConfig rope_config(llama2::RopeScalingType type, double factor) {
  llama2::ModelConfig c;
  c.hidden_size = 256, c.intermediate_size = 512, c.num_layers = 1, c.vocab_size = 100;
  c.num_heads = 4, c.num_kv_heads = 2, c.rope_theta = 10000.0;
  c.max_position_embeddings = 64;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = factor;
  if (type == llama2::RopeScalingType::kDynamic) {
    c.rope_scaling.original_max_position_embeddings = 64;
    c.max_position_embeddings = 128;
  }
  return c;
}

// The CPU backend's rotation of q [n, heads, d] for `plan` (cpu_model.cpp's rope_table_for).
std::vector<float> cpu_rotated(const llama2::ModelConfig& c, const llama2::StepPlan& plan,
                               std::vector<float> q) {
  const int d = c.head_dim(), n = plan.total_tokens();
  const std::vector<int32_t> pos = cpu::plan_positions(plan);
  std::vector<float> per_token;
  for (const llama2::SeqStep& s : plan.seqs) {
    const std::vector<float> f = llama2::rope_inv_freq(c, s.pos_begin + s.n_tokens);
    for (int t = 0; t < s.n_tokens; ++t) per_token.insert(per_token.end(), f.begin(), f.end());
  }
  cpu::rope(q.data(), cpu::rope_table(pos.data(), n, d, per_token.data(), d / 2), n, c.num_heads,
            d);
  return q;
}

void check(const llama2::ModelConfig& c, const llama2::StepPlan& plan, bool expect_rescaled) {
  const int d = c.head_dim(), H = c.num_heads, G = c.num_kv_heads, n = plan.total_tokens();
  const int stride = (H + 2 * G) * d;
  const auto qkv = exact_random(static_cast<size_t>(n) * stride, 7, -2.f, 2.f);
  std::vector<float> q_in(static_cast<size_t>(n) * H * d);
  for (int t = 0; t < n; ++t) {
    std::copy(qkv.begin() + static_cast<int64_t>(t) * stride,
              qkv.begin() + static_cast<int64_t>(t) * stride + H * d, q_in.begin() + t * H * d);
  }
  const std::vector<float> want = cpu_rotated(c, plan, q_in);

  llama2::RopeTables tables(c, d, c.max_position_embeddings, 256);
  REQUIRE(tables.rescaled(plan) == expect_rescaled);
  const llama2::RopeTables::Step step =
      expect_rescaled ? tables.upload(plan, 0) : tables.position_table();
  DeviceBuffer<int32_t> d_pos(cpu::plan_positions(plan)), d_slot(std::vector<int32_t>(n, -1));
  DeviceBuffer<float> d_qkv(qkv), d_cache(16);
  k::PagedKvCache<float> cache{d_cache.get(), d_cache.get(), 1, G, 1, d};  // never written
  const k::RopeKvTokens toks{step.rows != nullptr ? step.rows : d_pos.get(), d_slot.get(), n};
  float* q = d_qkv.get();
  LLAMA2_CUDA_REQUIRE(k::launch_rope_kv<float>(q, stride, q + H * d, stride, q + (H + G) * d,
                                               stride, H, toks, *step.freqs, cache, 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<float> out = d_qkv.download();
  std::vector<float> got(q_in.size());
  for (int t = 0; t < n; ++t) {
    std::copy(out.begin() + static_cast<int64_t>(t) * stride,
              out.begin() + static_cast<int64_t>(t) * stride + H * d, got.begin() + t * H * d);
  }
  expect_close("rope_scaling q", got, want, Tol{1e-5, 1e-5 * max_abs(q_in)});
}

}  // namespace

TEST_CASE("rope_scaling: the CUDA tables rotate as the CPU backend") {
  LLAMA2_GPU_TEST_OR_SKIP();
  llama2::StepPlan plan;
  const std::vector<int32_t> tokens(40, 3), blocks(200, 0);
  // A decode past the original length, a prefill below it, a prefill chunk crossing it.
  llama2::append_seq(&plan, 0, 100, tokens.data(), 1, true, blocks.data(), 101);
  llama2::append_seq(&plan, 1, 0, tokens.data(), 20, true, blocks.data(), 20);
  llama2::append_seq(&plan, 2, 50, tokens.data(), 30, true, blocks.data(), 80);
  check(rope_config(llama2::RopeScalingType::kLinear, 4.0), plan, false);
  check(rope_config(llama2::RopeScalingType::kDynamic, 2.0), plan, true);
  // Below the original length a dynamic model reads the position table.
  llama2::StepPlan short_plan;
  llama2::append_seq(&short_plan, 0, 0, tokens.data(), 20, true, blocks.data(), 20);
  check(rope_config(llama2::RopeScalingType::kDynamic, 2.0), short_plan, false);
}
