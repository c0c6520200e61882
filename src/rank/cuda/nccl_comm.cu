#include "rank/cuda/nccl_comm.h"

#include <string>
#include <thread>

#include "common/check.h"

namespace llama2 {

size_t nccl_type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat32: case ncclInt32: return 4;
    case ncclFloat16: case ncclBfloat16: return 2;
    default: LLAMA2_CHECK(false && "unsupported NCCL type"); return 0;
  }
}

NcclComm::NcclComm(MPI_Comm mpi) {
  MPI_CHECK(MPI_Comm_rank(mpi, &rank_));
  MPI_CHECK(MPI_Comm_size(mpi, &size_));
  if (size_ == 1) return;
  ncclUniqueId id;
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi));
  NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  // After a failure the peers may never arrive: abort rather than a destroy that could block.
  if (aborted_) return;
  (void)ncclCommDestroy(comm_);
}

void NcclComm::all_reduce_sum(void* buf, size_t count, ncclDataType_t type, cudaStream_t stream) {
  if (comm_ == nullptr || count == 0) return;
  NCCL_CHECK(ncclAllReduce(buf, buf, count, type, ncclSum, comm_, stream));
}

void NcclComm::gather_to_root(const void* send, const std::vector<size_t>& counts,
                              ncclDataType_t type, void* recv, cudaStream_t stream) {
  LLAMA2_CHECK(static_cast<int>(counts.size()) == size_);
  const size_t bytes = nccl_type_bytes(type);
  if (comm_ == nullptr) {
    if (counts[0] > 0) {
      CUDA_CHECK(cudaMemcpyAsync(recv, send, counts[0] * bytes, cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  NCCL_CHECK(ncclGroupStart());
  if (rank_ == 0) {
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      char* dst = static_cast<char*>(recv) + offset * bytes;
      if (r == 0) {
        if (counts[0] > 0) {
          CUDA_CHECK(cudaMemcpyAsync(dst, send, counts[0] * bytes, cudaMemcpyDeviceToDevice, stream));
        }
      } else if (counts[r] > 0) {
        NCCL_CHECK(ncclRecv(dst, counts[r], type, r, comm_, stream));
      }
      offset += counts[r];
    }
  } else if (counts[rank_] > 0) {
    NCCL_CHECK(ncclSend(send, counts[rank_], type, 0, comm_, stream));
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

void NcclComm::synchronize(cudaStream_t stream) {
  if (comm_ == nullptr) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream);
    if (rc == cudaSuccess) break;
    if (rc != cudaErrorNotReady) CUDA_CHECK(rc);
    check_async();
    std::this_thread::yield();
  }
  check_async();
}

}  // namespace llama2
