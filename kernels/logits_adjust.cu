#include <cmath>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/logits_adjust.cuh"

namespace llama2::kernels {

namespace {
constexpr int kThreads = 256;
}  // namespace

static __global__ void __launch_bounds__(kThreads)
    token_mask_kernel(float* logits, int64_t ld, int vocab_local, int vocab_begin,
                      const int32_t* mask_rows, const uint32_t* mask_words, int words_per_row,
                      int mask_base) {
  wait_for_previous_grid();
  const int j = blockIdx.x * kThreads + threadIdx.x;
  if (j >= vocab_local) return;
  const int a = blockIdx.y;
  const int bit = vocab_begin + j - mask_base;
  const uint32_t word = mask_words[static_cast<int64_t>(a) * words_per_row + bit / 32];
  if (((word >> (bit % 32)) & 1u) == 0) logits[mask_rows[a] * ld + j] = -INFINITY;
}

static __global__ void __launch_bounds__(kThreads)
    token_bias_kernel(float* logits, int64_t ld, int n_bias, const int32_t* bias_rows,
                      const int32_t* bias_cols, const float* bias_values) {
  wait_for_previous_grid();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i < n_bias) logits[bias_rows[i] * ld + bias_cols[i]] += bias_values[i];
}

cudaError_t launch_apply_token_mask(float* logits, int64_t ld, int vocab_local, int vocab_begin,
                                    int n_masked, const int32_t* mask_rows,
                                    const uint32_t* mask_words, int words_per_row, int mask_base,
                                    cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n_masked >= 0 && vocab_local > 0 && ld >= vocab_local,
                        "n_masked " + std::to_string(n_masked) + ", vocab_local " +
                            std::to_string(vocab_local) + ", ld " + std::to_string(ld));
  if (n_masked == 0) return cudaSuccess;
  // The mask must cover the slice: bits [vocab_begin - mask_base, + vocab_local).
  LLAMA2_LAUNCH_REQUIRE(
      mask_base <= vocab_begin && mask_base % 32 == 0 &&
          int64_t{vocab_begin} + vocab_local - mask_base <= 32 * int64_t{words_per_row},
      "mask of " + std::to_string(words_per_row) + " words from token " +
          std::to_string(mask_base) + " over the slice from " + std::to_string(vocab_begin));
  LLAMA2_LAUNCH_REQUIRE(logits != nullptr && mask_rows != nullptr && mask_words != nullptr, "");
  const dim3 grid((vocab_local + kThreads - 1) / kThreads, n_masked);
  launch_kernel(token_mask_kernel, grid, kThreads, 0, stream, logits, ld, vocab_local, vocab_begin,
                mask_rows, mask_words, words_per_row, mask_base);
  return cudaGetLastError();
}

cudaError_t launch_add_token_bias(float* logits, int64_t ld, int n_bias, const int32_t* bias_rows,
                                  const int32_t* bias_cols, const float* bias_values,
                                  cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n_bias >= 0 && ld > 0, "n_bias " + std::to_string(n_bias));
  if (n_bias == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(
      logits != nullptr && bias_rows != nullptr && bias_cols != nullptr && bias_values != nullptr,
      "");
  launch_kernel(token_bias_kernel, (n_bias + kThreads - 1) / kThreads, kThreads, 0, stream, logits,
                ld, n_bias, bias_rows, bias_cols, bias_values);
  return cudaGetLastError();
}

}  // namespace llama2::kernels
