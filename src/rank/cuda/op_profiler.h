// LLAMA2_OP_PROFILE=1 (TuningKnobs::op_profile): where one engine step's GPU time goes, op by op.
// CUDA events are recorded between consecutive launches of the forward pass; the time from one mark
// to the next is charged to the first mark's op, summed over layers. Steps run eagerly while it is
// on (events cannot be timed inside a replayed graph), so launch gaps show up too, as they would
// without graphs. Each rank prints one line per step on stderr:
//   op-profile rank 0: tokens 512 seqs 512 logit_rows 512 | qkv_gemm 2.36 attention 1.10 ... |
//   total 16.0 ms
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace llama2 {

class OpProfiler {
 public:
  explicit OpProfiler(int rank) : rank_(rank) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Records an event on `stream`: the GPU time until the next mark belongs to `op` (a literal).
  void mark(const char* op, cudaStream_t stream);
  // Ends the step (waits for its last event), prints its line prefixed by `shape`, starts afresh.
  void report(const std::string& shape, cudaStream_t stream);

 private:
  int rank_;
  std::vector<cudaEvent_t> events_;  // a pool, reused step after step
  std::vector<const char*> ops_;     // ops_[i] started at events_[i]
};

}  // namespace llama2
