// The CUDA backend: the tensor-parallel forward pass of cpu_model.cpp on one GPU per rank, in
// fp16/bf16 (fp32 accumulation) or fp32, with cuBLAS GEMMs, the kernels of kernels/, NCCL between
// ranks and CUDA graphs for decode steps. The KV cache holds the model dtype or, for fp16/bf16,
// fp8 e4m3 (--kv-cache-dtype fp8).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/convert.cuh"
#include "kernels/dtype.cuh"
#include "kernels/embedding.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/sampling.cuh"
#include "kernels/swiglu.cuh"
#include "rank/cuda/cuda_types.h"
#include "rank/cuda/cuda_weights.h"
#include "rank/cuda/graph_cache.h"
#include "rank/cuda/invariant_attention.h"
#include "rank/cuda/linear.h"
#include "rank/cuda/logits_head.cuh"
#include "rank/cuda/nccl_comm.h"
#include "rank/cuda/one_row_fusion.h"
#include "rank/cuda/op_profiler.h"
#include "rank/cuda/rope_tables.h"
#include "rank/cuda/score_head.cuh"
#include "rank/logits_gather.h"
#include "rank/model_runner.h"
#include "rank/step_metadata.h"

namespace llama2 {
namespace {

// cuBLAS workspace, given explicitly so that GEMMs can be captured into CUDA graphs.
constexpr size_t kCublasWorkspace = size_t{32} << 20;
static_assert(kGemvKnobMaxRows == kernels::kGemvMaxRows, "LLAMA2_GEMV's range is the kernel's");
// Held back from the KV budget for CUDA graphs, NCCL's lazily created buffers and fragmentation.
constexpr uint64_t kGraphSlack = uint64_t{512} << 20;

kernels::PrefillKernel prefill_kernel_of(PrefillKernelChoice k) {
  return k == PrefillKernelChoice::kWmma  ? kernels::PrefillKernel::kWmma
         : k == PrefillKernelChoice::kMma ? kernels::PrefillKernel::kMma
                                          : kernels::PrefillKernel::kAuto;
}
kernels::DecodeKernel decode_kernel_of(DecodeKernelChoice k) {
  return k == DecodeKernelChoice::kBlock  ? kernels::DecodeKernel::kBlock
         : k == DecodeKernelChoice::kWarp ? kernels::DecodeKernel::kWarp
                                          : kernels::DecodeKernel::kAuto;
}

// T: weights and activations; C: KV cache elements (T, or __nv_fp8_e4m3 for fp16/bf16).
template <typename T, typename C = T>
class CudaModel final : public ModelRunner {
 public:
  CudaModel(const ModelConfig& c, const ShardPlan& s, const ResolvedConfig& o,
            const CudaPlacement& p)
      : c_(c), s_(s), opt_(o), device_(p.device) {
    CUDA_CHECK(cudaSetDevice(p.device));
    for (int r = 0; r < s.tp; ++r) all_shards_.push_back(make_shard_plan(c, s.tp, r));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    comm_ = std::make_unique<NcclComm>(MPI_Comm_f2c(p.mpi_comm), stream_, o.knobs.custom_allreduce,
                                       o.knobs.fuse_allreduce_norm);
    if (o.deterministic) {  // every all-reduce (at most a step's rows x hidden) in rank order
      comm_->use_rank_order(static_cast<size_t>(o.max_step_tokens) * c.hidden_size * sizeof(T));
    }
    if (o.knobs.op_profile) prof_ = std::make_unique<OpProfiler>(comm_->rank());
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    cublas_ws_ = DeviceBuffer(kCublasWorkspace, "cuBLAS workspace");
    CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_.as<void>(), kCublasWorkspace));
    allocate_activations();
    rope_ = std::make_unique<RopeTables>(c_, s.head_dim, o.max_seq_len, o.max_step_tokens);
    rope_step_ = rope_->position_table();
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, p.device));
    device_name_ = prop.name;
    const int64_t d = s.head_dim;
    linear_ = std::make_unique<CudaLinear<T>>(
        o.weight_dtype,
        LinearRouting{o.knobs.gemv_rows, o.knobs.w8a16_rows, o.knobs.skinny_rows, o.knobs.fp8_w8a16,
                      o.knobs.fp8_fuse, o.deterministic},
        o.max_step_tokens,
        ProjectionDims{c.hidden_size, s.num_heads * d, s.num_kv_heads * d, s.ffn_size}, cublas_,
        stream_, o.knobs.qgemv);
    // After the projections' checks (an fp8 width the GPU cannot take fails before loading).
    weights_ = load_cuda_weights<T>(c, s, p.weights, o.synthetic_seed, stream_, o.weight_dtype);
    if (o.knobs.fp8_tune) {
      linear_->tune_fp8(weights_.layers, fp8_tuned_row_counts(graph_cap(), o.max_step_tokens));
    }
    one_row_ = one_row_fusion<T>(o.knobs, s.tp, *linear_, weights_.layers[0], x_.as<T>(),
                                 h_.as<T>(), attn_.as<T>(), act_.as<T>(), c.hidden_size,
                                 s.num_heads * d, s.ffn_size, rope_->freqs().table != nullptr);
    // The tuning knobs (common/tuning_knobs.h), parsed once at start-up.
    kernels::set_programmatic_launch(o.knobs.pdl);
    kernels::set_gemv_prefetch_budget(int64_t{o.knobs.gemv_prefetch_kb} << 10);
    decode_kernel_ = decode_kernel_of(o.knobs.decode_kernel);
    prefill_kernel_ = prefill_kernel_of(o.knobs.prefill_kernel);
  }

  ~CudaModel() override {
    if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  int dtype_bytes() const override { return sizeof(T); }
  int kv_dtype_bytes() const override { return sizeof(C); }
  uint64_t weight_bytes() const override { return weights_.bytes; }
  uint64_t kv_cache_bytes() const override { return kv_.bytes(); }

  std::string device_description() const override {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    std::ostringstream os;
    os << "GPU " << device_ << " (" << device_name_ << ", " << kernels::dtype_name<T>() << ", KV "
       << kernels::dtype_name<C>() << ", " << format_bytes(static_cast<int64_t>(free_b))
       << " free of " << format_bytes(static_cast<int64_t>(total_b)) << ")";
    return os.str();
  }

  int64_t kv_blocks_that_fit(int block_size) const override {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // What this rank may still take: fraction x total, minus what the process (and any other
    // tenant) already holds, minus the slack graphs and NCCL take later. The arithmetic after
    // that is the planner's (capacity.h), so `llama2 plan` and the engine agree.
    const int64_t allowed = static_cast<int64_t>(opt_.gpu_memory_fraction * total_b) -
                            static_cast<int64_t>(total_b - free_b) -
                            static_cast<int64_t>(kGraphSlack);
    const uint64_t block_bytes = kv_bytes_per_token(c_, s_, sizeof(C)) * block_size;
    return llama2::kv_blocks_that_fit(std::min<int64_t>(allowed, free_b), block_bytes);
  }

  void allocate_kv(const KvCacheSpec& kv) override {
    kv_spec_ = kv;
    LLAMA2_CHECK(kv.block_size > 0 && kv.num_blocks > 0);
    layout_ = StepLayout(opt_.max_step_tokens, opt_.max_batch, opt_.max_seq_len, kv.block_size,
                         kv.num_blocks);
    meta_host_ = PinnedBuffer(layout_.words() * sizeof(int32_t));
    meta_dev_ = DeviceBuffer(layout_.words() * sizeof(int32_t), "step metadata");
    const int32_t* m = meta_dev_.as<int32_t>();
    dm_ = DeviceMeta{m + layout_.tokens_at(),       m + layout_.pos_at(),
                     m + layout_.slot_at(),         m + layout_.logit_rows_at(),
                     m + layout_.cu_tokens_at(),    m + layout_.pos_begin_at(),
                     m + layout_.context_lens_at(), m + layout_.block_tables_at()};
    layer_elems_ =
        static_cast<size_t>(kv.num_blocks) * s_.num_kv_heads * kv.block_size * s_.head_dim;
    kv_ = DeviceBuffer(2 * c_.num_layers * layer_elems_ * sizeof(C), "KV cache");
    CUDA_CHECK(cudaMemsetAsync(kv_.as<void>(), 0, kv_.bytes(), stream_));
    // Decode attention workspace for every batch size and every context bound up to the longest
    // sequence (graphs pass their context bucket, mixed steps their longest decode row).
    size_t ws = 0;
    for (int b = 1; b <= opt_.max_batch; ++b) {
      ws = std::max(ws, kernels::attention_decode_workspace_bytes(
                            b, s_.num_heads, s_.num_kv_heads, s_.head_dim,
                            layout_.max_blocks * kv.block_size, decode_kernel_));
    }
    decode_ws_ = DeviceBuffer(ws, "decode attention workspace");
    if (opt_.knobs.prefill_split) {
      prefill_ws_ = DeviceBuffer(kernels::attention_prefill_workspace_bytes(s_.head_dim),
                                 "prefill attention workspace");
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (prof_ == nullptr && opt_.knobs.warmup) warm_up();
  }

  // Runs, once at start-up on every rank (collectively, like any step), a full-size prefill step
  // and a decode step of every graph batch bucket at the shortest context bucket, so that neither
  // the first request nor the first step of each batch size pays for lazy kernel loading, cuBLAS
  // heuristics or a graph capture (measured on 7B/H200: a cold first prefill took 137-176 ms
  // instead of ~55, each new bucket ~10 ms more on first use). Dummy tokens write garbage into
  // free KV blocks only; no sequence exists yet. Longer context buckets are captured on first use.
  void warm_up() {
    const int bs = kv_spec_.block_size, blocks = kv_spec_.num_blocks;
    const int n = std::min({opt_.max_step_tokens, opt_.max_seq_len, blocks * bs});
    std::vector<int32_t> ids(static_cast<size_t>(std::max(blocks, opt_.max_batch)));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % blocks);
    const std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
    StepPlan prefill;
    prefill.candidates = 1;
    append_seq(&prefill, 0, 0, tokens.data(), n, true, ids.data(), (n + bs - 1) / bs);
    forward(prefill, nullptr);
    // graph_bucket: 0 past the largest graph batch (and for every batch without graphs).
    for (int b = graph_bucket(1); b > 0; b = graph_bucket(b + 1)) {
      StepPlan decode;
      decode.candidates = 1;
      for (int i = 0; i < b; ++i) append_seq(&decode, i, 0, tokens.data(), 1, true, &ids[i], 1);
      forward(decode, nullptr);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // A kScore step: the forward pass of every token (no graph: n_logits is 0 everywhere, so
  // body() computes no logit rows), then ScoreHead over all T normed rows.
  void score(const StepPlan& plan, std::vector<double>* logprobs) override {
    LLAMA2_CHECK(kv_.bytes() > 0 && plan.kind == StepKind::kScore);
    LLAMA2_CHECK(plan.targets.size() == plan.tokens.size());
    for (int32_t t : plan.targets) {
      if (t >= c_.vocab_size) {
        throw Error("score step: target id " + std::to_string(t) +
                    " is outside the vocabulary [0, " + std::to_string(c_.vocab_size) + ")");
      }
    }
    if (!score_head_) {
      score_head_ = std::make_unique<ScoreHead<T>>(opt_.max_step_tokens, s_, comm_->rank() == 0);
    }
    if (plan.seqs.empty()) {
      if (logprobs != nullptr) logprobs->clear();
      return;
    }
    const StepShape shape = fill_step_metadata(plan, layout_, 0, meta_host_.as<int32_t>());
    CUDA_CHECK(cudaMemcpyAsync(meta_dev_.as<void>(), meta_host_.as<void>(),
                               shape.words_used * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
    rope_step_ = rope_->rescaled(plan) ? rope_->upload(plan, stream_) : rope_->position_table();
    body(shape);
    const DeviceBuffer& head = c_.tie_word_embeddings ? weights_.embed : weights_.lm_head;
    score_head_->run(h_.as<T>(), head.as<T>(), TypeInfo<T>::kCuda, plan.total_tokens(),
                     c_.hidden_size, plan.targets, all_shards_, s_, *comm_, cublas_, stream_,
                     logprobs);
  }

  void forward(const StepPlan& plan, StepLogits* out) override {
    LLAMA2_CHECK(kv_.bytes() > 0);
    const int S = static_cast<int>(plan.seqs.size());
    const int rows = plan.logit_rows();
    if (S == 0) return;
    // A step with a dynamically rescaled sequence reads another RoPE table: no graph.
    const bool rescaled = rope_->rescaled(plan);
    const int bucket = !rescaled && is_decode_step(plan) && prof_ == nullptr ? graph_bucket(S) : 0;
    const StepShape shape = fill_step_metadata(plan, layout_, bucket, meta_host_.as<int32_t>(),
                                               bucket > 0 ? context_bucket(plan) : 0);
    // The previous step's copy has completed (forward ends with a stream wait), so the pinned
    // array may be rewritten; the graph reads meta_dev_ at fixed addresses.
    CUDA_CHECK(cudaMemcpyAsync(meta_dev_.as<void>(), meta_host_.as<void>(),
                               shape.words_used * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
    rope_step_ = rescaled ? rope_->upload(plan, stream_) : rope_->position_table();
    if (bucket > 0) {
      graphs_.launch({shape.seqs, shape.max_context}, stream_, [&] { body(shape); });
    } else {
      body(shape);
    }
    mark("select_gather");
    logits_head_->gather(plan, rows, *comm_, stream_, out);
    if (prof_) {
      prof_->report("tokens " + std::to_string(shape.tokens) + " seqs " + std::to_string(S) +
                        " decode_seqs " + std::to_string(shape.decode ? S : shape.decode_seqs) +
                        " logit_rows " + std::to_string(rows),
                    stream_);
    }
  }

 private:
  // Device addresses of the StepLayout regions.
  struct DeviceMeta {
    const int32_t *tokens, *pos, *slot, *logit_rows, *cu_tokens, *pos_begin, *context_lens,
        *block_tables;
  };

  void allocate_activations() {
    const int64_t Tm = opt_.max_step_tokens, H = c_.hidden_size, d = s_.head_dim;
    const int64_t nq = s_.num_heads * d, nkv = s_.num_kv_heads * d, F = s_.ffn_size;
    const int64_t Rm = opt_.max_batch;
    auto buf = [](int64_t elems, size_t elem_bytes, const char* what) {
      return DeviceBuffer(static_cast<size_t>(elems) * elem_bytes, what);
    };
    x_ = buf(Tm * H, sizeof(T), "residual stream");
    h_ = buf(Tm * H, sizeof(T), "normed activations");
    qkv_ = buf(Tm * (nq + 2 * nkv), sizeof(T), "qkv activations");
    attn_ = buf(Tm * nq, sizeof(T), "attention output");
    partial_ = buf(Tm * H, sizeof(T), "row-parallel partial sums");
    gate_up_ = buf(Tm * 2 * F, sizeof(T), "gate|up activations");
    act_ = buf(Tm * F, sizeof(T), "SwiGLU output");
    last_ = buf(Rm * H, sizeof(T), "last-token rows");
    logits_head_ = std::make_unique<LogitsHead<T>>(static_cast<int>(Rm), c_, s_, all_shards_,
                                                   comm_->rank() == 0, opt_.deterministic);
  }

  // Decode batches are padded up to graph_batch_bucket sizes (step_metadata.h), one graph each,
  // up to graph_cap() rows.
  int graph_cap() const {
    return std::min({opt_.max_graph_batch, opt_.max_batch, opt_.max_step_tokens});
  }
  int graph_bucket(int S) const { return graph_batch_bucket(S, graph_cap()); }

  int context_bucket(const StepPlan& plan) const {
    int longest = 1;
    for (const SeqStep& q : plan.seqs) longest = std::max(longest, q.pos_begin + q.n_tokens);
    return graph_context_bound(longest, layout_.max_blocks * layout_.block_size);
  }

  kernels::PagedKvCache<C> cache(int layer) const {
    kernels::PagedKvCache<C> kc;
    kc.k = kv_.as<C>() + (2 * static_cast<size_t>(layer)) * layer_elems_;
    kc.v = kc.k + layer_elems_;
    kc.num_blocks = kv_spec_.num_blocks;
    kc.kv_heads = s_.num_kv_heads;
    kc.block_size = kv_spec_.block_size;
    kc.head_dim = s_.head_dim;
    return kc;
  }

  // Decode-sized products (M <= LLAMA2_GEMV rows) stream the weights with the GEMV kernel; larger
  // M (prefill, big batches) are tensor-core GEMMs; both in the weight dtype (linear.h).
  // x_quantized: x's e4m3 rows are in linear_->fp8_rows(M) already (CudaLinear::matmul).
  void gemm(const DeviceBuffer& x, const LinearWeight& w, const DeviceBuffer& y, int M, int N,
            int K, bool x_quantized = false) {
    linear_->matmul(x.as<T>(), w, y.as<T>(), M, N, K, {}, x_quantized);
  }

  // LLAMA2_OP_PROFILE: the GPU time from here to the next mark is charged to `op`.
  void mark(const char* op) {
    if (prof_) prof_->mark(op, stream_);
  }

  void all_reduce(const DeviceBuffer& b, int64_t elems) {
    comm_->all_reduce_sum(b.as<void>(), static_cast<size_t>(elems), TypeInfo<T>::kComm);
  }

  // A row-parallel projection (o, down) into the residual stream, then the next norm into h_:
  // partial_ = x . W^T, reduce_add_rmsnorm. fp8 W8A8 on one rank: the product's unscaled sums go
  // straight into the residual add, which applies their scales (no scale launch, no partial_).
  // Returns whether h_'s rows went to q8 too.
  bool project_add_rmsnorm(const DeviceBuffer& x, const LinearWeight& w, int tokens, int K,
                           bool x_quantized, const DeviceBuffer& norm_weight,
                           kernels::RowsE4m3 q8) {
    const int H = c_.hidden_size;
    if (s_.tp == 1 && linear_->fp8_rows(tokens).on()) {
      const kernels::ScaledSums sums =
          linear_->matmul_sums(x.as<T>(), w, tokens, H, K, x_quantized);
      mark("add_rmsnorm");
      CUDA_CHECK(kernels::launch_add_rmsnorm_scaled<T>(
          x_.as<T>(), sums, norm_weight.as<T>(), tokens, H, static_cast<float>(c_.rms_norm_eps),
          h_.as<T>(), stream_, q8));
      return q8.on();
    }
    gemm(x, w, partial_, tokens, H, K, x_quantized);
    return reduce_add_rmsnorm(tokens, norm_weight, q8);
  }

  // The reduction point after a row-parallel projection (O, down): x_ += the sum over the group
  // of partial_ [T, H], then h_ = rmsnorm(x_) * weight. Fused in one pass when the communicator
  // can (Comm::all_reduce_add_rmsnorm, whose time the profile then charges to all_reduce);
  // otherwise the all-reduce, then the add_rmsnorm kernel.
  // Returns whether h_'s rows went to q8 too (not when the one-shot all-reduce did the norm).
  bool reduce_add_rmsnorm(int tokens, const DeviceBuffer& weight, kernels::RowsE4m3 q8 = {}) {
    const int H = c_.hidden_size;
    const AddRmsNorm norm{x_.as<void>(),
                          weight.as<void>(),
                          h_.as<void>(),
                          tokens,
                          H,
                          static_cast<float>(c_.rms_norm_eps)};
    mark("all_reduce");
    if (comm_->all_reduce_add_rmsnorm(partial_.as<void>(), TypeInfo<T>::kComm, norm)) return false;
    all_reduce(partial_, static_cast<int64_t>(tokens) * H);
    mark("add_rmsnorm");
    CUDA_CHECK(kernels::launch_add_rmsnorm<T>(x_.as<T>(), partial_.as<T>(), weight.as<T>(), tokens,
                                              H, norm.eps, h_.as<T>(), stream_, q8));
    return q8.on();
  }

  // attn_ = attention of every token over its sequence's cache. The leading one-token sequences
  // (all of a decode step; the decoding rows of a mixed step) take the decode kernel, split along
  // the context and reading each KV head once per group; the rest take the prefill kernel, whose
  // 64-row query tiles would be 63/64 idle on a one-token sequence. LLAMA2_MIXED_DECODE=0 sends
  // the decoding rows of mixed steps through the prefill kernel instead (for A/B runs).
  void attention(const StepShape& sh, int layer, const T* q, int qkv_ld) {
    const bool mixed_decode = opt_.knobs.mixed_decode;
    const DeviceMeta& m = dm_;
    if (opt_.deterministic) {  // every row through one batch-invariant kernel
      const InvariantAttentionRows rows{m.block_tables,   layout_.max_blocks, m.cu_tokens,
                                        m.pos_begin,      m.context_lens,     sh.seqs,
                                        sh.max_new_tokens};
      return attention_invariant(cache(layer), q, qkv_ld, rows,
                                 sh.decode ? sh.seqs : sh.decode_seqs, s_.num_heads, attn_.as<T>(),
                                 stream_);
    }
    const int nd = sh.decode ? sh.seqs : (mixed_decode ? sh.decode_seqs : 0);
    if (nd > 0) {
      kernels::DecodeAttentionArgs<T, C> a;
      a.q = q;  // row s is sequence s's one token: the decode part is the first nd rows
      a.q_stride = qkv_ld;
      a.cache = cache(layer);
      a.block_tables = m.block_tables;
      a.max_blocks = layout_.max_blocks;
      a.context_lens = m.context_lens;
      a.num_seqs = nd;
      a.heads = s_.num_heads;
      a.max_context = sh.decode ? sh.max_context : sh.decode_context;
      a.out = attn_.as<T>();
      a.workspace = decode_ws_.as<void>();
      a.workspace_bytes = decode_ws_.bytes();
      a.kernel = decode_kernel_;
      a.min_partition = opt_.knobs.decode_min_partition;
      CUDA_CHECK(kernels::launch_attention_decode(a, stream_));
    }
    if (nd < sh.seqs) {
      // Sequences [nd, seqs): cu_tokens holds absolute rows, so q and out stay at row 0.
      kernels::PrefillAttentionArgs<T, C> a;
      a.q = q;
      a.q_stride = qkv_ld;
      a.cache = cache(layer);
      a.block_tables = m.block_tables + static_cast<int64_t>(nd) * layout_.max_blocks;
      a.max_blocks = layout_.max_blocks;
      a.cu_tokens = m.cu_tokens + nd;
      a.pos_begin = m.pos_begin + nd;
      a.num_seqs = sh.seqs - nd;
      a.heads = s_.num_heads;
      a.max_new_tokens = sh.max_new_tokens;
      a.out = attn_.as<T>();
      a.kernel = prefill_kernel_;
      a.max_kv_len = sh.max_context;  // every sequence's: a bound for the prefill ones
      a.workspace = prefill_ws_.as<void>();
      a.workspace_bytes = prefill_ws_.bytes();
      a.mma_kv_splits = opt_.knobs.prefill_split ? 0 : 1;
      CUDA_CHECK(kernels::launch_attention_prefill(a, stream_));
    }
  }

  // The forward pass up to the logit rows' LM-head output logits_[rows, vocab_local]. Every
  // pointer and size comes from `shape` and fixed buffers, so the same launches can be captured.
  void body(const StepShape& sh) {
    const int T_ = sh.tokens, H = c_.hidden_size, d = s_.head_dim;
    const int nq = s_.num_heads * d, nkv = s_.num_kv_heads * d, F = s_.ffn_size;
    const int qkv_ld = nq + 2 * nkv;
    const float eps = static_cast<float>(c_.rms_norm_eps);
    const DeviceMeta& m = dm_;
    const bool fused = T_ == 1 && one_row_.norms;
    const bool rope_in_gemv = T_ == 1 && one_row_.rope;
    // fp8 W8A8 steps: the norms write h_ in e4m3 too, and gate|up writes act only in e4m3, so no
    // product but o's quantizes its own input; qkv's scales ride in the RoPE kernel and, on one
    // rank, o's and down's in the residual add ({} otherwise: CudaLinear::fp8_rows).
    const kernels::RowsE4m3 q8 = linear_->fp8_rows(T_);
    bool h_quantized = q8.on();
    using Fusion = kernels::GemvFusion<T>;
    const Fusion add_to_x{nullptr, 0.f, true};  // x_ += the product (the residual stream)

    mark("embedding");
    CUDA_CHECK(kernels::launch_embedding<T>(m.tokens, T_, weights_.embed.as<T>(), s_.vocab_begin,
                                            s_.vocab_size, H, x_.as<T>(), stream_));
    mark("all_reduce");
    all_reduce(x_, static_cast<int64_t>(T_) * H);  // vocab-parallel: one rank owns each row
    if (!fused) {
      mark("add_rmsnorm");
      CUDA_CHECK(kernels::launch_rmsnorm<T>(x_.as<T>(), weights_.layers[0].attn_norm.as<T>(), T_, H,
                                            eps, h_.as<T>(), stream_, q8));
    }
    for (int l = 0; l < c_.num_layers; ++l) {
      const CudaLayerWeights& L = weights_.layers[l];
      mark("qkv_gemm");
      kernels::ScaledSums qkv_sums;  // fp8 W8A8: the sums, scaled by the RoPE kernel
      T* q = qkv_.as<T>();           // rotated in place, or written from the sums
      const kernels::RopeKvTokens tok{rope_step_.rows ? rope_step_.rows : m.pos, m.slot, T_};
      const kernels::RopeFreqs& freqs = *rope_step_.freqs;
      if (fused || rope_in_gemv) {  // the norm and / or RoPE + the KV write in the GEMV
        const Fusion f{fused ? L.attn_norm.as<T>() : nullptr, eps, false,
                       rope_in_gemv ? kernels::gemv_rope_kv<T>(cache(l), tok, s_.num_heads, freqs)
                                    : kernels::GemvRopeKv{}};
        linear_->matmul(fused ? x_.as<T>() : h_.as<T>(), L.qkv, q, 1, qkv_ld, H, f);
      } else if (q8.on()) {
        qkv_sums = linear_->matmul_sums(h_.as<T>(), L.qkv, T_, qkv_ld, H, h_quantized);
      } else {
        gemm(h_, L.qkv, qkv_, T_, qkv_ld, H, h_quantized);  // [T, q | k | v]
      }
      if (!rope_in_gemv) {
        mark("rope_kv");
        if (qkv_sums.on()) {
          CUDA_CHECK(kernels::launch_rope_kv_scaled(qkv_sums, qkv_ld, q, qkv_ld, s_.num_heads, tok,
                                                    freqs, cache(l), stream_));
        } else {
          CUDA_CHECK(kernels::launch_rope_kv(q, qkv_ld, q + nq, qkv_ld, q + nq + nkv, qkv_ld,
                                             s_.num_heads, tok, freqs, cache(l), stream_));
        }
      }
      mark("attention");
      attention(sh, l, q, qkv_ld);
      mark("o_gemm");
      if (fused) {
        linear_->matmul(attn_.as<T>(), L.o, x_.as<T>(), 1, H, nq, add_to_x);
      } else {
        h_quantized = project_add_rmsnorm(attn_, L.o, T_, nq, false, L.mlp_norm, q8);
      }
      // One-row steps: gate|up GEMV with SwiGLU in its epilogue (one launch, no [T, 2F] buffer).
      mark("gate_up_gemm");
      if (fused) {  // rmsnorm(x_) * mlp_norm in the GEMV
        linear_->gate_up_swiglu(x_.as<T>(), L.gate_up, act_.as<T>(), 1, F, H,
                                Fusion{L.mlp_norm.as<T>(), eps, false});
      } else if (!linear_->gate_up_swiglu(h_.as<T>(), L.gate_up, act_.as<T>(), T_, F, H, {},
                                          h_quantized, q8.on())) {
        gemm(h_, L.gate_up, gate_up_, T_, 2 * F, H);
        mark("swiglu");
        CUDA_CHECK(kernels::launch_swiglu<T>(gate_up_.as<T>(), T_, F, act_.as<T>(), stream_));
      }
      mark("down_gemm");
      const bool last = l + 1 == c_.num_layers;
      if (fused) {
        linear_->matmul(act_.as<T>(), L.down, x_.as<T>(), 1, H, F, add_to_x);
        if (last) {  // the final norm, for the LM head
          mark("add_rmsnorm");
          CUDA_CHECK(kernels::launch_rmsnorm<T>(x_.as<T>(), weights_.final_norm.as<T>(), 1, H, eps,
                                                h_.as<T>(), stream_));
        }
        continue;
      }
      // Then the next layer's attention norm, or after the last layer the final norm (only the
      // logit rows go through the LM head, in T). With q8 on, act exists only in e4m3.
      const DeviceBuffer& next_norm = last ? weights_.final_norm : weights_.layers[l + 1].attn_norm;
      h_quantized = project_add_rmsnorm(act_, L.down, T_, F, q8.on(), next_norm,
                                        last ? kernels::RowsE4m3{} : q8);
    }
    // Gathering rows of h by index is an embedding lookup into h ([T, H] as the "table").
    mark("lm_head");
    CUDA_CHECK(kernels::launch_embedding<T>(m.logit_rows, sh.logit_rows, h_.as<T>(), 0, T_, H,
                                            last_.as<T>(), stream_));
    const DeviceBuffer& head = c_.tie_word_embeddings ? weights_.embed : weights_.lm_head;
    linear_->matmul_plain(last_.as<T>(), head.as<T>(), logits_head_->logits().template as<T>(),
                          sh.logit_rows, s_.vocab_size, H);
  }

  ModelConfig c_;
  ShardPlan s_;
  ResolvedConfig opt_;
  int device_ = 0;
  std::vector<ShardPlan> all_shards_;
  std::string device_name_;
  std::unique_ptr<CudaLinear<T>> linear_;  // the projections in the weight dtype
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<NcclComm> comm_;    // the TP group, on stream_
  std::unique_ptr<OpProfiler> prof_;  // LLAMA2_OP_PROFILE only
  kernels::DecodeKernel decode_kernel_ = kernels::DecodeKernel::kAuto;
  kernels::PrefillKernel prefill_kernel_ = kernels::PrefillKernel::kAuto;
  CudaWeights weights_;
  StepLayout layout_;
  PinnedBuffer meta_host_;  // [layout_.words()] int32, filled per step
  DeviceBuffer meta_dev_;   // the same on the device
  DeviceMeta dm_{};
  std::unique_ptr<RopeTables> rope_;
  RopeTables::Step rope_step_;  // what this step's RoPE launches read (set before body())
  KvCacheSpec kv_spec_;
  size_t layer_elems_ = 0;  // elements of one layer's K (or V) cache
  DeviceBuffer kv_;         // [layers][K, V][num_blocks, kv_local, block_size, head_dim]
  DeviceBuffer decode_ws_, prefill_ws_, cublas_ws_;
  OneRowFusion one_row_;  // batch-1 GEMV fusions
  // Activations, sized for max_step_tokens (T) and max_batch logit rows (R).
  DeviceBuffer x_, h_, partial_;                // [T, H]
  DeviceBuffer qkv_;                            // [T, q_local + 2 kv_local]
  DeviceBuffer attn_;                           // [T, q_local]
  DeviceBuffer gate_up_;                        // [T, 2 F_local]
  DeviceBuffer act_;                            // [T, F_local]
  DeviceBuffer last_;                           // [R, H]
  std::unique_ptr<LogitsHead<T>> logits_head_;  // the logit rows: [R, vocab_local] to rank 0
  std::unique_ptr<ScoreHead<T>> score_head_;    // kScore steps; made by the first one
  // (decode batch bucket, context bucket) -> graph
  GraphCache graphs_;  // decode steps, by (batch bucket, context bound)
};

}  // namespace

bool cuda_backend_built() {
  return true;
}

std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig& config, const ShardPlan& shard,
                                              const ResolvedConfig& settings,
                                              const CudaPlacement& placement) {
  if (!cuda_supports_head_dim(shard.head_dim)) {
    throw Error("the CUDA kernels support head_dim 64 and 128 (this model: " +
                std::to_string(shard.head_dim) + "); use --backend cpu");
  }
  // The engine's choose_kv_dtype has validated the pair: the model dtype, or fp8 for fp16/bf16.
  const bool fp8 = settings.kv_cache_dtype == KvCacheDType::kFp8E4m3;
  LLAMA2_CHECK(!fp8 || settings.dtype != ComputeDType::kFp32);
  switch (settings.dtype) {
    case ComputeDType::kFp16:
      if (fp8) {
        return std::make_unique<CudaModel<__half, __nv_fp8_e4m3>>(config, shard, settings,
                                                                  placement);
      }
      return std::make_unique<CudaModel<__half>>(config, shard, settings, placement);
    case ComputeDType::kBf16:
      if (fp8) {
        return std::make_unique<CudaModel<__nv_bfloat16, __nv_fp8_e4m3>>(config, shard, settings,
                                                                         placement);
      }
      return std::make_unique<CudaModel<__nv_bfloat16>>(config, shard, settings, placement);
    case ComputeDType::kFp32:
      return std::make_unique<CudaModel<float>>(config, shard, settings, placement);
    case ComputeDType::kAuto:
      break;
  }
  throw Error(std::string("--dtype must be one of fp16, bf16, fp32 for the cuda backend (got \"") +
              to_string(settings.dtype) + "\")");
}

}  // namespace llama2
