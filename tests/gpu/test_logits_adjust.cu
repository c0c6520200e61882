// The vocabulary-adjustment kernels (kernels/logits_adjust.cuh) against the CPU version
// (rank/logits_adjust.h's apply_adjustments) on odd shapes: every rank slice of a vocabulary of
// 32000 split 1, 3 and 4 ways (slices that start inside a mask word), 19 logit rows of which some
// carry a random mask, biases, both, or nothing; the result must be equal bit for bit (the kernels
// only write -inf or add one fp32 value, exactly as the CPU does).
#include <cmath>
#include <random>

#include "common/shard_plan.h"
#include "common/step_plan.h"
#include "gpu_test_util.h"
#include "kernels/logits_adjust.cuh"
#include "rank/logits_adjust.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

// 19 logit rows over `vocab` tokens: row r % 4 == 0 a mask, 1 biases, 2 both, 3 nothing.
llama2::StepPlan adjusted_plan(int vocab) {
  llama2::StepPlan p;
  const std::vector<int32_t> tokens(19, 1);
  const int32_t table[1] = {0};
  for (int s = 0; s < 19; ++s) llama2::append_seq(&p, s, 0, tokens.data(), 1, 1, table, 1);
  std::mt19937 rng(11);
  for (int r = 0; r < 19; ++r) {
    if (r % 4 == 3) continue;
    llama2::VocabAdjust a;
    if (r % 4 != 1) {
      a.allowed.assign(static_cast<size_t>((vocab + 31) / 32), 0u);
      for (uint32_t& w : a.allowed) w = static_cast<uint32_t>(rng());
    }
    if (r % 4 != 0) {
      for (int j = 0; j < 40; ++j) {
        a.bias_ids.push_back((r * 997 + j * 797) % vocab);
        a.bias_values.push_back(static_cast<float>(j) * 0.37f - 7.f);
      }
    }
    llama2::add_row_adjust(&p, r, a, vocab);
  }
  return p;
}

}  // namespace

TEST_CASE(
    "vocabulary adjustments: masks and biases on each rank's slice, as the CPU applies them") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int vocab = 32000, rows = 19;
  const llama2::StepPlan full = adjusted_plan(vocab);
  for (const int tp : {1, 3, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      CAPTURE(tp);
      CAPTURE(rank);
      const int begin = rank * vocab / tp, local = (rank + 1) * vocab / tp - begin;
      const llama2::StepPlan mine = llama2::slice_adjustments(full, begin, local);
      const int ld = local + 3;  // padding columns the kernels must not touch
      std::vector<float> x = exact_random(static_cast<size_t>(rows) * ld, 5 + rank, -9.f, 9.f);
      // The CPU version reads dense rows [rows, local].
      std::vector<float> want(static_cast<size_t>(rows) * local);
      for (int r = 0; r < rows; ++r)
        std::copy_n(x.begin() + static_cast<size_t>(r) * ld, local,
                    want.begin() + static_cast<size_t>(r) * local);
      llama2::apply_adjustments(mine, want.data(), begin, local);

      const llama2::PackedAdjustments p = llama2::pack_adjustments(mine, begin, local);
      DeviceBuffer<float> d_x(x);
      DeviceBuffer<int32_t> d_mask_rows(p.mask_rows), d_bias_rows(p.bias_rows),
          d_bias_cols(p.bias_cols);
      DeviceBuffer<uint32_t> d_words(p.mask_words);
      DeviceBuffer<float> d_bias(p.bias_values);
      LLAMA2_CUDA_REQUIRE(k::launch_apply_token_mask(
          d_x.get(), ld, local, begin, static_cast<int>(p.mask_rows.size()), d_mask_rows.get(),
          d_words.get(), p.words_per_row, p.mask_base, 0));
      LLAMA2_CUDA_REQUIRE(
          k::launch_add_token_bias(d_x.get(), ld, static_cast<int>(p.bias_rows.size()),
                                   d_bias_rows.get(), d_bias_cols.get(), d_bias.get(), 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<float> got = d_x.download();
      int mismatches = 0;
      for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < ld; ++j) {
          const float g = got[static_cast<size_t>(r) * ld + j];
          const float w = j < local ? want[static_cast<size_t>(r) * local + j]
                                    : x[static_cast<size_t>(r) * ld + j];  // padding untouched
          mismatches += (g == w || (std::isinf(g) && std::isinf(w) && g < 0 && w < 0)) ? 0 : 1;
        }
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("vocabulary adjustments: a mask that does not cover the slice is refused, not read") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<float> x(64);
  DeviceBuffer<int32_t> rows(std::vector<int32_t>{0});
  DeviceBuffer<uint32_t> words(std::vector<uint32_t>{~0u});
  // One word covers tokens [32, 64); the slice is [40, 104).
  CHECK(k::launch_apply_token_mask(x.get(), 64, 64, 40, 1, rows.get(), words.get(), 1, 32, 0) ==
        cudaErrorInvalidValue);
  CHECK(k::launch_apply_token_mask(x.get(), 64, 64, 40, 0, nullptr, nullptr, 0, 0, 0) ==
        cudaSuccess);
}
