#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/check.h"
#include "kernels/sum_ranks.cuh"
#include "rank/comm.h"
#include "rank/cuda/nccl_comm.h"

namespace llama2 {
namespace {
// The step watchdog's abort request (abort_device_collectives): set once, never cleared, since the
// process ends right after. Communicators waiting in synchronize() see it and abort themselves.
std::atomic<bool> g_abort_requested{false};
std::atomic<int> g_waiting{0};  // threads inside synchronize() on a communicator
std::atomic<int> g_aborted{0};  // communicators aborted on request

ncclDataType_t nccl_type(CommType type) {
  switch (type) {
    case CommType::kF32:
      return ncclFloat32;
    case CommType::kI32:
      return ncclInt32;
    case CommType::kF16:
      return ncclFloat16;
    case CommType::kBF16:
      return ncclBfloat16;
  }
  LLAMA2_CHECK(false && "unknown CommType");
  return ncclFloat32;
}
}  // namespace

int abort_device_collectives(std::chrono::milliseconds wait) {
  g_abort_requested = true;
  const auto until = std::chrono::steady_clock::now() + wait;
  while (g_aborted < g_waiting && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return g_aborted;
}

NcclComm::NcclComm(MPI_Comm mpi, cudaStream_t stream, bool custom_allreduce, bool fuse_norm)
    : stream_(stream), fuse_norm_(fuse_norm) {
  MPI_CHECK(MPI_Comm_rank(mpi, &rank_));
  MPI_CHECK(MPI_Comm_size(mpi, &size_));
  if (size_ == 1) return;
  ncclUniqueId id;
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi));
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  if (custom_allreduce) setup_one_shot(mpi);
}

void NcclComm::setup_one_shot(MPI_Comm mpi) {
  if (size_ > kernels::kAllReduceMaxRanks) return;
  // CUDA IPC needs every rank of the group in this node.
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(mpi, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int node_size = 0;
  MPI_CHECK(MPI_Comm_size(node, &node_size));
  MPI_CHECK(MPI_Comm_free(&node));
  if (node_size != size_) return;

  shared_.rank = rank_;
  shared_.ranks = size_;
  shared_.max_bytes = kOneShotBytes;
  const size_t bytes = kernels::allreduce_buffer_bytes(size_, kOneShotBytes);
  int ok = 1;
  cudaIpcMemHandle_t mine{};
  if (cudaMalloc(&shared_.buffers[rank_], bytes) != cudaSuccess ||
      cudaMemset(shared_.buffers[rank_], 0, bytes) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess ||
      cudaIpcGetMemHandle(&mine, shared_.buffers[rank_]) != cudaSuccess) {
    ok = 0;
  }
  std::vector<cudaIpcMemHandle_t> all(size_);
  MPI_CHECK(MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all.data(), sizeof(mine), MPI_BYTE, mpi));
  for (int r = 0; r < size_ && ok; ++r) {
    if (r == rank_) continue;
    if (cudaIpcOpenMemHandle(&shared_.buffers[r], all[r], cudaIpcMemLazyEnablePeerAccess) !=
        cudaSuccess) {
      shared_.buffers[r] = nullptr;
      ok = 0;
    }
  }
  (void)cudaGetLastError();  // a failed attempt leaves NCCL in charge, not a sticky error
  int all_ok = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mpi));
  one_shot_ = all_ok == 1;
}

NcclComm::~NcclComm() {
  for (int r = 0; r < shared_.ranks; ++r) {
    if (shared_.buffers[r] == nullptr) continue;
    if (r == rank_) {
      (void)cudaFree(shared_.buffers[r]);
    } else {
      (void)cudaIpcCloseMemHandle(shared_.buffers[r]);
    }
  }
  if (comm_ == nullptr) return;
  // After a failure the peers may never arrive: abort rather than a destroy that could block.
  if (aborted_) return;
  (void)ncclCommDestroy(comm_);
}

void NcclComm::use_rank_order(size_t max_bytes) {
  if (comm_ == nullptr) return;
  rank_order_ = true;
  rank_order_bytes_ = max_bytes;
  gathered_ = DeviceBuffer(static_cast<size_t>(size_) * max_bytes, "rank-order all-reduce gather");
}

void NcclComm::all_reduce_rank_order(void* data, size_t count, CommType type) {
  LLAMA2_CHECK(count * comm_type_bytes(type) <= rank_order_bytes_);
  NCCL_CHECK(ncclAllGather(data, gathered_.as<void>(), count, nccl_type(type), comm_, stream_));
  const auto n = static_cast<int64_t>(count);
  switch (type) {
    case CommType::kF16:
      CUDA_CHECK(kernels::launch_sum_ranks(gathered_.as<__half>(), size_, n,
                                           static_cast<__half*>(data), stream_));
      return;
    case CommType::kBF16:
      CUDA_CHECK(kernels::launch_sum_ranks(gathered_.as<__nv_bfloat16>(), size_, n,
                                           static_cast<__nv_bfloat16*>(data), stream_));
      return;
    case CommType::kF32:
      CUDA_CHECK(kernels::launch_sum_ranks(gathered_.as<float>(), size_, n,
                                           static_cast<float*>(data), stream_));
      return;
    case CommType::kI32:
      break;
  }
  LLAMA2_CHECK(false && "the rank-order all-reduce sums floating-point values");
}

void NcclComm::all_reduce_sum(void* data, size_t count, CommType type) {
  if (comm_ == nullptr || count == 0) return;
  if (rank_order_) return all_reduce_rank_order(data, count, type);
  const auto n = static_cast<int64_t>(count);
  // The one-shot kernel or NCCL is chosen before anything is launched, from values every rank
  // shares (count, type, alignment), so all ranks choose alike; a failed one-shot launch is an
  // error, not a reason to try NCCL.
  if (one_shot_ && type != CommType::kI32 && count * comm_type_bytes(type) <= kOneShotBytes &&
      kernels::allreduce_fits(shared_, data, n, comm_type_bytes(type))) {
    switch (type) {
      case CommType::kF16:
        CUDA_CHECK(kernels::launch_allreduce(shared_, static_cast<__half*>(data), n, stream_));
        return;
      case CommType::kBF16:
        CUDA_CHECK(
            kernels::launch_allreduce(shared_, static_cast<__nv_bfloat16*>(data), n, stream_));
        return;
      case CommType::kF32:
        CUDA_CHECK(kernels::launch_allreduce(shared_, static_cast<float*>(data), n, stream_));
        return;
      case CommType::kI32:
        break;
    }
  }
  NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm_, stream_));
}

bool NcclComm::all_reduce_add_rmsnorm(void* partial, CommType type, const AddRmsNorm& norm) {
  if (!one_shot_ || !fuse_norm_ || rank_order_ || type == CommType::kI32) return false;
  if (!kernels::allreduce_add_rmsnorm_fits(shared_, partial, norm.residual, norm.weight, norm.out,
                                           norm.rows, norm.hidden, comm_type_bytes(type))) {
    return false;
  }
  auto launch = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    CUDA_CHECK(kernels::launch_allreduce_add_rmsnorm<T>(
        shared_, static_cast<const T*>(partial), static_cast<T*>(norm.residual),
        static_cast<const T*>(norm.weight), static_cast<T*>(norm.out), norm.rows, norm.hidden,
        norm.eps, stream_));
    return true;
  };
  switch (type) {
    case CommType::kF16:
      return launch(static_cast<__half*>(nullptr));
    case CommType::kBF16:
      return launch(static_cast<__nv_bfloat16*>(nullptr));
    case CommType::kF32:
      return launch(static_cast<float*>(nullptr));
    case CommType::kI32:
      break;
  }
  return false;
}

void NcclComm::gather_to_root(const void* send, const std::vector<size_t>& counts, CommType type,
                              void* recv) {
  LLAMA2_CHECK(static_cast<int>(counts.size()) == size_);
  const size_t bytes = comm_type_bytes(type);
  if (comm_ == nullptr) {
    if (counts[0] > 0) {
      CUDA_CHECK(cudaMemcpyAsync(recv, send, counts[0] * bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    return;
  }
  const ncclDataType_t t = nccl_type(type);
  NCCL_CHECK(ncclGroupStart());
  if (rank_ == 0) {
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      char* dst = static_cast<char*>(recv) + offset * bytes;
      if (r == 0) {
        if (counts[0] > 0) {
          CUDA_CHECK(
              cudaMemcpyAsync(dst, send, counts[0] * bytes, cudaMemcpyDeviceToDevice, stream_));
        }
      } else if (counts[r] > 0) {
        NCCL_CHECK(ncclRecv(dst, counts[r], t, r, comm_, stream_));
      }
      offset += counts[r];
    }
  } else if (counts[rank_] > 0) {
    NCCL_CHECK(ncclSend(send, counts[rank_], t, 0, comm_, stream_));
  }
  NCCL_CHECK(ncclGroupEnd());
}

void NcclComm::check_async() {
  if (comm_ == nullptr) return;
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async == ncclSuccess || async == ncclInProgress) return;
  aborted_ = true;
  (void)ncclCommAbort(comm_);
  throw Error("NCCL failed on rank " + std::to_string(rank_) + ": " + ncclGetErrorString(async) +
              " (a peer GPU or process is gone, or the interconnect failed; set NCCL_DEBUG=WARN "
              "for details)");
}

void NcclComm::abort_on_request() {
  if (!g_abort_requested.load(std::memory_order_relaxed)) return;
  // On this thread, the only one that issues this communicator's NCCL calls (NCCL calls on one
  // communicator must not run on two threads at once): the abort makes the NCCL kernels and
  // proxy threads give up, so that the process the watchdog is ending does not leave the GPU
  // busy with a collective that can never complete.
  aborted_ = true;
  (void)ncclCommAbort(comm_);
  ++g_aborted;
  // The watchdog ends the process now; returning or throwing would unwind the serve loop under
  // the socket server the watchdog is still using.
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void NcclComm::synchronize() {
  if (comm_ == nullptr) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  struct Waiting {  // counted while polling, so that an abort request knows whom to wait for
    Waiting() { ++g_waiting; }
    ~Waiting() { --g_waiting; }
  } waiting;
  for (;;) {
    abort_on_request();
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) break;
    if (rc != cudaErrorNotReady) CUDA_CHECK(rc);
    check_async();
    std::this_thread::yield();
  }
  check_async();
}

}  // namespace llama2
