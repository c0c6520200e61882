// The small communication interface the per-rank math is given (tensor parallelism as a thin
// layer): the model code never asks how the bytes move. MPI backs it on the CPU backend; NCCL
// will back it on GPUs.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama2 {

class StepHeartbeat;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data: [n] fp32, summed element-wise over all ranks, result on every rank.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // Concatenates every rank's `send` ([counts[r]] floats from rank r) on rank 0 in rank order;
  // recv ([sum counts]) is only written on rank 0.
  virtual void gather_to_root(const float* send, const std::vector<int>& counts, float* recv) = 0;
  // The same for int32 values (token ids of the sampling candidates).
  virtual void gather_to_root(const int32_t* send, const std::vector<int>& counts,
                              int32_t* recv) = 0;
};

// Comm over an MPI communicator (not owned). With `beat`, each collective is published as a
// synchronizing point (rank/step_heartbeat.h) so that a stall can name the rank it waits for.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, StepHeartbeat* beat = nullptr);

// Collective error agreement: every rank passes its own error text ("" if fine). If any rank
// failed, every rank throws ReportedError carrying the lowest failing rank's message, so the
// message is printed once (by rank 0) and every rank exits non-zero instead of one rank hanging
// in a later collective.
class ReportedError : public std::runtime_error {
 public:
  explicit ReportedError(const std::string& what) : std::runtime_error(what) {}
};
void agree_on_errors(MPI_Comm comm, const std::string& local_error);

// How step plans travel from rank 0 to the other ranks: one point-to-point message per worker on
// a communicator of its own (the length comes with the message, so one message per step).
//
// Why not MPI_Bcast: a worker blocked in MPI_Bcast waits for the next step by busy-polling (Open
// MPI), which kept an idle worker at ~45% of a core. A worker here polls MPI_Iprobe: flat out for
// kSpin of its own CPU time after its previous step (decode steps follow each other within that,
// so a busy server sees the same busy-poll as before), then with sleeps growing from kFirstNap to
// kMaxNap, so an idle worker costs a few percent of a core at most (measured: see the README) and
// the first step after a pause starts at most about kMaxNap late.
class PlanChannel {
 public:
  static constexpr std::chrono::microseconds kSpin{20000};
  static constexpr std::chrono::microseconds kFirstNap{50};
  static constexpr std::chrono::microseconds kMaxNap{1000};

  // Collective over `comm` (duplicates it; freed by the destructor, also collectively).
  PlanChannel(MPI_Comm comm, StepHeartbeat* beat);
  ~PlanChannel();
  PlanChannel(const PlanChannel&) = delete;
  PlanChannel& operator=(const PlanChannel&) = delete;

  // Rank 0: hands `words` to every other rank; returns once the sends have completed.
  void send(const std::vector<int32_t>& words);
  // Other ranks: waits for rank 0's next plan as described above and stores it in `words`.
  void receive(std::vector<int32_t>* words);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  StepHeartbeat* beat_ = nullptr;
  std::vector<MPI_Request> requests_;
};

// Asks every NCCL communicator of this process to abort and waits up to `wait` until they have:
// the thread that drives a communicator (the one waiting for its stream) calls ncclCommAbort
// itself, since NCCL calls on one communicator may not run on two threads at once, and then never
// returns (the caller is about to end the process). Returns how many aborted; 0 in a build
// without CUDA, at TP 1 (no communicator) or when no thread was waiting on one.
int abort_device_collectives(std::chrono::milliseconds wait);

}  // namespace llama2
