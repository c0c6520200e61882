#include <climits>

#include "common/check.h"
#include "rank/comm.h"
#include "rank/step_heartbeat.h"

namespace llama2 {
namespace {

class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, StepHeartbeat* beat) : comm_(comm), beat_(beat) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, size_t n) override {
    if (size_ == 1) return;
    LLAMA2_CHECK(n <= static_cast<size_t>(INT_MAX));
    Point p(beat_, SyncPoint::kAllReduce);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_));
  }

  void gather_to_root(const float* send, const std::vector<int>& counts, float* recv) override {
    gather(send, counts, recv, MPI_FLOAT);
  }
  void gather_to_root(const int32_t* send, const std::vector<int>& counts, int32_t* recv) override {
    gather(send, counts, recv, MPI_INT32_T);
  }

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

  void gather(const void* send, const std::vector<int>& counts, void* recv, MPI_Datatype type) {
    LLAMA2_CHECK(static_cast<int>(counts.size()) == size_);
    std::vector<int> displs(size_, 0);
    for (int r = 1; r < size_; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    Point p(beat_, SyncPoint::kGather);
    MPI_CHECK(
        MPI_Gatherv(send, counts[rank_], type, recv, counts.data(), displs.data(), type, 0, comm_));
  }

  MPI_Comm comm_;
  StepHeartbeat* beat_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, StepHeartbeat* beat) {
  return std::make_unique<MpiComm>(comm, beat);
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
