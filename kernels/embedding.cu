#include <algorithm>
#include <string>

#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/embedding.cuh"

namespace llama2::kernels {

// One block per token: N elements (16 bytes when possible) per access.
template <typename T, int N>
static __global__ void embedding_kernel(const int32_t* tokens, const T* table, int vocab_begin,
                                        int vocab_local, int hidden, T* out) {
  wait_for_previous_grid();
  const int t = blockIdx.x;
  const int local = tokens[t] - vocab_begin;
  const int n_vec = hidden / N;
  auto* dst = reinterpret_cast<Pack<T, N>*>(out + static_cast<int64_t>(t) * hidden);
  if (local >= 0 && local < vocab_local) {
    const auto* src =
        reinterpret_cast<const Pack<T, N>*>(table + static_cast<int64_t>(local) * hidden);
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) dst[i] = src[i];
  } else {
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) dst[i] = Pack<T, N>{};
  }
}

template <typename T>
cudaError_t launch_embedding(const int32_t* tokens, int n_tokens, const T* table, int vocab_begin,
                             int vocab_local, int hidden, T* out, cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(n_tokens >= 0, "n_tokens " + std::to_string(n_tokens));
  LLAMA2_LAUNCH_REQUIRE(hidden > 0, "hidden " + std::to_string(hidden));
  LLAMA2_LAUNCH_REQUIRE(vocab_local >= 0 && vocab_begin >= 0,
                        "vocab_begin " + std::to_string(vocab_begin) + ", vocab_local " +
                            std::to_string(vocab_local));
  if (n_tokens == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(tokens != nullptr && out != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(vocab_local == 0 || table != nullptr, "");
  constexpr int V = kVec16<T>;
  const bool vec = hidden % V == 0 && is_aligned(table, 16) && is_aligned(out, 16);
  const int n_vec = vec ? hidden / V : hidden;
  // One thread per access up to 256: a row of 4096 fp16 is 512 accesses, two per thread.
  const int threads = static_cast<int>(std::min<int64_t>(256, ceil_div(n_vec, 32) * 32));
  if (vec) {
    launch_kernel(embedding_kernel<T, V>, n_tokens, threads, 0, stream, tokens, table, vocab_begin,
                  vocab_local, hidden, out);
  } else {
    launch_kernel(embedding_kernel<T, 1>, n_tokens, threads, 0, stream, tokens, table, vocab_begin,
                  vocab_local, hidden, out);
  }
  return cudaGetLastError();
}

#define LLAMA2_INSTANTIATE(T)                                                                \
  template cudaError_t launch_embedding<T>(const int32_t*, int, const T*, int, int, int, T*, \
                                           cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
