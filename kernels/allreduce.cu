#include <string>

#include "common/check.h"
#include "kernels/add_rmsnorm_row.cuh"
#include "kernels/allreduce.cuh"
#include "kernels/dtype.cuh"
#include "kernels/reduce.cuh"

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

// Steps 1-3 of both kernels: this rank's n elements pushed into its place in slot (epoch % 2) of
// every rank (local copy included), its flag raised at each, every peer's awaited. Returns this
// rank's slot: every rank's data, rank r's at r * max_bytes.
template <typename T>
__device__ const char* exchange(const Params& p, const T* data, int64_t n) {
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
  return mine + (epoch & 1u) * p.ranks * p.max_bytes;
}

// acc[0, V) = the sum over ranks, in rank order, of elements offset .. offset + V - 1 of every
// rank's data in `base` (exchange's slot).
template <typename T, int V>
__device__ __forceinline__ void sum_ranks(const Params& p, const char* base, int64_t offset,
                                          float (&acc)[V]) {
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0.f;
  for (int r = 0; r < p.ranks; ++r) {
    float v[V];
    load_float<T, V>(reinterpret_cast<const T*>(base + r * p.max_bytes) + offset, v);
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += v[e];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) allreduce_kernel(const Params p, T* data, int64_t n) {
  wait_for_previous_grid();
  constexpr int V = kVec16<T>;
  const char* base = exchange(p, data, n);
  // 4. Sum in rank order from this rank's slot (identical on every rank).
  for (int64_t i = threadIdx.x; i < n / V; i += kThreads) {
    float acc[V];
    sum_ranks<T, V>(p, base, i * V, acc);
    store_float<T, V>(data + i * V, acc);
  }
}

// The reduction, then add_rmsnorm_kernel's two passes per row (kernels/add_rmsnorm_row.cuh) with
// the rounded sum in place of its x: 512 threads where add_rmsnorm has ceil32(hidden / V) <= 512,
// which add_rmsnorm_row makes the same bits, so residual and out are bit-identical to
// allreduce_kernel + add_rmsnorm_kernel.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    allreduce_add_rmsnorm_kernel(const Params p, const T* partial, T* residual, const T* weight,
                                 T* out, int rows, int hidden, float eps) {
  wait_for_previous_grid();
  constexpr int V = kVec16<T>;
  const char* base = exchange(p, partial, int64_t{rows} * hidden);
  for (int row = 0; row < rows; ++row) {
    __syncthreads();  // block_sum's scratch, read by every thread for the previous row
    const int64_t off = int64_t{row} * hidden;
    auto ranks_sum = [&](int i, float(&v)[V]) {
      sum_ranks<T, V>(p, base, off + i * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] = round_to<T>(v[e]);  // the all-reduce stores T
    };
    add_rmsnorm_row<T, V>(residual + off, ranks_sum, weight, hidden, eps, out + off, false);
  }
}

// The kernel's view of `shared`, after the checks both launchers make.
cudaError_t make_params(const AllReduceShared& shared, Params* p) {
  LLAMA2_LAUNCH_REQUIRE(shared.ranks >= 1 && shared.ranks <= kAllReduceMaxRanks,
                        "ranks " + std::to_string(shared.ranks) + ", allowed 1.." +
                            std::to_string(kAllReduceMaxRanks));
  LLAMA2_LAUNCH_REQUIRE(shared.rank >= 0 && shared.rank < shared.ranks,
                        "rank " + std::to_string(shared.rank));
  LLAMA2_LAUNCH_REQUIRE(shared.max_bytes % 16 == 0,
                        "max_bytes " + std::to_string(shared.max_bytes));
  *p = Params{shared.rank, shared.ranks, shared.max_bytes, {}};
  for (int r = 0; r < shared.ranks; ++r) {
    LLAMA2_LAUNCH_REQUIRE(shared.buffers[r] != nullptr, "rank " + std::to_string(r));
    p->buffers[r] = static_cast<char*>(shared.buffers[r]);
  }
  return cudaSuccess;
}

}  // namespace

size_t allreduce_buffer_bytes(int ranks, size_t max_bytes) {
  return data_bytes(ranks, max_bytes) + (static_cast<size_t>(ranks) + 1) * sizeof(uint32_t);
}

template <typename T>
cudaError_t launch_allreduce(const AllReduceShared& shared, T* data, int64_t n,
                             cudaStream_t stream) {
  Params p;
  if (const cudaError_t e = make_params(shared, &p); e != cudaSuccess) return e;
  LLAMA2_LAUNCH_REQUIRE(n >= 0, "n " + std::to_string(n));
  LLAMA2_LAUNCH_REQUIRE(
      static_cast<size_t>(n) * sizeof(T) <= shared.max_bytes,
      std::to_string(n * sizeof(T)) + " bytes, buffers of " + std::to_string(shared.max_bytes));
  LLAMA2_LAUNCH_REQUIRE(n % kVec16<T> == 0, "n " + std::to_string(n) + " is not a multiple of " +
                                                std::to_string(kVec16<T>) + " (16 bytes)");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(data, 16), "");
  return launch_kernel(allreduce_kernel<T>, 1, kThreads, 0, stream, p, data, n);
}

template <typename T>
cudaError_t launch_allreduce_add_rmsnorm(const AllReduceShared& shared, const T* partial,
                                         T* residual, const T* weight, T* out, int rows, int hidden,
                                         float eps, cudaStream_t stream) {
  Params p;
  if (const cudaError_t e = make_params(shared, &p); e != cudaSuccess) return e;
  LLAMA2_LAUNCH_REQUIRE(
      allreduce_add_rmsnorm_fits(shared, partial, residual, weight, out, rows, hidden, sizeof(T)),
      "rows " + std::to_string(rows) + " x hidden " + std::to_string(hidden) + " (" +
          std::to_string(sizeof(T)) +
          "-byte elements, 16-byte aligned "
          "rows and pointers, at most " +
          std::to_string(shared.max_bytes) + " bytes)");
  LLAMA2_LAUNCH_REQUIRE(out != residual, "out aliases the residual");
  LLAMA2_LAUNCH_REQUIRE(eps >= 0.f, "eps " + std::to_string(eps));
  return launch_kernel(allreduce_add_rmsnorm_kernel<T>, 1, kThreads, 0, stream, p, partial,
                       residual, weight, out, rows, hidden, eps);
}

#define LLAMA2_INSTANTIATE(T)                                                                  \
  template cudaError_t launch_allreduce<T>(const AllReduceShared&, T*, int64_t, cudaStream_t); \
  template cudaError_t launch_allreduce_add_rmsnorm<T>(                                        \
      const AllReduceShared&, const T*, T*, const T*, T*, int, int, float, cudaStream_t);
LLAMA2_INSTANTIATE(float)
LLAMA2_INSTANTIATE(__half)
LLAMA2_INSTANTIATE(__nv_bfloat16)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
