// The subcommands main() dispatches to. MPI subcommands run after MPI_Init on every rank and
// return the process exit code; they throw UsageError / Error / ReportedError on failure.
#pragma once

namespace llama2 {

int run_generate(int argc, char** argv, int rank);
int run_batch(int argc, char** argv, int rank);
int run_serve(int argc, char** argv, int rank);
int run_make_test_model(int argc, char** argv);
// No MPI: a model's projections written as an FP8 checkpoint (tools/convert_fp8.cpp).
int run_convert_fp8(int argc, char** argv);
// No MPI: a model's projections written as a 4-bit AWQ or GPTQ checkpoint
// (tools/quantize_int4.cpp).
int run_quantize(int argc, char** argv);
// No MPI: a SentencePiece tokenizer trained on a corpus (tools/train_tokenizer.h).
int run_train_tokenizer(int argc, char** argv);
// Teacher-forced log-likelihood of a text file (sliding windows), under mpirun.
int run_perplexity(int argc, char** argv, int rank);
// No MPI: capacity planning from config.json or a preset (exit 0 fits, 1 does not fit).
int run_plan(int argc, char** argv);
// No MPI: one request to a running `llama2 serve` (exit 0 done, 1 error event or no server).
int run_client(int argc, char** argv);

}  // namespace llama2
