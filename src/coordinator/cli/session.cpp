#include "coordinator/cli/session.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/capacity.h"
#include "common/check.h"
#include "common/rope_frequencies.h"
#include "rank/local_rank.h"

namespace llama2 {

SessionStart::SessionStart(int rank) : rank_(rank), t0_(std::chrono::steady_clock::now()) {
  int world = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  layout.world = layout.tp = world;
  layout.replica_rank = rank;
}

void SessionStart::plan_replicas(int tp, bool dedicated_front) {
  int world = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  // Every rank's node name, fixed-size so one MPI_Allgather carries them.
  constexpr int kName = 256;
  std::string mine = node_name(rank_, cfg.knobs.test_ranks_per_node);
  mine.resize(kName - 1);
  std::vector<char> all(static_cast<size_t>(world) * kName);
  MPI_CHECK(
      MPI_Allgather(mine.c_str(), kName, MPI_CHAR, all.data(), kName, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> nodes;
  for (int r = 0; r < world; ++r) nodes.emplace_back(all.data() + static_cast<size_t>(r) * kName);
  step([&] { layout = make_replica_layout(tp, rank_, nodes, dedicated_front); });
}

void SessionStart::load_model() {
  step([&] {
    model = cfg.synthetic.empty() ? load_model_config(cfg.model_dir) : preset_config(cfg.synthetic);
    if (cfg.prefix_caching && !rope_allows_prefix_caching(model)) {
      cfg.prefix_caching = false;
      notes +=
          "prefix caching off: dynamic RoPE scaling rotates each sequence's keys for its own "
          "length, so cached blocks cannot serve another sequence\n";
    }
    if (rank_ != 0 && !layout.leader()) return;
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
  s.layout = start.layout;
  s.notes = std::move(start.notes);
  const ReplicaLayout& l = s.layout;
  const bool engine = !l.front_only();
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, engine ? l.replica : MPI_UNDEFINED, l.replica_rank,
                           &s.replica_comm));
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, l.leader() || start.rank_ == 0 ? 0 : MPI_UNDEFINED,
                           start.rank_, &s.front_comm));
  // Which GPU (and what share of the CPU) a rank takes is a question about the node, whatever
  // replica its neighbours belong to: the local rank comes from every engine rank of the job (a
  // dedicated front takes no GPU).
  MPI_Comm engines = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, engine ? 0 : MPI_UNDEFINED, start.rank_, &engines));
  std::string error;
  if (engine) {
    const LocalRank local = read_local_rank(engines);
    MPI_CHECK(MPI_Comm_free(&engines));
    try {
      s.engine =
          std::make_unique<RankEngine>(s.settings, s.config, s.replica_comm, kv_blocks, &local);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // One replica's failure (its ranks agreed on it) stops the others too.
  agree_on_errors(MPI_COMM_WORLD, error);
  s.block_size = s.settings.block_size;
  s.num_blocks = engine ? s.engine->kv().num_blocks : 0;
  // Replica 0's leader tells every rank the engine's resolved types.
  int types[3] = {};
  if (start.rank_ == l.leader_of(0)) {
    const ResolvedConfig& r = s.engine->settings();
    types[0] = static_cast<int>(r.backend);
    types[1] = static_cast<int>(r.dtype);
    types[2] = static_cast<int>(r.kv_cache_dtype);
  }
  MPI_CHECK(MPI_Bcast(types, 3, MPI_INT, l.leader_of(0), MPI_COMM_WORLD));
  s.backend = static_cast<Backend>(types[0]);
  s.dtype = static_cast<ComputeDType>(types[1]);
  s.kv_cache_dtype = static_cast<KvCacheDType>(types[2]);
  std::vector<int> blocks(static_cast<size_t>(l.world));
  MPI_CHECK(MPI_Allgather(&s.num_blocks, 1, MPI_INT, blocks.data(), 1, MPI_INT, MPI_COMM_WORLD));
  for (int r = 0; r < l.replicas; ++r) s.replica_blocks.push_back(blocks[l.leader_of(r)]);
  s.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start.t0_).count();
  return s;
}

}  // namespace llama2
