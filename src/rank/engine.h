// The rank layer's entry point: every rank builds a RankEngine (collectively), loads its shard and
// then either drives steps (rank 0, through StepExecutor) or runs the worker loop (other ranks).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/shard_plan.h"
#include "common/step_executor.h"
#include "rank/comm.h"
#include "rank/model_runner.h"

namespace llama2 {

struct EngineSpec {
  std::string model_dir;
  std::string backend = "auto";  // cpu | cuda | auto
  KvCacheSpec kv;
};

// "cpu" or "cuda" for a requested backend given the visible devices; Error for unknown names or a
// cuda request this build cannot honour.
std::string choose_backend(const std::string& requested, int visible_devices);

class RankEngine final : public StepExecutor {
 public:
  // Collective over `comm`: validates the checkpoint, loads this rank's shard and allocates its KV
  // cache. Any rank's failure throws ReportedError on every rank (one message, no hang).
  RankEngine(const EngineSpec& spec, const ModelConfig& config, MPI_Comm comm);
  ~RankEngine() override;

  // Rank 0: broadcast the plan, run it, gather logits [rows, vocab] (StepExecutor).
  void execute(const StepPlan& plan, std::vector<float>* logits) override;
  int vocab_size() const override { return config_.vocab_size; }
  // Rank 0: tell the workers to leave their loop with `exit_code`.
  void shutdown(int exit_code);
  // Other ranks: receive plans and run them until a shutdown plan; returns its exit code.
  int worker_loop();

  const ModelConfig& config() const { return config_; }
  const ShardPlan& shard() const { return shard_; }
  const std::string& backend() const { return backend_; }
  // One line per rank, gathered on rank 0: device, shard bytes, KV blocks and bytes.
  std::string startup_report() const { return report_; }

 private:
  void run_local(const StepPlan& plan, std::vector<float>* logits);

  ModelConfig config_;
  ShardPlan shard_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string backend_;
  std::string report_;
  std::vector<ShardPlan> all_shards_;  // every rank's split, for gathering the vocab slices
  std::unique_ptr<Comm> tp_comm_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace llama2
