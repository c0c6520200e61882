// The per-rank forward pass behind one interface, so the engine, the worker loop and the
// coordinator do not know which backend runs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/shard_plan.h"
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
  // Runs `plan` on this rank's shard. logits_local: [plan.logit_rows(), shard.vocab_size] fp32,
  // this rank's vocabulary slice of the logits of every sequence that asked for them.
  virtual void forward(const StepPlan& plan, std::vector<float>* logits_local) = 0;
  virtual std::string backend_name() const = 0;
  virtual uint64_t weight_bytes() const = 0;    // bytes of this rank's weight shard
  virtual uint64_t kv_cache_bytes() const = 0;  // bytes of this rank's KV cache
};

// The fp32 CPU backend. Loads only this rank's slices from `weights`.
std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, const ShardPlan& shard,
                                             const WeightStore& weights, const KvCacheSpec& kv,
                                             Comm& comm);

}  // namespace llama2
