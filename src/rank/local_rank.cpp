#include "rank/local_rank.h"

#include <cstdlib>
#include <string>

#include "common/check.h"

namespace llama2 {

#if defined(LLAMA2_HAVE_CUDA)
int cuda_device_count();  // src/rank/cuda/device_query.cu
#endif

namespace {
bool parse_nonneg(const char* s, int* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 20) return false;
  *out = static_cast<int>(v);
  return true;
}
}  // namespace

LocalRank resolve_local_rank(int shm_rank, int shm_size, const char* slurm_localid,
                             const char* ompi_local_rank) {
  LocalRank r{shm_rank, shm_size, ""};
  for (auto [name, value] : {std::pair{"SLURM_LOCALID", slurm_localid},
                             std::pair{"OMPI_COMM_WORLD_LOCAL_RANK", ompi_local_rank}}) {
    int v = 0;
    if (value != nullptr && (!parse_nonneg(value, &v) || v != shm_rank)) {
      r.note += (r.note.empty() ? "" : "; ") + std::string(name) + "=" + value +
                " disagrees with the MPI shared-memory rank " + std::to_string(shm_rank) +
                "; using the MPI value";
    }
  }
  return r;
}

LocalRank read_local_rank(MPI_Comm ranks) {
  int rank = 0, shm_rank = 0, shm_size = 1;
  MPI_CHECK(MPI_Comm_rank(ranks, &rank));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(ranks, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &shm_rank));
  MPI_CHECK(MPI_Comm_size(node, &shm_size));
  MPI_CHECK(MPI_Comm_free(&node));
  return resolve_local_rank(shm_rank, shm_size, std::getenv("SLURM_LOCALID"),
                            std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"));
}

int visible_cuda_devices() {
#if defined(LLAMA2_HAVE_CUDA)
  return cuda_device_count();
#else
  return 0;
#endif
}

int device_for_local_rank(int local_rank, int devices) {
  return devices > 0 ? local_rank % devices : -1;
}

}  // namespace llama2
