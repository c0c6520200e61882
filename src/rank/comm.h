// The small communication interface the per-rank math is given (tensor parallelism as a thin
// layer): the model code never asks how the bytes move. MPI backs it on the CPU backend; NCCL
// will back it on GPUs.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llama2 {

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

// Comm over an MPI communicator (not owned).
std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm);

// Collective error agreement: every rank passes its own error text ("" if fine). If any rank
// failed, every rank throws ReportedError carrying the lowest failing rank's message, so the
// message is printed once (by rank 0) and every rank exits non-zero instead of one rank hanging
// in a later collective.
class ReportedError : public std::runtime_error {
 public:
  explicit ReportedError(const std::string& what) : std::runtime_error(what) {}
};
void agree_on_errors(MPI_Comm comm, const std::string& local_error);

// The MPI step-plan broadcast from rank 0: the wire length, then the int32 body.
void broadcast_words(MPI_Comm comm, std::vector<int32_t>* words);

}  // namespace llama2
