// The rank layer's entry point: every rank builds a RankEngine (collectively), loads its shard and
// then either drives steps (rank 0, through StepExecutor) or runs the worker loop (other ranks).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "common/step_executor.h"
#include "rank/comm.h"
#include "rank/local_rank.h"
#include "rank/model_runner.h"
#include "rank/step_heartbeat.h"

namespace llama2 {

// Every `auto` and 0-default of `cfg` decided for `model` on a machine with `visible_devices`
// GPUs (choose_backend, choose_dtype, choose_kv_dtype; max_step_tokens, max_seq_len, graphs).
// Error naming the allowed values for a request that cannot be honoured; *note as in
// choose_backend.
ResolvedConfig resolve_config(const EngineConfig& cfg, const ModelConfig& model,
                              int visible_devices, std::string* note = nullptr);

// kCpu or kCuda for a requested backend given the visible devices and the model's head size;
// Error for a cuda request this build, machine or model cannot honour. When kAuto falls back to
// cpu although a GPU is visible, *note says why.
Backend choose_backend(Backend requested, int visible_devices, int head_dim,
                       std::string* note = nullptr);
// fp16 | bf16 | fp32 for a requested dtype on a resolved backend (kAuto: the config's
// torch_dtype on cuda, fp32 on cpu); Error naming the allowed values otherwise.
ComputeDType choose_dtype(ComputeDType requested, Backend backend, const std::string& torch_dtype);
// The KV cache's element type given the resolved backend and dtype: kAuto stays kAuto (the
// dtype); kFp8E4m3 needs cuda with fp16/bf16. Error naming the allowed values otherwise.
KvCacheDType choose_kv_dtype(KvCacheDType requested, Backend backend, ComputeDType dtype);
// --weight-dtype: fp8/int8 only on cuda with fp16/bf16; a named fp16/bf16 must be the dtype.
// An FP8 checkpoint (quant.fp8): auto is fp8 (the stored values) on cuda with fp16/bf16, else the
// compute dtype (dequantized on load), as a named fp16/bf16 is; int8 requantizes on load.
// A 4-bit checkpoint (quant.int4): auto or int4 is int4 (its packing through the 4-bit kernels)
// on cuda with fp16/bf16 when quant.int4_runs_packed(), else auto dequantizes at load and int4 is
// refused; fp8/int8 requantize the dequantized weights. int4 on other checkpoints: AWQ's RTN
// rule at load, groups of 128.
WeightDType choose_weight_dtype(const EngineConfig& cfg, Backend backend, ComputeDType dtype,
                                const CheckpointQuant& quant = CheckpointQuant{});

// --deterministic on a resolved configuration (backend, dtypes): `requested` on cpu; on cuda
// `requested` with fp16/bf16 activations, weights and KV cache (the batch-invariant kernels'
// types), else Error naming each other choice and the cpu backend.
bool choose_deterministic(bool requested, const ResolvedConfig& resolved);

class RankEngine final : public StepExecutor {
 public:
  // Collective over `comm`: resolves `cfg`, validates the checkpoint, loads this rank's shard and
  // allocates its KV cache: cfg.kv_cache_blocks blocks, or when that is 0 what free GPU memory
  // holds (cuda) or `cpu_default_blocks` (cpu). Any rank's failure throws ReportedError on every
  // rank (one message, no hang).
  // `local`: this rank's place on its node when the caller knows it better than `comm` does
  // (data parallelism: several replicas' ranks share a node's GPUs); null: from `comm`.
  RankEngine(const EngineConfig& cfg, const ModelConfig& config, MPI_Comm comm,
             int cpu_default_blocks = 0, const LocalRank* local = nullptr);
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
  // Rank 0, any thread, no MPI call: the ranks of this node whose process has exited
  // (exited_ranks()); "" when none.
  std::string exited_ranks() const;
  // Any thread: aborts this process's NCCL communicators (abort_device_collectives); the caller
  // must end the process next.
  int abort_collectives(std::chrono::milliseconds wait) { return abort_device_collectives(wait); }

  const ModelConfig& config() const { return config_; }
  const ShardPlan& shard() const { return shard_; }
  // The resolved configuration, and its names for reports ("cuda", "bf16", "fp8_e4m3").
  const ResolvedConfig& settings() const { return settings_; }
  const char* backend_name() const { return to_string(settings_.backend); }
  const char* dtype_name() const { return to_string(settings_.dtype); }
  const char* kv_dtype_name() const {
    return llama2::kv_dtype_name(settings_.kv_cache_dtype, settings_.dtype);
  }
  const KvCacheSpec& kv() const { return kv_; }
  // One line per rank, gathered on rank 0: device, shard bytes, KV blocks and bytes.
  std::string startup_report() const { return report_; }

 private:
  // A forward step (logits on rank 0) or a score step (log-probabilities on rank 0).
  void run_step(const StepPlan& plan, StepLogits* logits, std::vector<double>* logprobs = nullptr);
  void size_kv_cache(int requested_blocks, int block_size, int cpu_default_blocks);

  ModelConfig config_;
  ShardPlan shard_;
  std::vector<ShardPlan> all_shards_;  // every rank's, for slicing a plan's adjustments
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0;  // for the LLAMA2_TEST_STALL hook, which names a rank of the whole job
  ResolvedConfig settings_;
  std::string backend_note_;
  std::string checkpoint_note_;  // an FP8 checkpoint's scheme, for the start-up report
  std::string report_;
  KvCacheSpec kv_;
  int64_t steps_ = 0;  // steps run so far, the same count on every rank
  std::unique_ptr<StepHeartbeat> beat_;
  std::unique_ptr<PlanChannel> plans_;
  std::unique_ptr<Comm> tp_comm_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace llama2
