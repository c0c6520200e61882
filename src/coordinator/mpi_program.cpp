#include "coordinator/mpi_program.h"

#include <mpi.h>

#include <iostream>

#include "common/check.h"
#include "coordinator/cli_common.h"
#include "rank/comm.h"

namespace llama2 {

int run_mpi_program(const std::string& prog, int argc, char** argv,
                    const std::function<int(int, char**, int, int)>& fn) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_error_rank(rank);
  int code = 1;
  try {
    code = fn(argc, argv, rank, size);
  } catch (const UsageError& e) {
    if (rank == 0) std::cerr << prog << ": " << e.what() << "\n\n" << e.help() << std::endl;
    code = kExitUsage;
  } catch (const ReportedError& e) {
    if (rank == 0) std::cerr << prog << ": error: " << e.what() << std::endl;
    code = 1;
  } catch (const std::exception& e) {
    std::cerr << prog << ": rank " << rank << ": fatal: " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

}  // namespace llama2
