// main() of the MPI programs other than the llama2 CLI (benchmarks, the reference test): MPI
// start-up and shutdown and one error policy, so that no failure can leave a rank waiting in a
// collective.
#pragma once

#include <functional>
#include <string>

namespace llama2 {

// MPI_Init, fn(argc, argv, rank, size), MPI_Finalize; returns fn's exit code. A UsageError (every
// rank parsed the same argv) prints its message and the help once and returns kExitUsage; a
// ReportedError (raised on every rank alike) prints once and returns 1; any other exception is
// known to this rank only, so it prints "<prog>: rank R: fatal: ..." and aborts the whole job.
int run_mpi_program(const std::string& prog, int argc, char** argv,
                    const std::function<int(int argc, char** argv, int rank, int size)>& fn);

}  // namespace llama2
