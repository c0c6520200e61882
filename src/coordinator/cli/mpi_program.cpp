#include "coordinator/cli/mpi_program.h"

#include <mpi.h>

#include <iostream>

#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "rank/comm.h"

namespace llama2 {

void init_mpi(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (provided < MPI_THREAD_FUNNELED) {
    std::cerr << "llama2: the MPI library provides thread level " << provided
              << "; llama2 needs MPI_THREAD_FUNNELED (" << MPI_THREAD_FUNNELED
              << ": helper threads that never call MPI)" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int run_mpi_program(const std::string& prog, int argc, char** argv,
                    const std::function<int(int, char**, int, int)>& fn,
                    const std::string& usage_prog) {
  init_mpi(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_error_rank(rank);
  int code = 1;
  try {
    code = fn(argc, argv, rank, size);
  } catch (const UsageError& e) {
    // Every rank parsed the same argv, so every rank is here: no collective can hang.
    if (rank == 0) {
      std::cerr << (usage_prog.empty() ? prog : usage_prog) << ": " << e.what() << "\n\n"
                << e.help() << std::endl;
    }
    code = kExitUsage;
  } catch (const ReportedError& e) {
    if (rank == 0) std::cerr << prog << ": error: " << e.what() << std::endl;
    code = 1;
  } catch (const std::exception& e) {
    // Only this rank knows: the others may be inside a collective, so abort the whole job.
    std::cerr << prog << ": rank " << rank << ": fatal: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

}  // namespace llama2
