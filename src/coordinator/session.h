// Bringing up the engine for an MPI subcommand: every rank reads the config, rank 0 loads the
// tokenizer and prepares its inputs, all ranks agree on errors before any weight is loaded, then
// the KV-cache size decided by rank 0 is broadcast and every rank loads its shard.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/model_config.h"
#include "coordinator/tokenizer.h"
#include "rank/engine.h"

namespace llama2 {

struct Session {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;  // rank 0 only
  std::unique_ptr<RankEngine> engine;
  int block_size = 16;
  int num_blocks = 0;
  double load_s = 0.0;  // from open_session() to a loaded engine
};

struct SessionOptions {
  std::string model_dir;
  std::string backend = "auto";
  int block_size = 16;
};

// Collective. `prepare` runs on rank 0 after the tokenizer is loaded; it validates the command's
// inputs (throwing Error) and returns the number of KV blocks to allocate. Errors anywhere
// become ReportedError on every rank.
Session open_session(const SessionOptions& opts, int rank,
                     const std::function<int(const ModelConfig&, const Tokenizer&)>& prepare);

}  // namespace llama2
