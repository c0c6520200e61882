// One-shot all-reduce for the small messages of decode steps (a few rows of the hidden size)
// between the GPUs of one node, over peer-to-peer (NVLink) stores into buffers shared through
// CUDA IPC. NCCL's ring/tree all-reduce costs ~10 us per call for 8 KB on 2 H200s, 64 calls per
// 7B token; this is one kernel launch and one NVLink round trip.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

constexpr int kAllReduceMaxRanks = 8;

// The device memory of one rank that peers write into, and the peers' copies mapped locally.
// Layout of each rank's exchange buffer: [2 slots][ranks][max_bytes] data, then the flags
// (uint32 [ranks]) and this rank's epoch counter (uint32).
struct AllReduceShared {
  int rank = 0;
  int ranks = 1;
  size_t max_bytes = 0;                    // largest message (bytes) per rank and slot
  void* buffers[kAllReduceMaxRanks] = {};  // every rank's exchange buffer, mapped here
};

// Bytes of one rank's exchange buffer for messages up to max_bytes.
size_t allreduce_buffer_bytes(int ranks, size_t max_bytes);

// data[0, n) += the same array on every other rank, in place, summed in fp32 in rank order (so
// every rank computes bit-identical results). Every rank of the group must launch it, in the same
// order, for the same n. n * sizeof(T) <= max_bytes, data 16-byte aligned. The epoch counter
// advances on the device, so the launch can be captured in a CUDA graph and replayed.
// Launch: one block of 512 threads. It pushes its data into slot (epoch % 2) of every peer,
// raises its flag at each peer (release, system scope), waits for every peer's flag to reach the
// epoch (acquire), then sums. Two slots make it safe to start call e + 1 while a slower peer still
// reads call e: no rank can pass call e + 1 before every peer has entered it.
template <typename T>
cudaError_t launch_allreduce(const AllReduceShared& shared, T* data, int64_t n,
                             cudaStream_t stream);

// Whether launch_allreduce takes this message (size within the buffers, a whole number of 16-byte
// vectors, `data` 16-byte aligned): a caller decides between it and another all-reduce before
// launching, so that a launch error is never mistaken for "use the other one". Depends only on
// values every rank shares (count, element size, allocation alignment).
inline bool allreduce_fits(const AllReduceShared& shared, const void* data, int64_t n,
                           size_t elem_bytes) {
  return n >= 0 && elem_bytes > 0 && 16 % elem_bytes == 0 &&
         static_cast<size_t>(n) * elem_bytes <= shared.max_bytes &&
         (static_cast<size_t>(n) * elem_bytes) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(data) % 16 == 0;
}

// The reduction after a row-parallel projection fused with the residual add and RMSNorm that
// follow it (rank/comm.h, Comm::all_reduce_add_rmsnorm): with S = the sum over ranks of partial
// [rows, hidden] (the all-reduce above, rounded to T), residual += S and
// out = rmsnorm(residual) * weight, bit for bit launch_allreduce + launch_add_rmsnorm
// (kernels/rmsnorm.cuh) in one launch, and the sum never stored. partial is not modified. The same
// call order rules as launch_allreduce (the two share the epoch counter and slots).
template <typename T>
cudaError_t launch_allreduce_add_rmsnorm(const AllReduceShared& shared,
                                         const T* partial,  // [rows, hidden], this rank's
                                         T* residual,       // [rows, hidden], in place
                                         const T* weight,   // [hidden]
                                         T* out,            // [rows, hidden], not residual
                                         int rows, int hidden, float eps, cudaStream_t stream);

// Whether launch_allreduce_add_rmsnorm takes the shape: the message fits allreduce_fits, whole
// 16-byte vectors per row, every pointer 16-byte aligned. Values every rank shares, as above.
inline bool allreduce_add_rmsnorm_fits(const AllReduceShared& shared, const void* partial,
                                       const void* residual, const void* weight, const void* out,
                                       int rows, int hidden, size_t elem_bytes) {
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return rows >= 1 && hidden > 0 && elem_bytes > 0 && 16 % elem_bytes == 0 &&
         (static_cast<size_t>(hidden) * elem_bytes) % 16 == 0 &&
         allreduce_fits(shared, partial, int64_t{rows} * hidden, elem_bytes) && aligned(residual) &&
         aligned(weight) && aligned(out);
}

}  // namespace llama2::kernels
