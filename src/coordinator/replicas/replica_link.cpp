#include "coordinator/replicas/replica_link.h"

#include <climits>

#include "common/check.h"

namespace llama2 {
namespace {
constexpr int kTag = 16;  // the only tag on the link's own communicator
}

ReplicaLink::ReplicaLink(MPI_Comm comm) {
  MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

ReplicaLink::~ReplicaLink() {
  // Sends still in flight belong to a failure path: the process is about to end.
  for (Pending& p : sends_) {
    if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void ReplicaLink::send(int dest, std::string bytes) {
  reap();
  LLAMA2_CHECK(bytes.size() <= static_cast<size_t>(INT_MAX));
  sends_.push_back(Pending{std::move(bytes), MPI_REQUEST_NULL});
  Pending& p = sends_.back();
  MPI_CHECK(MPI_Isend(p.bytes.data(), static_cast<int>(p.bytes.size()), MPI_BYTE, dest, kTag, comm_,
                      &p.request));
}

bool ReplicaLink::poll(std::string* bytes, int* source) {
  reap();
  int flag = 0;
  MPI_Status st;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm_, &flag, &st));
  if (!flag) return false;
  int n = 0;
  MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
  bytes->resize(static_cast<size_t>(n));
  MPI_CHECK(MPI_Recv(bytes->data(), n, MPI_BYTE, st.MPI_SOURCE, kTag, comm_, MPI_STATUS_IGNORE));
  *source = st.MPI_SOURCE;
  return true;
}

void ReplicaLink::flush() {
  for (Pending& p : sends_) MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE));
  sends_.clear();
}

void ReplicaLink::reap() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? sends_.erase(it) : std::next(it);
  }
}

}  // namespace llama2
