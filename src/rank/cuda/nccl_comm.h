// The GPU side of the tensor-parallel group: one NCCL communicator per TP group, its unique id sent
// from rank 0 over MPI, and a stream wait that turns an asynchronous NCCL failure into an Error
// instead of a hang. With one rank there is no communicator and every collective is a no-op.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "kernels/allreduce.cuh"

namespace llama2 {

class NcclComm {
 public:
  // Collective over `mpi` (every rank calls it with its own device already current).
  explicit NcclComm(MPI_Comm mpi);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // buf: [count] elements of `type` on this GPU, summed over the group in place. Messages up to
  // kOneShotBytes go through the one-shot NVLink kernel when every rank is on this node and the
  // GPUs can map each other's memory (LLAMA2_CUSTOM_ALLREDUCE=0 turns it off); NCCL otherwise.
  void all_reduce_sum(void* buf, size_t count, ncclDataType_t type, cudaStream_t stream);
  // 16 KB: one or two rows of a 7B/13B hidden state, one row of 70B. Measured on 2 H200 (7B
  // decode): batch 1 (8 KB) 2.91 -> 2.68 ms per token; batch 8 (64 KB) 3.39 -> 3.57 ms, the
  // single-block kernel is slower than NCCL there.
  static constexpr size_t kOneShotBytes = 16 * 1024;
  // Every rank's send ([counts[rank]] elements) lands on rank 0 in rank order, back to back
  // (recv is only written on rank 0). Several calls may share one ncclGroupStart/End.
  void gather_to_root(const void* send, const std::vector<size_t>& counts, ncclDataType_t type,
                      void* recv, cudaStream_t stream);
  // Waits for `stream`; while waiting polls ncclCommGetAsyncError, and on a failure aborts the
  // communicator (so no rank stays blocked in a collective) and throws Error naming it. When the
  // step watchdog asks for it (abort_device_collectives in rank/comm.h), aborts the communicator
  // and never returns: the watchdog is ending the process.
  void synchronize(cudaStream_t stream);

 private:
  void check_async();
  void abort_on_request();
  void setup_one_shot(MPI_Comm mpi);

  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;  // nullptr when size_ == 1
  bool aborted_ = false;
  bool one_shot_ = false;
  kernels::AllReduceShared shared_;  // buffers[rank_] is ours (cudaMalloc), others IPC-mapped
};

size_t nccl_type_bytes(ncclDataType_t type);

}  // namespace llama2
