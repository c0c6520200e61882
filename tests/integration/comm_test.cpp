// The CPU backend's communicator (make_mpi_comm, rank/comm.h) against the Comm contract, under
// real mpirun at any rank count (ctest runs it at 2 and 3):
//
//   mpirun -np 3 llama2_comm_test
//
// all_reduce_sum of fp32 and int32 on odd lengths (0, 1, 7, 1001), in place, every rank getting
// the sum; gather_to_root of fp32 and int32 with a different count per rank (zero included) and
// vocab_slice_counts' counts, landing on rank 0 back to back in rank order, nullptr recv elsewhere;
// a type MPI does not move (fp16) refused with a message, on every rank alike. Values are small
// integers, so every sum is exact whatever order MPI adds in. The rank-order communicator
// (ReduceOrder::kRankOrder, --deterministic) passes the same checks, and on fp32 values whose sum
// depends on its order it gives ((v0 + v1) + v2) + ... bit for bit at every length (MPI's own
// order fails that at 3 ranks under Open MPI's ring all-reduce). Each rank collects what it found
// wrong; agree_on_errors turns any failure into one message and a non-zero exit of every rank.
#include "rank/comm.h"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "coordinator/cli/mpi_program.h"
#include "rank/logits_gather.h"

namespace {

using llama2::CommType;

// Element i of rank r's buffer in every case below.
template <typename T>
T value(int rank, size_t i) {
  return static_cast<T>(static_cast<int64_t>(i % 97) * (rank + 1) - rank);
}

template <typename T>
void check_all_reduce(llama2::Comm& comm, CommType type, size_t n, std::string* errors) {
  std::vector<T> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = value<T>(comm.rank(), i);
  comm.all_reduce_sum(data.data(), n, type);
  comm.synchronize();
  for (size_t i = 0; i < n; ++i) {
    T want = 0;
    for (int r = 0; r < comm.size(); ++r) want += value<T>(r, i);
    if (data[i] != want) {
      *errors += "all_reduce_sum n=" + std::to_string(n) + ": element " + std::to_string(i) +
                 " is " + std::to_string(data[i]) + ", want " + std::to_string(want) + "\n";
      return;
    }
  }
}

// fp32 values of very different sizes, so that the order of a sum shows in its bits.
float spread(int rank, size_t i) {
  const float base = static_cast<float>((i * 2654435761u + rank * 40503u) % 1000003u) / 7.0f;
  return rank % 2 ? base * 1e4f : -base * 1e-3f;
}

void check_rank_order(llama2::Comm& comm, size_t n, std::string* errors) {
  std::vector<float> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = spread(comm.rank(), i);
  comm.all_reduce_sum(data.data(), n, CommType::kF32);
  for (size_t i = 0; i < n; ++i) {
    float want = spread(0, i);
    for (int r = 1; r < comm.size(); ++r) want += spread(r, i);
    if (data[i] != want) {
      *errors += "rank-order all_reduce_sum n=" + std::to_string(n) + ": element " +
                 std::to_string(i) + " is not the sum in rank order\n";
      return;
    }
  }
}

template <typename T>
void check_gather(llama2::Comm& comm, CommType type, const std::vector<size_t>& counts,
                  std::string* errors) {
  const int rank = comm.rank();
  std::vector<T> send(counts[rank]);
  for (size_t i = 0; i < send.size(); ++i) send[i] = value<T>(rank, i);
  std::vector<T> want;
  for (int r = 0; r < comm.size(); ++r) {
    for (size_t i = 0; i < counts[r]; ++i) want.push_back(value<T>(r, i));
  }
  // A guard element past the end: the gather must write exactly sum(counts) elements.
  const T guard = static_cast<T>(-12345);
  std::vector<T> recv(want.size() + 1, guard);
  comm.gather_to_root(send.data(), counts, type, rank == 0 ? recv.data() : nullptr);
  comm.synchronize();
  if (rank != 0) return;
  std::string what = "gather_to_root counts";
  for (size_t c : counts) what += " " + std::to_string(c);
  if (recv.back() != guard) *errors += what + ": wrote past the sum of the counts\n";
  recv.pop_back();
  if (recv != want)
    *errors += what + ": rank 0 did not get the blocks back to back in rank order\n";
}

int run(int /*argc*/, char** /*argv*/, int rank, int size) {
  std::unique_ptr<llama2::Comm> comm = llama2::make_mpi_comm(MPI_COMM_WORLD);
  std::string errors;
  if (comm->rank() != rank || comm->size() != size) errors += "rank() or size() is wrong\n";
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
    check_all_reduce<float>(*comm, CommType::kF32, n, &errors);
    check_all_reduce<int32_t>(*comm, CommType::kI32, n, &errors);
  }
  // Odd counts, different on every rank, one rank sending nothing (rank 1, or rank 0 alone).
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r == 1 % size ? 0 : 3 + 2 * static_cast<size_t>(r);
  check_gather<float>(*comm, CommType::kF32, counts, &errors);
  check_gather<int32_t>(*comm, CommType::kI32, counts, &errors);
  // The vocabulary slices of 3 logit rows of a 1001-token vocabulary, as the runners gather them.
  llama2::ModelConfig config;
  config.vocab_size = 1001;
  config.hidden_size = 16 * size;
  config.num_heads = size;
  config.num_kv_heads = size;
  config.intermediate_size = 96 * size;
  std::vector<llama2::ShardPlan> shards;
  for (int r = 0; r < size; ++r) shards.push_back(llama2::make_shard_plan(config, size, r));
  check_gather<float>(*comm, CommType::kF32, llama2::vocab_slice_counts(shards, 3), &errors);
  try {
    uint16_t half = 0;
    comm->all_reduce_sum(&half, 1, CommType::kF16);
    if (size > 1) errors += "all_reduce_sum of fp16 over MPI was not refused\n";
  } catch (const llama2::Error& e) {
    if (std::string(e.what()).find("fp32 and int32") == std::string::npos) {
      errors += std::string("fp16 refused with an unclear message: ") + e.what() + "\n";
    }
  }
  std::unique_ptr<llama2::Comm> ordered =
      llama2::make_mpi_comm(MPI_COMM_WORLD, nullptr, llama2::ReduceOrder::kRankOrder);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{100000}}) {
    check_all_reduce<float>(*ordered, CommType::kF32, n, &errors);
    check_all_reduce<int32_t>(*ordered, CommType::kI32, n, &errors);
    check_rank_order(*ordered, n, &errors);
  }
  llama2::agree_on_errors(MPI_COMM_WORLD, errors);
  if (rank == 0) {
    std::printf(
        "comm: %d ranks: all_reduce_sum (MPI's order and rank order) and gather_to_root "
        "PASS\n",
        size);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_comm_test", argc, argv, run);
}
