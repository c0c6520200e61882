// The per-rank forward pass behind one interface, so the engine, the worker loop and the
// coordinator do not know which backend runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "common/step_executor.h"
#include "common/step_plan.h"

namespace llama2 {

class Comm;
class WeightStore;

// Paged KV cache geometry, identical on every rank (each rank stores its own KV heads).
struct KvCacheSpec {
  int block_size = 16;  // tokens per block
  int num_blocks = 0;   // blocks per layer
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Collective: runs `plan` on this rank's shard and gathers the logit rows (plan.candidates
  // decides full rows or candidates) to rank 0, which receives them in `out` (nullptr elsewhere).
  virtual void forward(const StepPlan& plan, StepLogits* out) = 0;
  // Collective: runs a StepKind::kScore plan. Each rank reduces its vocabulary slice of every
  // scored row (slice_logsumexp in logits_gather.h) and rank 0 combines the slices: `logprobs`
  // (rank 0; nullptr elsewhere) gets log p(targets[t]) for every t with targets[t] >= 0, in token
  // order. Error for a target outside the vocabulary.
  virtual void score(const StepPlan& plan, std::vector<double>* logprobs) = 0;
  // KV blocks (of `block_size` tokens) that the memory left after the weights and activation
  // buffers holds, under this backend's memory policy; -1 when memory does not bound it (CPU).
  virtual int64_t kv_blocks_that_fit(int block_size) const = 0;
  // Allocates the KV cache; called once, with the same spec on every rank, before forward().
  virtual void allocate_kv(const KvCacheSpec& kv) = 0;
  virtual std::string device_description() const = 0;  // "host, 2 threads" or "GPU 0 (NVIDIA H200)"
  virtual int dtype_bytes() const = 0;                 // of weights and activations
  virtual int kv_dtype_bytes() const = 0;              // of a KV cache element (1: fp8)
  virtual uint64_t weight_bytes() const = 0;           // bytes of this rank's weight shard
  virtual uint64_t kv_cache_bytes() const = 0;         // bytes of this rank's KV cache
};

// The fp32 CPU backend. Loads only this rank's slices from `weights`; large work is split over
// `threads` threads (the rank's own included) as `split` says.
std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, const ShardPlan& shard,
                                             const WeightStore& weights, Comm& comm,
                                             int threads = 1, CpuSplit split = CpuSplit::kAuto);

// Where this rank's CUDA runner lives; everything else it needs is the engine's ResolvedConfig.
struct CudaPlacement {
  int device = 0;
  const WeightStore* weights = nullptr;  // nullptr: synthetic weights
  int mpi_comm = 0;                      // MPI_Comm handle (MPI_Fint) of the TP group, for NCCL
};

// True when this binary was built with the CUDA backend.
bool cuda_backend_built();
// The attention and RoPE kernels are instantiated for these head sizes (all Llama-2 models use
// 128).
inline bool cuda_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}
// The CUDA backend (fp16/bf16/fp32 on one GPU per rank, NCCL between ranks). Error when the
// backend is not built or the device cannot hold the shard.
std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig& config, const ShardPlan& shard,
                                              const ResolvedConfig& settings,
                                              const CudaPlacement& placement);

}  // namespace llama2
