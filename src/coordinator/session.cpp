#include "coordinator/session.h"

#include <chrono>

#include "common/capacity.h"
#include "common/check.h"

namespace llama2 {

Session open_session(const SessionOptions& opts, int rank,
                     const std::function<int(const ModelConfig&, const Tokenizer&)>& prepare) {
  const auto t0 = std::chrono::steady_clock::now();
  Session s;
  s.block_size = opts.block_size;
  std::string error;
  try {
    s.config =
        opts.synthetic.empty() ? load_model_config(opts.model_dir) : preset_config(opts.synthetic);
    if (opts.block_size < 1 || opts.block_size > 1024) {
      throw Error("--block-size must be in [1, 1024] (got " + std::to_string(opts.block_size) +
                  ")");
    }
    if (rank == 0) {
      s.tokenizer = std::make_unique<Tokenizer>(opts.model_dir + "/tokenizer.model");
      if (s.tokenizer->vocab_size() > s.config.vocab_size) {
        throw Error(opts.model_dir + "/tokenizer.model has " +
                    std::to_string(s.tokenizer->vocab_size()) +
                    " pieces but config.json vocab_size is " + std::to_string(s.config.vocab_size));
      }
      s.num_blocks = prepare(s.config, *s.tokenizer);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(MPI_COMM_WORLD, error);
  MPI_CHECK(MPI_Bcast(&s.num_blocks, 1, MPI_INT, 0, MPI_COMM_WORLD));

  EngineSpec spec;
  spec.model_dir = opts.model_dir;
  spec.synthetic = opts.synthetic;
  spec.backend = opts.backend;
  spec.dtype = opts.dtype;
  spec.kv_cache_dtype = opts.kv_cache_dtype;
  spec.kv = KvCacheSpec{opts.block_size, opts.kv_blocks_given ? s.num_blocks : 0};
  spec.cpu_default_blocks = s.num_blocks;
  spec.gpu_memory_fraction = opts.gpu_memory_fraction;
  spec.cuda_graphs = opts.cuda_graphs;
  spec.cpu_threads = opts.cpu_threads;
  spec.max_batch = opts.max_batch;
  spec.max_step_tokens = opts.max_batch + opts.prefill_chunk;
  spec.max_seq_len = opts.max_seq_len;
  s.engine = std::make_unique<RankEngine>(spec, s.config, MPI_COMM_WORLD);
  s.num_blocks = s.engine->kv().num_blocks;
  s.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace llama2
