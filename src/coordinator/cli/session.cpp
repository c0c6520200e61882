#include "coordinator/cli/session.h"

#include <chrono>

#include "common/capacity.h"
#include "common/check.h"

namespace llama2 {

SessionStart::SessionStart(int rank) : rank_(rank), t0_(std::chrono::steady_clock::now()) {}

void SessionStart::load_model() {
  step([&] {
    model = cfg.synthetic.empty() ? load_model_config(cfg.model_dir) : preset_config(cfg.synthetic);
    if (rank_ != 0) return;
    tokenizer = std::make_unique<Tokenizer>(cfg.model_dir + "/tokenizer.model");
    if (tokenizer->vocab_size() > model.vocab_size) {
      throw Error(cfg.model_dir + "/tokenizer.model has " +
                  std::to_string(tokenizer->vocab_size()) +
                  " pieces but config.json vocab_size is " + std::to_string(model.vocab_size));
    }
  });
}

Session open_engine(SessionStart&& start, int kv_blocks) {
  agree_on_errors(MPI_COMM_WORLD, start.error_);
  MPI_CHECK(MPI_Bcast(&kv_blocks, 1, MPI_INT, 0, MPI_COMM_WORLD));
  Session s;
  s.settings = std::move(start.cfg);
  s.config = std::move(start.model);
  s.tokenizer = std::move(start.tokenizer);
  s.engine = std::make_unique<RankEngine>(s.settings, s.config, MPI_COMM_WORLD, kv_blocks);
  s.block_size = s.settings.block_size;
  s.num_blocks = s.engine->kv().num_blocks;
  s.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start.t0_).count();
  return s;
}

}  // namespace llama2
