// Which GPU a rank drives: local rank (among ranks on the same node) modulo the visible devices.
#pragma once

#include <mpi.h>

#include <string>

namespace llama2 {

struct LocalRank {
  int local_rank = 0;  // index among the ranks sharing this node
  int local_size = 1;  // ranks on this node
  std::string note;    // non-empty when a launcher variable disagreed with MPI
};

// `shm_rank`/`shm_size` come from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), the authority.
// SLURM_LOCALID (srun) and OMPI_COMM_WORLD_LOCAL_RANK (mpirun) are cross-checked; pass nullptr
// when unset. A disagreement (e.g. a wrapper that renumbered tasks) keeps MPI's value and says so.
LocalRank resolve_local_rank(int shm_rank, int shm_size, const char* slurm_localid,
                             const char* ompi_local_rank);

// The one place a rank's local rank is read. Collective over `ranks` (the ranks that share the
// node's GPUs: every engine rank of the job, whatever replica they belong to): this rank's place
// among those of `ranks` on its node (MPI_Comm_split_type), cross-checked with the launcher's
// variables (resolve_local_rank).
LocalRank read_local_rank(MPI_Comm ranks);

// Number of CUDA devices this process can see (0 without a CUDA build or without a driver).
int visible_cuda_devices();
// Device for a local rank: local_rank % devices (ranks beyond the devices share them round-robin).
int device_for_local_rank(int local_rank, int devices);

}  // namespace llama2
