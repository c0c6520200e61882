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
#include "rank/step_heartbeat.h"

namespace llama2 {

struct EngineSpec {
  std::string model_dir;  // checkpoint directory; ignored when `synthetic` is set
  std::string synthetic;  // "7b" | "13b" | "70b": random weights made on each GPU
  uint64_t synthetic_seed = 1;
  std::string backend = "auto";  // cpu | cuda | auto (cuda when a GPU is visible)
  std::string dtype = "auto";    // auto | fp16 | bf16 | fp32 (auto: the checkpoint's torch_dtype)
  std::string kv_cache_dtype = "auto";  // auto (= dtype) | fp8 | fp8_e4m3 (cuda, fp16/bf16)
  // num_blocks 0: the cuda backend sizes the cache from free memory (gpu_memory_fraction), the
  // cpu backend allocates cpu_default_blocks.
  KvCacheSpec kv;
  int cpu_default_blocks = 0;
  double gpu_memory_fraction = 0.9;
  int max_batch = 256;      // sequences per step
  int max_step_tokens = 0;  // tokens per step; 0: max(2048, max_batch)
  int max_seq_len = 0;      // 0: config.max_position_embeddings
  bool cuda_graphs = true;  // capture decode steps
  int cpu_threads = 0;      // cpu backend threads per rank; 0: cpu_threads_for_rank's choice
};

// "cpu" or "cuda" for a requested backend given the visible devices and the model's head size;
// Error for unknown names or a cuda request this build, machine or model cannot honour. When
// `auto` falls back to cpu although a GPU is visible, *note says why.
std::string choose_backend(const std::string& requested, int visible_devices, int head_dim,
                           std::string* note = nullptr);
// fp16 | bf16 | fp32 for a requested dtype on a backend ("auto": the config's torch_dtype on
// cuda, fp32 on cpu); Error naming the allowed values otherwise.
std::string choose_dtype(const std::string& requested, const std::string& backend,
                         const std::string& torch_dtype);
// The KV cache's element type for a requested --kv-cache-dtype given the resolved backend and
// dtype: "auto" -> dtype; "fp8" | "fp8_e4m3" -> "fp8_e4m3" (cuda with fp16/bf16 only). Error
// naming the allowed values otherwise.
std::string choose_kv_dtype(const std::string& requested, const std::string& backend,
                            const std::string& dtype);

// A test hook (LLAMA2_TEST_STALL=STEP[:RANK[:MS]], read once when the engine starts): rank RANK
// (default 0) sleeps MS milliseconds (default 0: for ever) at the start of step STEP (steps count
// from 1), to exercise the step watchdog on any backend and at any TP degree, TP 1 included.
struct StallHook {
  int64_t step = 0;  // 0: off
  int rank = 0;
  int64_t ms = 0;  // 0: for ever
};
// Parses the variable's value ("" or null: off); Error naming the expected form otherwise.
StallHook parse_stall_hook(const char* text);

class RankEngine final : public StepExecutor {
 public:
  // Collective over `comm`: validates the checkpoint, loads this rank's shard and allocates its KV
  // cache. Any rank's failure throws ReportedError on every rank (one message, no hang).
  RankEngine(const EngineSpec& spec, const ModelConfig& config, MPI_Comm comm);
  ~RankEngine() override;

  // Rank 0: broadcast the plan, run it, gather the logit rows (StepExecutor).
  void execute(const StepPlan& plan, StepLogits* logits) override;
  // The same with full logits [rows, vocab] (plan.candidates must be 0).
  void execute(const StepPlan& plan, std::vector<float>* logits);
  int vocab_size() const override { return config_.vocab_size; }
  // Rank 0: broadcast a StepKind::kScore plan and run it; `logprobs` gets log p(targets[t]) of
  // every scored row in token order (ModelRunner::score), computed from per-rank vocabulary
  // slices without gathering full logits.
  void score(const StepPlan& plan, std::vector<double>* logprobs);
  // Rank 0: tell the workers to leave their loop with `exit_code`.
  void shutdown(int exit_code);
  // Other ranks: receive plans and run them until a shutdown plan; returns its exit code. An idle
  // worker naps between polls for the next plan (PlanChannel) instead of spinning.
  int worker_loop();

  // This rank's step counters (any thread; a few atomic loads): the step watchdog's clock.
  RankBeat progress() const { return beat_->self(); }
  // Rank 0, any thread, no MPI call: which rank a stalled step waits for (describe_stall()).
  std::string describe_stall() const;
  // Any thread: aborts this process's NCCL communicators (abort_device_collectives); the caller
  // must end the process next.
  int abort_collectives(std::chrono::milliseconds wait) { return abort_device_collectives(wait); }

  const ModelConfig& config() const { return config_; }
  const ShardPlan& shard() const { return shard_; }
  const std::string& backend() const { return backend_; }
  const std::string& dtype() const { return dtype_; }
  const std::string& kv_dtype() const { return kv_dtype_; }
  const KvCacheSpec& kv() const { return kv_; }
  // One line per rank, gathered on rank 0: device, shard bytes, KV blocks and bytes.
  std::string startup_report() const { return report_; }

 private:
  // A forward step (logits on rank 0) or a score step (log-probabilities on rank 0).
  void run_step(const StepPlan& plan, StepLogits* logits, std::vector<double>* logprobs = nullptr);
  void size_kv_cache(const EngineSpec& spec);

  ModelConfig config_;
  ShardPlan shard_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::string backend_, dtype_, kv_dtype_, backend_note_;
  std::string report_;
  KvCacheSpec kv_;
  StallHook stall_hook_;
  int64_t steps_ = 0;  // steps run so far, the same count on every rank
  std::unique_ptr<StepHeartbeat> beat_;
  std::unique_ptr<PlanChannel> plans_;
  std::unique_ptr<Comm> tp_comm_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace llama2
