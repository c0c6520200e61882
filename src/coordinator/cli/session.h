// Bringing up the engine for an MPI subcommand, in named steps that every command runs in the same
// order: build and validate the EngineConfig (every rank), read config.json (every rank) and the
// tokenizer (rank 0), read the command's inputs and size the KV cache for them (rank 0), then open
// the engine (collective). A step that fails on one rank must not leave the others waiting in a
// collective: failures are held in SessionStart until open_engine, where every rank agrees on them
// (agree_on_errors) before any weight is loaded.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/engine_config.h"
#include "common/model_config.h"
#include "coordinator/replicas/layout.h"
#include "coordinator/text/tokenizer.h"
#include "rank/engine.h"

namespace llama2 {

struct Session {
  EngineConfig settings;  // what the engine was opened with
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;  // world rank 0 and the replica leaders only
  std::unique_ptr<RankEngine> engine;    // null on a dedicated front
  // Replica 0's engine's resolved types, known on every rank (a dedicated front has no engine to
  // ask); their names only where they are reported (health, the start-up line).
  Backend backend = Backend::kCpu;
  ComputeDType dtype = ComputeDType::kFp32;
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;  // kAuto: the cache holds `dtype`
  // Data parallelism (coordinator/replicas/layout.h): this rank's place, the engine's own
  // communicator (its replica's ranks), the front's link communicator (world rank 0 and the
  // replica leaders; MPI_COMM_NULL elsewhere) and every replica's KV blocks, by replica.
  ReplicaLayout layout;
  MPI_Comm replica_comm = MPI_COMM_NULL;
  MPI_Comm front_comm = MPI_COMM_NULL;
  std::vector<int> replica_blocks;
  int block_size = 16;
  int num_blocks = 0;   // what the engine allocated
  double load_s = 0.0;  // from the start of the session to a loaded engine
  // Lines for the start-up report after the engine's (rank 0): what the session decided from
  // the model's files, e.g. prefix caching turned off under dynamic RoPE scaling.
  std::string notes;
};

// The steps before the engine opens, with the first failure held (not thrown) until open_engine.
class SessionStart {
 public:
  explicit SessionStart(int rank);

  // Runs `step` on this rank unless an earlier step failed; what it throws is held.
  template <typename F>
  void step(F&& f) {
    if (!error_.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      error_ = *e.what() != '\0' ? e.what() : "unknown error";
    }
  }
  // The same on rank 0 only (the command's inputs, the KV size they need).
  template <typename F>
  void on_rank0(F&& f) {
    if (rank_ == 0) step(std::forward<F>(f));
  }
  // Collective over MPI_COMM_WORLD: the replica layout for `--tp tp` (0: one replica), checked
  // against every rank's node (layout.h; LLAMA2_TEST_RANKS_PER_NODE fakes the nodes). Call
  // before load_model.
  // With `dedicated_front`, world rank 0 runs no engine (serve --dedicated-front).
  void plan_replicas(int tp, bool dedicated_front = false);
  // Every rank: config.json (or cfg's --synthetic preset); world rank 0 and the replica leaders
  // also load tokenizer.model and check it against the model's vocabulary. Turns prefix caching
  // off (with a note) where the model's RoPE does not allow it.
  void load_model();

  int rank() const { return rank_; }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  EngineConfig cfg;
  ModelConfig model;
  ReplicaLayout layout;                  // one replica unless plan_replicas said otherwise
  std::unique_ptr<Tokenizer> tokenizer;  // rank 0 and replica leaders, after load_model
  std::string notes;                     // Session::notes, collected by the steps

 private:
  int rank_;
  std::string error_;
  std::chrono::steady_clock::time_point t0_;
  friend Session open_engine(SessionStart&& start, int kv_blocks);
};

// Collective: every rank agrees on the held errors (ReportedError on every rank), rank 0's
// `kv_blocks` (what the command's inputs need: the cpu backend allocates that many unless
// --kv-cache-blocks was given) is broadcast, and every rank loads its shard of its replica's
// engine (over the replica's communicator; a failure in any replica stops every rank).
Session open_engine(SessionStart&& start, int kv_blocks);

}  // namespace llama2
