// The LM head of a kScore step (perplexity) on one rank of the CUDA backend: every final-normed
// token row through this rank's vocabulary slice of the head, in chunks, each chunk reduced on the
// GPU to (max, sum of exp, target logit) per row (kernels/logsumexp.cu); [T, 3] floats per rank
// go to rank 0, which combines them (combine_logsumexp). Full logits never leave the GPU.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "common/shard_plan.h"
#include "kernels/logsumexp.cuh"
#include "rank/comm.h"
#include "rank/cuda/device_buffer.h"
#include "rank/logits_gather.h"

namespace llama2 {

template <typename T>
class ScoreHead {
 public:
  // LM-head rows per chunk: [kRows, vocab_local] logits live at a time (32 MB at 32000 fp16).
  static constexpr int kRows = 512;

  // Buffers for steps of up to max_tokens rows; rank 0 (root) also holds every rank's summaries.
  ScoreHead(int max_tokens, const ShardPlan& shard, bool root)
      : max_tokens_(max_tokens),
        logits_(static_cast<size_t>(kRows) * shard.vocab_size * sizeof(T), "score logits"),
        targets_(static_cast<size_t>(max_tokens) * sizeof(int32_t), "score targets"),
        part_(static_cast<size_t>(max_tokens) * kSliceLseFields * sizeof(float), "score slices"),
        all_(
            root ? static_cast<size_t>(max_tokens) * kSliceLseFields * shard.tp * sizeof(float) : 0,
            "gathered score slices"),
        host_(root ? static_cast<size_t>(max_tokens) * kSliceLseFields * shard.tp * sizeof(float)
                   : 0) {}

  // h: [tokens, hidden] final-normed rows on this GPU; head: [vocab_local, hidden] (type: T's
  // cuBLAS type); targets: [tokens] global ids, -1 = not scored. On rank 0, *logprobs gets
  // log p(targets[t]) of every t with targets[t] >= 0, in order (logprobs nullptr elsewhere).
  // comm: the TP group's device communicator, whose collectives run on `stream`.
  void run(const T* h, const T* head, cudaDataType_t type, int tokens, int hidden,
           const std::vector<int32_t>& targets, const std::vector<ShardPlan>& shards,
           const ShardPlan& shard, Comm& comm, cublasHandle_t cublas, cudaStream_t stream,
           std::vector<double>* logprobs) {
    LLAMA2_CHECK(tokens <= max_tokens_ && targets.size() == static_cast<size_t>(tokens));
    const int Vl = shard.vocab_size, tp = shard.tp;
    // Pageable source: the copy is staged before the call returns.
    CUDA_CHECK(cudaMemcpyAsync(targets_.as<void>(), targets.data(), tokens * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream));
    for (int r0 = 0; r0 < tokens; r0 += kRows) {
      const int n = std::min(kRows, tokens - r0);
      gemm_xwt(cublas, type, h + static_cast<int64_t>(r0) * hidden, head, logits_.as<T>(), n, Vl,
               hidden);
      CUDA_CHECK(kernels::launch_slice_logsumexp<T>(
          logits_.as<T>(), Vl, n, Vl, shard.vocab_begin, targets_.as<int32_t>() + r0,
          part_.as<float>() + static_cast<int64_t>(r0) * kSliceLseFields, stream));
    }
    const std::vector<size_t> counts(tp, static_cast<size_t>(tokens) * kSliceLseFields);
    comm.gather_to_root(part_.as<void>(), counts, CommType::kF32, all_.as<void>());
    const bool root = comm.rank() == 0;
    if (root) {
      CUDA_CHECK(cudaMemcpyAsync(host_.as<void>(), all_.as<void>(), counts[0] * tp * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
    }
    comm.synchronize();
    if (!root || logprobs == nullptr) return;
    std::vector<double> all(static_cast<size_t>(tokens));
    combine_logsumexp(host_.as<float>(), shards, tokens, targets.data(), nullptr, all.data());
    logprobs->clear();
    for (int t = 0; t < tokens; ++t) {
      if (targets[t] >= 0) logprobs->push_back(all[t]);
    }
  }

 private:
  int max_tokens_;
  DeviceBuffer logits_;   // [kRows, vocab_local] in T
  DeviceBuffer targets_;  // [max_tokens] int32
  DeviceBuffer part_;     // [max_tokens, 3] fp32: this rank's slice summaries
  DeviceBuffer all_;      // rank 0: [tp][max_tokens, 3]
  PinnedBuffer host_;     // rank 0: the same on the host
};

}  // namespace llama2
