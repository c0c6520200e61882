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
  std::string model_dir;  // config.json, tokenizer.model and the weights
  std::string synthetic;  // "7b" | "13b" | "70b": official shape, random weights on the
                          // GPUs; model_dir then only provides tokenizer.model
  std::string backend = "auto";
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  int block_size = 16;
  bool kv_blocks_given = false;  // prepare's block count is the user's --kv-cache-blocks; else
                                 // the cuda backend sizes the cache from GPU memory
  double gpu_memory_fraction = 0.9;
  bool cuda_graphs = true;
  int cpu_threads = 0;      // 0: automatic (see cpu_threads_for_rank)
  int max_batch = 1;        // sequences per step
  int prefill_chunk = 512;  // prompt tokens per step
  int max_seq_len = 0;      // 0: the model's max_position_embeddings
};

// Collective. `prepare` runs on rank 0 after the tokenizer is loaded; it validates the command's
// inputs (throwing Error) and returns the number of KV blocks the CPU backend allocates (and
// any backend when opts.kv_blocks_given). Session::num_blocks is what the engine allocated.
// Errors anywhere become ReportedError on every rank.
Session open_session(const SessionOptions& opts, int rank,
                     const std::function<int(const ModelConfig&, const Tokenizer&)>& prepare);

}  // namespace llama2
