// The first rank of a replica other than the front's own (docs/ARCHITECTURE.md, "Data
// parallelism"): its batch scheduler and KV bookkeeping, driving its engine, fed by the front over
// the ReplicaLink. Between engine steps it takes what the front sent (submit, cancel, shutdown)
// with non-blocking probes, and after each step it sends one message: its gauges, then the
// step's TokenEvent / Finished records; idle, it sends its gauges every kReplicaHeartbeat, so the
// front can tell a leader that stopped answering (the step-timeout rule) from an idle one.
// Detokenizing and stop matching happen here, in the scheduler, so they scale with the replicas.
#pragma once

#include "common/model_config.h"
#include "common/step_executor.h"
#include "coordinator/replicas/replica_link.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {

// Serves the front (rank 0 of `link`) until it sends shutdown; returns the exit code it gave.
// The caller then shuts its engine's workers down with that code.
int run_replica_leader(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                       BlockAllocator& blocks, SchedulerOptions opts, ReplicaLink& link);

}  // namespace llama2
