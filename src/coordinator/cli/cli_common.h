// Pieces every subcommand shares: the command-line prologue (parse, --help, required flags), the
// engine flags and the EngineConfig built from them, each command's step-shape defaults, sampling
// flags, usage errors.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cxxopts.hpp>
#include <initializer_list>
#include <memory>
#include <string>

#include "common/engine_config.h"
#include "common/sampling_params.h"
#include "coordinator/cli/session.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/step_log.h"

namespace llama2 {

// Exit code for usage errors (unknown flag, missing value), as the CLI promises.
constexpr int kExitUsage = 2;

// A fresh 64-bit seed for requests that did not give one (reported back so runs can be repeated).
uint64_t random_seed();

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

// A parsed command line. `help` is the help text followed by the command's epilog.
struct CommandLine {
  cxxopts::ParseResult args;
  std::string help;
  bool help_requested = false;  // --help was given (and printed): the command returns 0
};
// Every command's prologue: parse_or_usage; --help printed (when `print_help`: rank 0 of an MPI
// command) and help_requested set; otherwise each `required` entry ("model", or "socket PATH" to
// name the value in the message) must be given, else UsageError "--model is required".
CommandLine parse_command(cxxopts::Options& opts, int argc, char** argv,
                          std::initializer_list<const char*> required, const char* epilog = "",
                          bool print_help = true);
// UsageError `message` unless exactly one of `flags` is given.
void require_one_of(const CommandLine& cl, std::initializer_list<const char*> flags,
                    const std::string& message);

// Each engine command's step shape: sequences per step and prompt tokens per step (the engine
// sizes its activations for max_batch + prefill_chunk tokens). The table in cli_common.cpp is the
// one place these defaults live; batch and serve expose them as --max-batch-size and
// --prefill-chunk, perplexity its chunk as --chunk.
struct StepDefaults {
  int max_batch;
  int prefill_chunk;
};
extern const StepDefaults kGenerateSteps, kBatchSteps, kServeSteps, kPerplexitySteps;

// Adds the flags every engine subcommand shares: -m/--model, --backend, --dtype,
// --kv-cache-dtype, --block-size, --gpu-memory-fraction, --synthetic, --cpu-threads,
// --no-cuda-graphs, -q/--quiet, -h/--help (group "Engine").
void add_engine_options(cxxopts::Options& opts);

// Adds --prefix-caching on|off and --no-prefix-caching (batch and serve; group "Engine").
void add_prefix_caching_options(cxxopts::Options& opts);

// Adds --deterministic (generate, batch, serve; group "Engine"): EngineConfig::deterministic.
void add_deterministic_option(cxxopts::Options& opts);

// The engine flags' usage checks, on every rank before anything else: UsageError for a
// --gpu-memory-fraction outside (0, 1] or a --cpu-threads outside 0..1024.
void check_engine_flags(const CommandLine& cl);
// The EngineConfig of the engine flags, `steps` (overridden by --max-batch-size and
// --prefill-chunk where the command has them) and the environment's tuning knobs. Error naming
// the flag and its allowed values for a bad backend, dtype, KV dtype, block size or block count.
EngineConfig engine_config_from(const cxxopts::ParseResult& args, const StepDefaults& steps);
// --tp T (serve, batch): N/T data-parallel replicas of T ranks (coordinator/replicas/layout.h).
void add_replica_options(cxxopts::Options& opts);
// check_engine_flags, then a SessionStart that has built the EngineConfig and loaded the model
// (session.h) and planned the replica layout from --tp when the command has it; the command
// continues with its own steps and open_engine.
SessionStart start_session(const CommandLine& cl, const StepDefaults& steps, int rank);

// The batch scheduler's options for an engine opened with `cfg`.
SchedulerOptions scheduler_options(const EngineConfig& cfg);

// Adds --temperature, --top-p, --top-k, --repetition-penalty, --presence-penalty,
// --frequency-penalty, --max-new-tokens, --seed, --stop,
// --ignore-eos with SamplingParams' defaults.
void add_sampling_options(cxxopts::Options& opts);
// Reads them back (no range validation: validate_sampling does that with the prompt length).
SamplingParams sampling_from_options(const cxxopts::ParseResult& r);
// Error with validate_sampling's message when the command-line sampling defaults are invalid on
// their own (a 1-token prompt stands in for any prompt).
void check_sampling_defaults(const SamplingParams& defaults, const ModelConfig& model);
// --speculative and --speculative-max-batch (generate, batch, serve; group "Speculative
// decoding"); engine_config_from reads them into EngineConfig::speculative.
void add_speculative_options(cxxopts::Options& opts);
// --generation-config auto|ignore (generate, batch, serve).
void add_generation_config_option(cxxopts::Options& opts);
// Rank 0, after load_model: `defaults` (sampling_from_options) with the model's
// generation_config.json values (common/generation_config.h) for every sampling flag not given on
// the command line, unless --generation-config ignore; adds the start-up note saying which
// defaults apply. Error naming the file and key for a bad value.
void apply_generation_config(const cxxopts::ParseResult& r, SessionStart* start,
                             SamplingParams* defaults);

}  // namespace llama2
