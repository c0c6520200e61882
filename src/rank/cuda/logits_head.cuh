// The logit rows of a forward step on one rank of the CUDA backend, to rank 0: this rank's
// vocabulary slice of each row reduced on the GPU to its best candidates (argmax / top-k) when the
// step asks for candidates, else converted to fp32 whole; gathered over the TP group (Comm) and
// merged or stitched on rank 0 into StepLogits. Rows that want logprobs add each slice's
// (max, sum of exp) summary, combined into the rows' log-sum-exp (rank/logits_gather.h).
// A step with vocabulary adjustments (StepPlan::adjust) converts its rows to fp32 first and
// applies them there (kernels/logits_adjust.cuh: a bias added in fp16 would be rounded to fp16),
// then every reduction reads the adjusted fp32 rows; other steps are unchanged.
// --deterministic: a step that gathers full rows takes its logprob rows' log-sum-exp from the
// same GPU slice summaries as a candidates step (launch_slice_logsumexp, whose fp32 arithmetic
// does not depend on the element type it reads), so a row's logprobs do not depend on whether a
// top-p mate made its step gather full rows; by default rank 0 sums the full rows in double.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/model_config.h"
#include "common/shard_plan.h"
#include "common/step_plan.h"
#include "kernels/convert.cuh"
#include "kernels/logits_adjust.cuh"
#include "kernels/logsumexp.cuh"
#include "kernels/sampling.cuh"
#include "rank/comm.h"
#include "rank/cuda/device_buffer.h"
#include "rank/logits_adjust.h"
#include "rank/logits_gather.h"

namespace llama2 {

template <typename T>
class LogitsHead {
 public:
  // Buffers for up to max_rows logit rows; rank 0 (root) also holds every rank's share.
  LogitsHead(int max_rows, const ModelConfig& c, const ShardPlan& s,
             std::vector<ShardPlan> all_shards, bool root, bool deterministic = false)
      : vocab_(c.vocab_size),
        shard_(s),
        all_shards_(std::move(all_shards)),
        deterministic_(deterministic) {
    const int64_t R = max_rows, Vl = s.vocab_size;
    auto buf = [](int64_t elems, size_t elem_bytes, const char* what) {
      return DeviceBuffer(static_cast<size_t>(elems) * elem_bytes, what);
    };
    logits_ = buf(R * Vl, sizeof(T), "logits shard");
    logits_f32_ = buf(R * Vl, sizeof(float), "fp32 logits shard");
    cand_values_ = buf(R * kMaxCandidates, sizeof(float), "candidate values");
    cand_ids_ = buf(R * kMaxCandidates, sizeof(int32_t), "candidate ids");
    const int64_t gathered_full = root ? R * c.vocab_size : 0;
    const int64_t gathered_cand = root ? R * kMaxCandidates * s.tp : 0;
    gathered_f32_ = buf(std::max(gathered_full, gathered_cand), sizeof(float), "gathered logits");
    gathered_ids_ = buf(gathered_cand, sizeof(int32_t), "gathered candidate ids");
    host_f32_ =
        PinnedBuffer(static_cast<size_t>(std::max(gathered_full, gathered_cand)) * sizeof(float));
    host_ids_ = PinnedBuffer(static_cast<size_t>(gathered_cand) * sizeof(int32_t));
    const int64_t lse_all = root ? R * kSliceLseFields * s.tp : 0;
    lse_part_ = buf(R * kSliceLseFields, sizeof(float), "logprob slice summaries");
    lse_all_ = buf(lse_all, sizeof(float), "gathered logprob slice summaries");
    host_lse_ = PinnedBuffer(static_cast<size_t>(lse_all) * sizeof(float));
  }

  // Where the LM head writes the step's rows: [max_rows, vocab_local] in T.
  const DeviceBuffer& logits() const { return logits_; }

  // Candidates or full fp32 rows of `rows` logit rows, gathered to rank 0 (out: rank 0 only).
  void gather(const StepPlan& plan, int rows, Comm& comm, cudaStream_t stream, StepLogits* out) {
    const int Vl = shard_.vocab_size;
    const bool root = comm.rank() == 0;
    if (rows == 0) {
      comm.synchronize();
      if (root && out != nullptr) *out = StepLogits{};
      return;
    }
    const bool adjusted = !plan.adjust.empty();
    if (adjusted || plan.candidates == 0) {
      CUDA_CHECK(kernels::launch_convert<float>(logits_.as<void>(), source_type(),
                                                static_cast<int64_t>(rows) * Vl,
                                                logits_f32_.as<float>(), stream));
    }
    if (adjusted) apply_adjustments_f32(plan, stream);
    if (plan.candidates > 0) {
      if (adjusted)
        return gather_candidates<float>(logits_f32_.as<float>(), plan, rows, comm, stream, out);
      return gather_candidates<T>(logits_.as<T>(), plan, rows, comm, stream, out);
    }
    comm.gather_to_root(logits_f32_.as<void>(), vocab_slice_counts(all_shards_, rows),
                        CommType::kF32, gathered_f32_.as<void>());
    const bool slice_lse = deterministic_ && plan.any_logprobs();
    if (slice_lse) gather_slice_lse(logits_f32_.as<float>(), rows, comm, stream);
    if (root) {
      const size_t total = static_cast<size_t>(rows) * vocab_;  // the slices cover it
      CUDA_CHECK(cudaMemcpyAsync(host_f32_.as<void>(), gathered_f32_.as<void>(),
                                 total * sizeof(float), cudaMemcpyDeviceToHost, stream));
    }
    comm.synchronize();
    if (root && out != nullptr) {
      stitch_vocab_slices(host_f32_.as<float>(), all_shards_, rows, vocab_, out);
      if (slice_lse) {
        lse_from_slices(host_lse_.as<float>(), all_shards_, plan.logprob_flags(), out);
      } else if (plan.any_logprobs()) {
        lse_from_full_rows(plan.logprob_flags(), out);
      }
    }
  }

 private:
  static constexpr kernels::SourceType source_type() {
    if constexpr (std::is_same_v<T, float>) return kernels::SourceType::kF32;
    if constexpr (std::is_same_v<T, __half>) return kernels::SourceType::kF16;
    return kernels::SourceType::kBF16;
  }

  // The step's adjustments (this rank's slice) on the fp32 rows: one upload of the packed masks
  // and biases, then one launch each.
  void apply_adjustments_f32(const StepPlan& plan, cudaStream_t stream) {
    const PackedAdjustments p = pack_adjustments(plan, shard_.vocab_begin, shard_.vocab_size);
    const size_t n_mask = p.mask_rows.size(), n_words = p.mask_words.size(),
                 n_bias = p.bias_rows.size();
    const size_t words = n_mask + n_words + 3 * n_bias;  // all 4-byte values
    if (adjust_host_.bytes() < words * 4) {
      // The previous step's copy has completed (every step ends with a stream wait).
      adjust_host_ = PinnedBuffer(words * 8);
      adjust_dev_ = DeviceBuffer(words * 8, "vocabulary adjustments");
    }
    char* h = adjust_host_.as<char>();
    std::memcpy(h, p.mask_rows.data(), n_mask * 4);
    std::memcpy(h + n_mask * 4, p.mask_words.data(), n_words * 4);
    std::memcpy(h + (n_mask + n_words) * 4, p.bias_rows.data(), n_bias * 4);
    std::memcpy(h + (n_mask + n_words + n_bias) * 4, p.bias_cols.data(), n_bias * 4);
    std::memcpy(h + (n_mask + n_words + 2 * n_bias) * 4, p.bias_values.data(), n_bias * 4);
    CUDA_CHECK(
        cudaMemcpyAsync(adjust_dev_.as<void>(), h, words * 4, cudaMemcpyHostToDevice, stream));
    char* d = adjust_dev_.as<char>();
    const int Vl = shard_.vocab_size;
    CUDA_CHECK(kernels::launch_apply_token_mask(
        logits_f32_.as<float>(), Vl, Vl, shard_.vocab_begin, static_cast<int>(n_mask),
        reinterpret_cast<const int32_t*>(d), reinterpret_cast<const uint32_t*>(d + n_mask * 4),
        p.words_per_row, p.mask_base, stream));
    CUDA_CHECK(kernels::launch_add_token_bias(
        logits_f32_.as<float>(), Vl, static_cast<int>(n_bias),
        reinterpret_cast<const int32_t*>(d + (n_mask + n_words) * 4),
        reinterpret_cast<const int32_t*>(d + (n_mask + n_words + n_bias) * 4),
        reinterpret_cast<const float*>(d + (n_mask + n_words + 2 * n_bias) * 4), stream));
  }

  // Candidates of the rows in `src` [rows, vocab_local] (T as the LM head wrote them, or the
  // adjusted fp32 copy).
  template <typename S>
  void gather_candidates(const S* src, const StepPlan& plan, int rows, Comm& comm,
                         cudaStream_t stream, StepLogits* out) {
    const int Vl = shard_.vocab_size, tp = shard_.tp, k = plan.candidates;
    const bool root = comm.rank() == 0;
    if (k == 1) {
      CUDA_CHECK(kernels::launch_argmax<S>(src, Vl, rows, Vl, shard_.vocab_begin,
                                           cand_values_.as<float>(), cand_ids_.as<int32_t>(),
                                           stream));
    } else {
      CUDA_CHECK(kernels::launch_topk<S>(src, Vl, rows, Vl, shard_.vocab_begin, k,
                                         cand_values_.as<float>(), cand_ids_.as<int32_t>(),
                                         stream));
    }
    const std::vector<size_t> counts(tp, static_cast<size_t>(rows) * k);
    comm.gather_to_root(cand_values_.as<void>(), counts, CommType::kF32, gathered_f32_.as<void>());
    comm.gather_to_root(cand_ids_.as<void>(), counts, CommType::kI32, gathered_ids_.as<void>());
    // Logprob rows: the candidates hold the sampled token's raw logit (sampling picks among
    // them), so rank 0 only lacks each row's log-sum-exp: one launch over all logit rows
    // (contiguous; picking the asking rows would cost more than it saves) and [rows, 3] floats
    // per rank. A step without such a row launches and gathers nothing more.
    const bool logprobs = plan.any_logprobs();
    if (logprobs) gather_slice_lse(src, rows, comm, stream);
    const size_t n = static_cast<size_t>(rows) * k * tp;
    if (root) {
      CUDA_CHECK(cudaMemcpyAsync(host_f32_.as<void>(), gathered_f32_.as<void>(), n * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
      CUDA_CHECK(cudaMemcpyAsync(host_ids_.as<void>(), gathered_ids_.as<void>(),
                                 n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    }
    comm.synchronize();
    if (root && out != nullptr) {
      merge_candidates(host_f32_.as<float>(), host_ids_.as<int32_t>(), tp, rows, k, out);
      if (logprobs) lse_from_slices(host_lse_.as<float>(), all_shards_, plan.logprob_flags(), out);
    }
  }

  // This rank's slice summaries of the rows in `src` [rows, vocab_local] to rank 0's host_lse_
  // ([rank][rows, kSliceLseFields]; the copy is enqueued, read after comm.synchronize()).
  template <typename S>
  void gather_slice_lse(const S* src, int rows, Comm& comm, cudaStream_t stream) {
    const int Vl = shard_.vocab_size, tp = shard_.tp;
    const std::vector<size_t> lse_counts(tp, static_cast<size_t>(rows) * kSliceLseFields);
    CUDA_CHECK(kernels::launch_slice_logsumexp<S>(src, Vl, rows, Vl, shard_.vocab_begin, nullptr,
                                                  lse_part_.as<float>(), stream));
    comm.gather_to_root(lse_part_.as<void>(), lse_counts, CommType::kF32, lse_all_.as<void>());
    if (comm.rank() == 0) {
      CUDA_CHECK(cudaMemcpyAsync(host_lse_.as<void>(), lse_all_.as<void>(),
                                 lse_counts[0] * tp * sizeof(float), cudaMemcpyDeviceToHost,
                                 stream));
    }
  }

  int vocab_;
  ShardPlan shard_;
  std::vector<ShardPlan> all_shards_;
  bool deterministic_ = false;           // full-row steps' logprobs from the slice summaries too
  DeviceBuffer logits_;                  // [R, vocab_local] in T
  DeviceBuffer logits_f32_;              // [R, vocab_local] fp32
  DeviceBuffer cand_values_, cand_ids_;  // [R, kMaxCandidates]
  DeviceBuffer gathered_f32_, gathered_ids_;  // rank 0: [tp][R, k] or [R, vocab] (rank blocks)
  PinnedBuffer host_f32_, host_ids_;          // rank 0: the same on the host
  DeviceBuffer lse_part_;                     // [R, kSliceLseFields] fp32 (logprob rows)
  DeviceBuffer lse_all_;                      // rank 0: [tp][R, kSliceLseFields]
  PinnedBuffer host_lse_;                     // rank 0: the same on the host
  // A step's packed vocabulary adjustments (apply_adjustments_f32), grown as needed.
  PinnedBuffer adjust_host_;
  DeviceBuffer adjust_dev_;
};

}  // namespace llama2
