// Pieces every MPI subcommand shares: sampling flags, usage errors, and rank-0-only printing.
#pragma once

#include <cstdint>
#include <cxxopts.hpp>
#include <string>

#include "common/sampling_params.h"
#include "coordinator/session.h"

namespace llama2 {

// Exit code for usage errors (unknown flag, missing value), as the CLI promises.
constexpr int kExitUsage = 2;

// A fresh 64-bit seed for requests that did not give one (reported back so runs can be repeated).
uint64_t random_seed();

// Adds the flags every engine subcommand shares: -m/--model, --backend, --dtype, --block-size,
// --gpu-memory-fraction, --synthetic, --cpu-threads, --no-cuda-graphs, -q/--quiet, -h/--help
// (group "Engine").
void add_engine_options(cxxopts::Options& opts);

// The engine flags as SessionOptions (max_batch and prefill_chunk are the command's to set).
// UsageError (with `help`) for a --gpu-memory-fraction outside (0, 1] or a negative --cpu-threads.
SessionOptions session_options_from(const cxxopts::ParseResult& r, const std::string& help);

// Adds --temperature, --top-p, --top-k, --repetition-penalty, --max-new-tokens, --seed, --stop,
// --ignore-eos with SamplingParams' defaults.
void add_sampling_options(cxxopts::Options& opts);
// Reads them back (no range validation: validate_sampling does that with the prompt length).
SamplingParams sampling_from_options(const cxxopts::ParseResult& r);

// Thrown for usage errors; main prints the message and the subcommand's help, exits 2.
class UsageError : public std::runtime_error {
 public:
  UsageError(const std::string& what, std::string help)
      : std::runtime_error(what), help_(std::move(help)) {}
  const std::string& help() const { return help_; }

 private:
  std::string help_;
};

// Parses argv with `opts`; unknown options, missing values, bad numbers and stray positional
// arguments become UsageError.
cxxopts::ParseResult parse_or_usage(cxxopts::Options& opts, int argc, char** argv);

}  // namespace llama2
