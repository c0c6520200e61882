#include <string>

#include "common/check.h"
#include "kernels/allreduce.cuh"
#include "kernels/dtype.cuh"

namespace llama2::kernels {
namespace {

constexpr int kThreads = 512;

struct Params {
  int rank, ranks;
  size_t max_bytes;
  char* buffers[kAllReduceMaxRanks];
};

__host__ __device__ inline size_t data_bytes(int ranks, size_t max_bytes) {
  return 2 * static_cast<size_t>(ranks) * max_bytes;
}

__device__ __forceinline__ uint32_t* flags_of(char* buffer, int ranks, size_t max_bytes) {
  return reinterpret_cast<uint32_t*>(buffer + data_bytes(ranks, max_bytes));
}

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) allreduce_kernel(const Params p, T* data, int64_t n) {
  wait_for_previous_grid();
  constexpr int V = kVec16<T>;
  __shared__ uint32_t s_epoch;
  char* mine = p.buffers[p.rank];
  uint32_t* my_flags = flags_of(mine, p.ranks, p.max_bytes);
  if (threadIdx.x == 0) {
    uint32_t* counter = my_flags + p.ranks;
    s_epoch = ++*counter;  // same sequence of calls on every rank: the same epoch
  }
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const size_t slot = (epoch & 1u) * p.ranks * p.max_bytes + p.rank * p.max_bytes;
  const int64_t n_vec = n / V;

  // 1. Push this rank's data into its place in every rank's slot (local copy included).
  for (int r = 0; r < p.ranks; ++r) {
    auto* dst = reinterpret_cast<Pack<T, V>*>(p.buffers[r] + slot);
    const auto* src = reinterpret_cast<const Pack<T, V>*>(data);
    for (int64_t i = threadIdx.x; i < n_vec; i += kThreads) dst[i] = src[i];
  }
  __syncthreads();
  // 2. Tell every rank our part has landed; 3. wait for every rank's part here.
  if (threadIdx.x < p.ranks) {
    __threadfence_system();
    store_release(flags_of(p.buffers[threadIdx.x], p.ranks, p.max_bytes) + p.rank, epoch);
    while (load_acquire(my_flags + threadIdx.x) < epoch) {
    }
  }
  __syncthreads();
  // 4. Sum in rank order from this rank's slot (identical on every rank).
  const char* base = mine + (epoch & 1u) * p.ranks * p.max_bytes;
  for (int64_t i = threadIdx.x; i < n_vec; i += kThreads) {
    float acc[V] = {};
    for (int r = 0; r < p.ranks; ++r) {
      float v[V];
      load_float<T, V>(reinterpret_cast<const T*>(base + r * p.max_bytes) + i * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += v[e];
    }
    store_float<T, V>(data + i * V, acc);
  }
}

}  // namespace

size_t allreduce_buffer_bytes(int ranks, size_t max_bytes) {
  return data_bytes(ranks, max_bytes) + (static_cast<size_t>(ranks) + 1) * sizeof(uint32_t);
}

template <typename T>
cudaError_t launch_allreduce(const AllReduceShared& shared, T* data, int64_t n,
                             cudaStream_t stream) {
  LLAMA2_LAUNCH_REQUIRE(shared.ranks >= 1 && shared.ranks <= kAllReduceMaxRanks,
                        "ranks " + std::to_string(shared.ranks) + ", allowed 1.." +
                            std::to_string(kAllReduceMaxRanks));
  LLAMA2_LAUNCH_REQUIRE(n >= 0, "n " + std::to_string(n));
  LLAMA2_LAUNCH_REQUIRE(
      static_cast<size_t>(n) * sizeof(T) <= shared.max_bytes,
      std::to_string(n * sizeof(T)) + " bytes, buffers of " + std::to_string(shared.max_bytes));
  LLAMA2_LAUNCH_REQUIRE(n % kVec16<T> == 0, "n " + std::to_string(n) + " is not a multiple of " +
                                                std::to_string(kVec16<T>) + " (16 bytes)");
  LLAMA2_LAUNCH_REQUIRE(shared.max_bytes % 16 == 0,
                        "max_bytes " + std::to_string(shared.max_bytes));
  LLAMA2_LAUNCH_REQUIRE(is_aligned(data, 16), "");
  Params p{shared.rank, shared.ranks, shared.max_bytes, {}};
  for (int r = 0; r < shared.ranks; ++r) {
    LLAMA2_LAUNCH_REQUIRE(shared.buffers[r] != nullptr, "rank " + std::to_string(r));
    p.buffers[r] = static_cast<char*>(shared.buffers[r]);
  }
  return launch_kernel(allreduce_kernel<T>, 1, kThreads, 0, stream, p, data, n);
}

#define LLAMA2_INSTANTIATE(T) \
  template cudaError_t launch_allreduce<T>(const AllReduceShared&, T*, int64_t, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
