// main() of every MPI program (the llama2 CLI's MPI subcommands, the benchmarks, the reference
// test): MPI start-up and shutdown and one error policy, so that no failure can leave a rank
// waiting in a collective.
#pragma once

#include <functional>
#include <string>

namespace llama2 {

// MPI_Init_thread asking for MPI_THREAD_FUNNELED, the level the program relies on: rank 0 runs
// threads besides the one that calls MPI (the socket I/O thread, the step watchdog, the CPU
// backend's pool), and none of them ever calls MPI. In particular the watchdog ends a stalled job
// with _exit, not MPI_Abort (coordinator/serving/watchdog.h), so nothing needs MPI_THREAD_MULTIPLE
// and its locking on every call. Aborts the job with a message if the library offers less.
void init_mpi(int* argc, char*** argv);

// init_mpi, fn(argc, argv, rank, size), MPI_Finalize; returns fn's exit code. A UsageError (every
// rank parsed the same argv) prints "<usage_prog>: " its message and the help once and returns
// kExitUsage; a ReportedError (raised on every rank alike) prints "<prog>: error: ..." once and
// returns 1; any other exception is known to this rank only, so it prints "<prog>: rank R: fatal:
// ..." and aborts the whole job. usage_prog: prog when empty (the llama2 CLI gives the subcommand's
// name, which its help's usage line goes with).
int run_mpi_program(const std::string& prog, int argc, char** argv,
                    const std::function<int(int argc, char** argv, int rank, int size)>& fn,
                    const std::string& usage_prog = "");

}  // namespace llama2
