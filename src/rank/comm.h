// The one communication interface of a tensor-parallel group (tensor parallelism as a thin
// layer): both backends' per-rank math reduces and gathers through a Comm and never asks how the
// bytes move. One implementation per backend, each behind this interface:
//   - MpiComm (make_mpi_comm below, rank/comm_mpi.cpp), the CPU backend: host buffers, MPI
//     collectives, each one complete when the call returns;
//   - NcclComm (rank/cuda/nccl_comm.h), the CUDA backend: buffers on this rank's GPU, NCCL (or the
//     one-shot NVLink kernel for small all-reduces), enqueued on the CUDA stream the communicator
//     was made with; synchronize() waits for them and turns a failed peer into an Error.
// The process-level MPI parts below (agree_on_errors, PlanChannel) are not collectives of the
// tensor-parallel math: they move plans and errors between ranks, on every backend, over MPI.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace llama2 {

class StepHeartbeat;

// Element types a collective moves. MpiComm takes kF32 and kI32 (the CPU backend is fp32).
enum class CommType { kF32, kI32, kF16, kBF16 };
size_t comm_type_bytes(CommType type);

// The residual add and RMSNorm that follow a layer's reduction, for all_reduce_add_rmsnorm.
// Pointers live where the communicator's buffers do and hold elements of the reduced type.
struct AddRmsNorm {
  void* residual = nullptr;      // x [rows, hidden]: x += the reduced sum, in place
  const void* weight = nullptr;  // [hidden] norm weight
  void* out = nullptr;           // [rows, hidden]: rmsnorm(x) * weight
  int rows = 0, hidden = 0;
  float eps = 0.f;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data: [count] elements of `type`, summed element-wise over the group in place; every rank
  // gets the sum. One rank: nothing to do.
  virtual void all_reduce_sum(void* data, size_t count, CommType type) = 0;

  // send: [counts[rank()]] elements of `type` (counts: one entry per rank, the same on every
  // rank). Rank 0 receives every rank's send back to back in rank order in recv ([sum of counts]);
  // recv is only written on rank 0 (elsewhere it may be nullptr).
  virtual void gather_to_root(const void* send, const std::vector<size_t>& counts, CommType type,
                              void* recv) = 0;

  // Returns once every collective issued so far has completed and its results can be read.
  virtual void synchronize() = 0;

  // The fusion point for communication + compute. After a row-parallel projection (O, down) each
  // rank holds partial [rows, hidden]; the model then needs x += the sum of the partials and the
  // next RMSNorm of x. The CUDA runner offers both here first. A communicator that can do them in
  // one pass does so and returns true: e.g. the one-shot all-reduce kernel extended to add the
  // peers' partials into x and normalize each row before writing it back (one launch and one trip
  // through memory less per reduction, 64 per 7B token: the likely way to the two-GPU batch-1
  // target). It plugs in by overriding this in NcclComm for the types and sizes it handles; the
  // answer must depend only on (type, rows, hidden, alignment), the same on every rank, and be
  // decided before anything is launched. This default returns false having done nothing, and the
  // runner then calls all_reduce_sum and its own add_rmsnorm kernel. The CPU runner does not ask:
  // it reduces between thread-pool stages and adds per row group in the next stage.
  virtual bool all_reduce_add_rmsnorm(void* partial, CommType type, const AddRmsNorm& norm) {
    (void)partial, (void)type, (void)norm;
    return false;
  }
};

// The order in which MpiComm's all_reduce_sum adds the ranks' values.
//  kMpi:       MPI_Allreduce's. Open MPI picks its algorithm (recursive doubling, ring, ...) by
//              message size and rank count, and with it the order each element is summed in: at
//              3 or more ranks a row's sum can change in its last bits with the step's row count.
//  kRankOrder: every rank gathers all the ranks' values (MPI_Allgather) and adds them in rank
//              order, ((v0 + v1) + v2) + ..., at every size: --deterministic (issue 41). It
//              moves size x count elements to every rank instead of about 2 x count. At 2 ranks
//              it is MPI_Allreduce (a sum of two does not depend on its order).
enum class ReduceOrder { kMpi, kRankOrder };

// Comm over an MPI communicator (not owned). With `beat`, each collective is published as a
// synchronizing point (rank/step_heartbeat.h) so that a stall can name the rank it waits for.
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, StepHeartbeat* beat = nullptr,
                                    ReduceOrder order = ReduceOrder::kMpi);

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
// kMaxNap, so an idle worker costs a few percent of a core at most (measured: docs/serving.md) and
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
  // The same with each rank's own words: per_rank[r] for rank r (per_rank[0] is not sent).
  void send(const std::vector<std::vector<int32_t>>& per_rank);
  // Other ranks: waits for rank 0's next plan as described above and stores it in `words`.
  void receive(std::vector<int32_t>* words);

 private:
  template <typename WordsOf>
  void send_each(const WordsOf& words_of);

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
