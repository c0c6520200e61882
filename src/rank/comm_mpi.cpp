// The CPU backend's communicator (MpiComm) and the MPI parts of rank/comm.h every backend uses.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "common/check.h"
#include "rank/comm.h"
#include "rank/step_heartbeat.h"

namespace llama2 {
namespace {

MPI_Datatype mpi_type(CommType type) {
  switch (type) {
    case CommType::kF32:
      return MPI_FLOAT;
    case CommType::kI32:
      return MPI_INT32_T;
    case CommType::kF16:
    case CommType::kBF16:
      break;
  }
  throw Error("MPI collectives move fp32 and int32 only (the CPU backend's types)");
}

int mpi_count(size_t count) {
  LLAMA2_CHECK(count <= static_cast<size_t>(INT_MAX));
  return static_cast<int>(count);
}

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, StepHeartbeat* beat, ReduceOrder order)
      : comm_(comm), beat_(beat), order_(order) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(void* data, size_t count, CommType type) override {
    if (size_ == 1) return;
    const MPI_Datatype t = mpi_type(type);
    const int n = mpi_count(count);
    Point p(beat_, SyncPoint::kAllReduce);
    // Two ranks: every element is v0 + v1 or v1 + v0, equal in IEEE arithmetic whatever the
    // algorithm, so rank order costs nothing extra there.
    if (order_ == ReduceOrder::kMpi || size_ == 2) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, t, MPI_SUM, comm_));
      return;
    }
    if (type == CommType::kF32) {
      gather_and_sum(static_cast<float*>(data), n, t, &all_f32_);
    } else {
      gather_and_sum(static_cast<int32_t*>(data), n, t, &all_i32_);
    }
  }

  void gather_to_root(const void* send, const std::vector<size_t>& counts, CommType type,
                      void* recv) override {
    LLAMA2_CHECK(static_cast<int>(counts.size()) == size_);
    const MPI_Datatype t = mpi_type(type);
    std::vector<int> n(size_), displs(size_);
    size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      n[r] = mpi_count(counts[r]);
      displs[r] = mpi_count(offset);
      offset += counts[r];
    }
    Point p(beat_, SyncPoint::kGather);
    MPI_CHECK(MPI_Gatherv(send, n[rank_], t, recv, n.data(), displs.data(), t, 0, comm_));
  }

  // Every MPI collective here has completed when it returns.
  void synchronize() override {}

 private:
  // Publishes the collective as a synchronizing point for its duration.
  struct Point {
    Point(StepHeartbeat* b, SyncPoint kind) : beat(b) {
      if (beat) beat->arrive(kind);
    }
    ~Point() {
      if (beat) beat->pass();
    }
    StepHeartbeat* beat;
  };

  // kRankOrder: data[i] = ((v0[i] + v1[i]) + v2[i]) + ... with v_r rank r's data: the same order
  // on every rank and at every count. all: scratch for [size_, n] elements, rank after rank.
  template <typename T>
  void gather_and_sum(T* data, int n, MPI_Datatype t, std::vector<T>* all) const {
    all->resize(static_cast<size_t>(n) * size_);
    MPI_CHECK(MPI_Allgather(data, n, t, all->data(), n, t, comm_));
    std::copy_n(all->data(), n, data);
    for (int r = 1; r < size_; ++r) {
      const T* part = all->data() + static_cast<size_t>(r) * n;
      for (int i = 0; i < n; ++i) data[i] += part[i];
    }
  }

  MPI_Comm comm_;
  StepHeartbeat* beat_;
  ReduceOrder order_;
  int rank_ = 0, size_ = 1;
  // kRankOrder's gathered values, reused from call to call.
  std::vector<float> all_f32_;
  std::vector<int32_t> all_i32_;
};

}  // namespace

size_t comm_type_bytes(CommType type) {
  switch (type) {
    case CommType::kF32:
    case CommType::kI32:
      return 4;
    case CommType::kF16:
    case CommType::kBF16:
      return 2;
  }
  LLAMA2_CHECK(false && "unknown CommType");
  return 0;
}

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, StepHeartbeat* beat, ReduceOrder order) {
  return std::make_unique<MpiComm>(comm, beat, order);
}

void agree_on_errors(MPI_Comm comm, const std::string& local_error) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = local_error.empty() ? INT_MAX : rank;
  int first = INT_MAX;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return;
  std::string msg = rank == first ? local_error : std::string();
  int len = static_cast<int>(msg.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, comm));
  msg.resize(len);
  MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, first, comm));
  throw ReportedError(msg);
}

#ifndef LLAMA2_HAVE_CUDA
// No NCCL communicator exists in a build without CUDA (rank/cuda/nccl_comm.cu defines it there).
int abort_device_collectives(std::chrono::milliseconds) {
  return 0;
}
#endif

}  // namespace llama2
