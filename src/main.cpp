// llama2: the command-line entry point. MPI subcommands start MPI on every rank; errors become
// exactly one message (from rank 0) and a non-zero exit of every rank.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "coordinator/cli/mpi_program.h"

namespace {

const char* kUsage =
    "llama2: LLaMA-2 inference across GPUs, one MPI rank per GPU\n"
    "\n"
    "usage: mpirun -np N llama2 <command> [options]      (N = tensor-parallel degree)\n"
    "       llama2 <command> --help\n"
    "\n"
    "commands:\n"
    "  generate          generate text for one prompt (streams to stdout)\n"
    "  batch             run a JSONL file of prompts as one job (resumable)\n"
    "  serve             serve generations on a Unix socket (docs/PROTOCOL.md)\n"
    "  perplexity        teacher-forced log-likelihood of a text file (sliding windows)\n"
    "  make-test-model   write a small random model directory with its own tokenizer\n"
    "  convert-fp8       write a model's projections as an FP8 checkpoint (F8_E4M3 + scales)\n"
    "  quantize          write a model's projections as a 4-bit AWQ or GPTQ checkpoint (RTN)\n"
    "  train-tokenizer   train a SentencePiece tokenizer (Llama conventions) on a corpus\n"
    "  plan              capacity planner: memory per GPU for a TP degree (no MPI needed)\n"
    "  client            send one request to a running `llama2 serve` (no MPI needed)\n";

// Subcommands that run on every rank of an MPI job; argv[0] is the command name.
int run_mpi_command(int (*fn)(int, char**, int), int argc, char** argv) {
  const std::string name = argv[0];
  return llama2::run_mpi_program(
      "llama2", argc, argv, [fn](int ac, char** av, int rank, int) { return fn(ac, av, rank); },
      name);
}

// Subcommands that run without MPI in a single process; argv[0] is the command name.
int run_local_command(int (*fn)(int, char**), int argc, char** argv) {
  const std::string name = std::string("llama2 ") + argv[0];
  try {
    return fn(argc, argv);
  } catch (const llama2::UsageError& e) {
    std::cerr << name << ": " << e.what() << "\n\n" << e.help() << std::endl;
    return llama2::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? llama2::kExitUsage : 0;
  }
  const std::string cmd = argv[1];
  // Subcommands see argv shifted by one so that cxxopts prints "llama2 <cmd>" usage.
  char** sub_argv = argv + 1;
  const int sub_argc = argc - 1;
  if (cmd == "generate") return run_mpi_command(llama2::run_generate, sub_argc, sub_argv);
  if (cmd == "batch") return run_mpi_command(llama2::run_batch, sub_argc, sub_argv);
  if (cmd == "serve") return run_mpi_command(llama2::run_serve, sub_argc, sub_argv);
  if (cmd == "make-test-model") {
    return run_local_command(llama2::run_make_test_model, sub_argc, sub_argv);
  }
  if (cmd == "convert-fp8") return run_local_command(llama2::run_convert_fp8, sub_argc, sub_argv);
  if (cmd == "quantize") return run_local_command(llama2::run_quantize, sub_argc, sub_argv);
  if (cmd == "perplexity") return run_mpi_command(llama2::run_perplexity, sub_argc, sub_argv);
  if (cmd == "train-tokenizer") {
    return run_local_command(llama2::run_train_tokenizer, sub_argc, sub_argv);
  }
  if (cmd == "plan") return run_local_command(llama2::run_plan, sub_argc, sub_argv);
  if (cmd == "client") return run_local_command(llama2::run_client, sub_argc, sub_argv);
  std::cerr << "llama2: unknown command '" << cmd << "'\n\n" << kUsage;
  return llama2::kExitUsage;
}
