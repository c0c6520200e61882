// The CUDA backend's Comm (rank/comm.h): one NCCL communicator per TP group, its unique id sent
// from rank 0 over MPI, collectives enqueued on the stream given at construction, and a stream
// wait that turns an asynchronous NCCL failure into an Error instead of a hang. With one rank there
// is no communicator and every collective is a no-op (a gather is a device copy).
//
// Behaviour kept as it was before the Comm interface covered both backends (the same NCCL calls
// on the same stream, the same one-shot selection by size, LLAMA2_CUSTOM_ALLREDUCE and node
// membership) until the two-GPU runs (issue 21) can verify a change. One difference, on an error
// path only: the one-shot kernel is chosen before launching (kernels::allreduce_fits, the same
// rules its launcher checked), so a failed launch now throws instead of silently retrying with
// NCCL; messages the kernel refuses go to NCCL as before. Not yet run at TP 2.
// all_reduce_add_rmsnorm is fused into the one-shot kernel when constructed with fuse_norm
// (LLAMA2_FUSE_ALLREDUCE_NORM=1; default off until measured at TP 2).
// --deterministic (use_rank_order): every all-reduce is an all-gather, then a sum of the ranks in
// rank order on each GPU (kernels/sum_ranks.cuh), at every message size.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

#include "kernels/allreduce.cuh"
#include "rank/comm.h"
#include "rank/cuda/device_buffer.h"

namespace llama2 {

class NcclComm final : public Comm {
 public:
  // Collective over `mpi` (every rank calls it with its own device already current). Every
  // collective and the one-rank gather copy go to `stream` (not owned; the destructor does not
  // use it). custom_allreduce false (LLAMA2_CUSTOM_ALLREDUCE=0, TuningKnobs) keeps every
  // all-reduce on NCCL; fuse_norm (LLAMA2_FUSE_ALLREDUCE_NORM=1) lets all_reduce_add_rmsnorm
  // use the one-shot kernel's fused form.
  NcclComm(MPI_Comm mpi, cudaStream_t stream, bool custom_allreduce = true, bool fuse_norm = false);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // --deterministic: from now on all_reduce_sum gathers every rank's values (ncclAllGather, a
  // copy) into a scratch of ranks x max_bytes and adds them in rank order, ((v0 + v1) + v2) ...,
  // in fp32 with one rounding (kernels::launch_sum_ranks), whatever the size: neither the
  // one-shot kernel nor NCCL's algorithms (ring or tree, chosen by size, whose order of adding
  // also depends on the channel count) decide a row's sum. all_reduce_add_rmsnorm then declines.
  // At 2 ranks the gather moves the bytes a ring all-reduce moves. Call once at start-up, before
  // any graph capture; max_bytes bounds every later message. Nothing with one rank.
  void use_rank_order(size_t max_bytes);
  // data: device memory. Messages up to kOneShotBytes go through the one-shot NVLink kernel when
  // every rank is on this node and the GPUs can map each other's memory (unless constructed with
  // custom_allreduce false); NCCL otherwise.
  void all_reduce_sum(void* data, size_t count, CommType type) override;
  // 16 KB: one or two rows of a 7B/13B hidden state, one row of 70B. Measured on 2 H200 (7B
  // decode): batch 1 (8 KB) 2.91 -> 2.68 ms per token; batch 8 (64 KB) 3.39 -> 3.57 ms, the
  // single-block kernel is slower than NCCL there.
  static constexpr size_t kOneShotBytes = 16 * 1024;
  // With fuse_norm and the one-shot kernel: the reduction, residual add and RMSNorm in one launch
  // (kernels::launch_allreduce_add_rmsnorm) for messages the kernel takes, deciding by
  // kernels::allreduce_add_rmsnorm_fits (values every rank shares); false otherwise, nothing done.
  bool all_reduce_add_rmsnorm(void* partial, CommType type, const AddRmsNorm& norm) override;
  // send, recv: device memory. Sends and receives in one ncclGroupStart/End.
  void gather_to_root(const void* send, const std::vector<size_t>& counts, CommType type,
                      void* recv) override;
  // Waits for the stream; while waiting polls ncclCommGetAsyncError, and on a failure aborts the
  // communicator (so no rank stays blocked in a collective) and throws Error naming it. When the
  // step watchdog asks for it (abort_device_collectives in rank/comm.h), aborts the communicator
  // and never returns: the watchdog is ending the process.
  void synchronize() override;

 private:
  void check_async();
  void abort_on_request();
  void setup_one_shot(MPI_Comm mpi);
  void all_reduce_rank_order(void* data, size_t count, CommType type);

  int rank_ = 0, size_ = 1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;  // nullptr when size_ == 1
  bool aborted_ = false;
  bool one_shot_ = false;
  bool fuse_norm_ = false;
  bool rank_order_ = false;
  size_t rank_order_bytes_ = 0;
  DeviceBuffer gathered_;            // rank order: [size_][rank_order_bytes_]
  kernels::AllReduceShared shared_;  // buffers[rank_] is ours (cudaMalloc), others IPC-mapped
};

}  // namespace llama2
