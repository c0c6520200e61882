// The MPI transport between the front and the replica leaders: whole buffers (replica_wire.h) as
// MPI_BYTE messages on a communicator of their own (the front and the leaders; the front is its
// rank 0). Every call is non-blocking, because both sides must keep stepping their engines:
// sends are MPI_Isend, kept until complete (two ranks each blocked in a large MPI_Send to the
// other would deadlock), and receiving is MPI_Iprobe + MPI_Recv of a message already there.
// Only the thread that calls every other MPI function of the process may use it
// (MPI_THREAD_FUNNELED, cli/mpi_program.h).
#pragma once

#include <mpi.h>

#include <list>
#include <string>

namespace llama2 {

class ReplicaLink {
 public:
  // `comm` is duplicated (collective over it) and freed by the destructor (not collectively: it
  // may run on a failure path).
  explicit ReplicaLink(MPI_Comm comm);
  ~ReplicaLink();
  ReplicaLink(const ReplicaLink&) = delete;
  ReplicaLink& operator=(const ReplicaLink&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Starts sending `bytes` to `dest`; returns at once.
  void send(int dest, std::string bytes);
  // A message that has arrived (from any rank): true with its bytes and source, false when none
  // is there now.
  bool poll(std::string* bytes, int* source);
  // Waits until every send has completed.
  void flush();

 private:
  void reap();  // frees the buffers of completed sends
  struct Pending {
    std::string bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::list<Pending> sends_;  // list: MPI holds pointers into each buffer until it completes
};

}  // namespace llama2
