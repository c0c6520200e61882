#include "rank/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/capacity.h"
#include "common/check.h"
#include "rank/cpu_threads.h"
#include "rank/fp8_checkpoint.h"
#include "rank/int4_checkpoint.h"
#include "rank/local_rank.h"
#include "rank/meta_checkpoint.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"

namespace llama2 {
namespace {

// Validates every tensor's presence, dtype and shape before any rank copies a byte, so that a
// defect is reported identically by every rank rather than by whichever reaches it first. Returns
// a note for the start-up report about an FP8 checkpoint ("" otherwise).
std::string validate_checkpoint(const WeightStore& w, const ModelConfig& c, WeightDType wd,
                                ComputeDType dtype) {
  for (const TensorSlice& t : all_full_tensors(c)) {
    if (!is_int4_slice(c, t)) w.expect_shape(t.name, t.full_shape);
  }
  if (c.quant.int4 != Int4Format::kNone) {
    validate_int4_checkpoint(w, c);
    return "checkpoint " + c.quant.describe() +
           (wd == WeightDType::kInt4
                ? ", run by the 4-bit kernels"
                : std::string(", dequantized to ") + to_string(dtype) + " at load");
  }
  const int input_scales = validate_fp8_checkpoint(w, c);
  if (!c.quant.fp8) return "";
  std::string note = "checkpoint " + c.quant.describe();
  if (input_scales > 0) {
    note += ": " + std::to_string(input_scales) +
            " input_scale tensors not used: activations are quantized per token at run time";
  }
  return note;
}

// "files", or for a checkpoint in several files what this rank read from each of them:
// "2 of 4 files [consolidated.00.pth 81920 B, consolidated.01.pth 16384 B]".
std::string files_read(const WeightStore& w) {
  const std::vector<std::string> names = w.files();
  if (names.size() <= 1) return "files";
  const std::vector<uint64_t> bytes = w.bytes_copied_per_file();
  std::string list;
  int n = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (bytes[i] == 0) continue;
    list += (n++ ? ", " : "") + names[i] + " " + std::to_string(bytes[i]) + " B";
  }
  return std::to_string(n) + " of " + std::to_string(names.size()) + " files [" + list + "]";
}

std::string gather_lines(MPI_Comm comm, const std::string& line) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int len = static_cast<int>(line.size());
  std::vector<int> lens(size);
  MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::vector<int> displs(size, 0);
  for (int r = 1; r < size; ++r) displs[r] = displs[r - 1] + lens[r - 1];
  std::string all(rank == 0 ? static_cast<size_t>(displs[size - 1] + lens[size - 1]) : 0, '\0');
  MPI_CHECK(MPI_Gatherv(line.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                        MPI_CHAR, 0, comm));
  return all;
}

// LLAMA2_TEST_STALL's sleep, said on stderr so that a test log shows where the stall came from.
void stall_for_test(const StallHook& hook, int rank) {
  std::cerr << "llama2: rank " << rank << ": LLAMA2_TEST_STALL: step " << hook.step << " sleeps "
            << (hook.ms > 0 ? std::to_string(hook.ms) + " ms" : "for ever") << std::endl;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(hook.ms > 0 ? hook.ms : 3600000));
  } while (hook.ms == 0);
}

}  // namespace

Backend choose_backend(Backend requested, int visible_devices, int head_dim, std::string* note) {
  const std::string head_reason =
      "the CUDA kernels support head_dim 64 and 128, this model has " + std::to_string(head_dim);
  const bool cuda_can = cuda_supports_head_dim(head_dim);
  switch (requested) {
    case Backend::kCpu:
      return Backend::kCpu;
    case Backend::kAuto:
      if (visible_devices == 0 || !cuda_backend_built()) return Backend::kCpu;
      if (!cuda_can) {
        if (note != nullptr) *note = "auto chose cpu: " + head_reason;
        return Backend::kCpu;
      }
      return Backend::kCuda;
    case Backend::kCuda:
      if (!cuda_backend_built()) {
        throw Error(
            "--backend cuda: this build has no CUDA backend (configured without nvcc or "
            "NCCL, or with -DLLAMA2_CUDA=OFF); use --backend cpu or auto");
      }
      if (visible_devices == 0) {
        throw Error(
            "--backend cuda: no CUDA device is visible (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES); use --backend cpu or auto");
      }
      if (!cuda_can) {
        throw Error("--backend cuda: " + head_reason + "; use --backend cpu or auto");
      }
      return Backend::kCuda;
  }
  throw Error("--backend must be one of cpu, cuda, auto");
}

ComputeDType choose_dtype(ComputeDType requested, Backend backend, const std::string& torch_dtype) {
  if (backend == Backend::kCpu) {
    if (requested != ComputeDType::kAuto && requested != ComputeDType::kFp32) {
      throw Error(std::string("--dtype ") + to_string(requested) +
                  " needs the cuda backend; the cpu backend computes in "
                  "fp32 (use --dtype auto or fp32)");
    }
    return ComputeDType::kFp32;
  }
  if (requested != ComputeDType::kAuto) return requested;
  if (torch_dtype == "bfloat16") return ComputeDType::kBf16;
  if (torch_dtype == "float32") return ComputeDType::kFp32;
  return ComputeDType::kFp16;  // float16 and anything unstated: Llama-2 checkpoints are fp16
}

KvCacheDType choose_kv_dtype(KvCacheDType requested, Backend backend, ComputeDType dtype) {
  if (requested == KvCacheDType::kAuto) return requested;
  if (backend != Backend::kCuda) {
    throw Error(
        "--kv-cache-dtype fp8 needs the cuda backend (the cpu backend keeps "
        "its cache in fp32; use --kv-cache-dtype auto)");
  }
  if (dtype != ComputeDType::kFp16 && dtype != ComputeDType::kBf16) {
    throw Error(std::string("--kv-cache-dtype fp8 needs --dtype fp16 or bf16 (this run: ") +
                to_string(dtype) + ")");
  }
  return KvCacheDType::kFp8E4m3;
}

WeightDType choose_weight_dtype(const EngineConfig& cfg, Backend backend, ComputeDType dtype,
                                const CheckpointQuant& quant) {
  if (cfg.weight_dtype_named != ComputeDType::kAuto && cfg.weight_dtype_named != dtype) {
    throw Error(std::string("--weight-dtype ") + to_string(cfg.weight_dtype_named) +
                " differs from this run's --dtype " + to_string(dtype) +
                ": unquantized weights are held in the compute dtype (use --weight-dtype auto, "
                "fp8 or int8, or --dtype " +
                to_string(cfg.weight_dtype_named) + ")");
  }
  const bool half = dtype == ComputeDType::kFp16 || dtype == ComputeDType::kBf16;
  if (quant.int4 != Int4Format::kNone && backend == Backend::kCuda && half &&
      (cfg.weight_dtype == WeightDType::kInt4 ||
       (cfg.weight_dtype == WeightDType::kAuto && cfg.weight_dtype_named == ComputeDType::kAuto))) {
    // A 4-bit checkpoint on cuda: its packing through the 4-bit kernels where they take it,
    // else dequantized to the compute dtype at load (auto) or refused (int4 asked for).
    if (quant.int4_runs_packed()) return WeightDType::kInt4;
    if (cfg.weight_dtype == WeightDType::kInt4) {
      throw Error(
          "--weight-dtype int4: the 4-bit kernels need contiguous groups of a multiple "
          "of 64 columns; this checkpoint is " +
          quant.describe() + " (use --weight-dtype auto: dequantized at load)");
    }
    return WeightDType::kAuto;
  }
  if (quant.fp8 && cfg.weight_dtype == WeightDType::kAuto &&
      cfg.weight_dtype_named == ComputeDType::kAuto) {
    // An FP8 checkpoint: its e4m3 values as stored where the fp8 path runs (cuda, fp16/bf16
    // activations); elsewhere (cpu, or --dtype fp32) dequantized on load.
    const bool fp8_path =
        backend == Backend::kCuda && (dtype == ComputeDType::kFp16 || dtype == ComputeDType::kBf16);
    return fp8_path ? WeightDType::kFp8 : WeightDType::kAuto;
  }
  if (cfg.weight_dtype == WeightDType::kAuto) return WeightDType::kAuto;
  const char* name = weight_dtype_name(cfg.weight_dtype, dtype);
  if (backend != Backend::kCuda) {
    throw Error(std::string("--weight-dtype ") + name +
                " needs the cuda backend (the cpu backend keeps fp32 weights; use "
                "--weight-dtype auto)");
  }
  if (dtype != ComputeDType::kFp16 && dtype != ComputeDType::kBf16) {
    throw Error(std::string("--weight-dtype ") + name +
                " needs --dtype fp16 or bf16 (this run: " + to_string(dtype) + ")");
  }
  return cfg.weight_dtype;
}

bool choose_deterministic(bool requested, const ResolvedConfig& r) {
  if (!requested || r.backend == Backend::kCpu) return requested;
  // The batch-invariant CUDA kernels (docs/deterministic.md) exist for 16-bit activations,
  // weights and KV cache: name every other choice of this run in one message.
  std::string wrong;
  auto add = [&wrong](const std::string& what) { wrong += (wrong.empty() ? "" : ", ") + what; };
  if (r.dtype != ComputeDType::kFp16 && r.dtype != ComputeDType::kBf16) {
    add(std::string("--dtype fp16 or bf16 (this run: ") + to_string(r.dtype) + ")");
  }
  if (r.weight_dtype != WeightDType::kAuto) {
    add(std::string("--weight-dtype auto, the weights in the model dtype (this run: ") +
        weight_dtype_name(r.weight_dtype, r.dtype) + ")");
  }
  if (r.kv_cache_dtype != KvCacheDType::kAuto) {
    add(std::string("--kv-cache-dtype auto, the KV cache in the model dtype (this run: ") +
        kv_dtype_name(r.kv_cache_dtype, r.dtype) + ")");
  }
  if (wrong.empty()) return true;
  throw Error("--deterministic on the cuda backend needs " + wrong +
              ": its batch-invariant GEMM and attention kernels take 16-bit values only "
              "(docs/deterministic.md); or use --backend cpu");
}

ResolvedConfig resolve_config(const EngineConfig& cfg, const ModelConfig& model,
                              int visible_devices, std::string* note) {
  ResolvedConfig r;
  r.backend = choose_backend(cfg.backend, visible_devices, model.head_dim(), note);
  r.dtype = choose_dtype(cfg.dtype, r.backend, model.torch_dtype);
  r.kv_cache_dtype = choose_kv_dtype(cfg.kv_cache_dtype, r.backend, r.dtype);
  r.weight_dtype = choose_weight_dtype(cfg, r.backend, r.dtype, model.quant);
  // Sequences and logit rows per step: a speculative verify step asks K + 1 rows of a sequence.
  r.max_batch = cfg.max_logit_rows();
  r.max_step_tokens = cfg.max_step_tokens();
  r.max_seq_len = cfg.max_seq_len > 0 ? cfg.max_seq_len : model.max_position_embeddings;
  r.max_graph_batch = cfg.cuda_graphs ? cfg.max_batch : 0;
  r.gpu_memory_fraction = cfg.gpu_memory_fraction;
  r.synthetic_seed = cfg.synthetic_seed;
  r.knobs = cfg.knobs;
  r.deterministic = choose_deterministic(cfg.deterministic, r);
  return r;
}

RankEngine::RankEngine(const EngineConfig& cfg, const ModelConfig& config, MPI_Comm comm,
                       int cpu_default_blocks, const LocalRank* given_local)
    : config_(config), comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));

  const LocalRank local = given_local != nullptr ? *given_local : read_local_rank(comm_);
  const int devices = visible_cuda_devices();
  beat_ = std::make_unique<StepHeartbeat>(comm_);
  plans_ = std::make_unique<PlanChannel>(comm_, beat_.get());

  std::string error;
  std::unique_ptr<WeightStore> weights;
  try {
    settings_ = resolve_config(cfg, config_, devices, &backend_note_);
    if (settings_.backend == Backend::kCuda && local.local_size > devices) {
      // NCCL refuses two ranks of one communicator on one GPU ("invalid usage"): say so up front.
      throw Error(std::to_string(local.local_size) + " ranks on this node share " +
                  std::to_string(devices) +
                  " visible GPU(s), and the CUDA backend runs one rank "
                  "per GPU: start at most " +
                  std::to_string(devices) + " rank(s) per node, or use --backend cpu");
    }
    shard_ = make_shard_plan(config_, size_, rank_);
    for (int r = 0; r < size_; ++r) all_shards_.push_back(make_shard_plan(config_, size_, r));
    if (cfg.block_size <= 0 || cfg.kv_cache_blocks < 0) {
      throw Error("KV cache needs block_size > 0 and num_blocks >= 0 (got " +
                  std::to_string(cfg.block_size) + ", " + std::to_string(cfg.kv_cache_blocks) +
                  ")");
    }
    if (!cfg.synthetic.empty() && settings_.backend != Backend::kCuda) {
      throw Error("--synthetic weights are generated on the GPU: it needs the cuda backend");
    }
    if (cfg.synthetic.empty()) {
      weights = std::make_unique<WeightStore>(open_checkpoint(cfg.model_dir, config_, shard_));
      checkpoint_note_ =
          validate_checkpoint(*weights, config_, settings_.weight_dtype, settings_.dtype);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);

  tp_comm_ = make_mpi_comm(comm_, beat_.get(),
                           settings_.deterministic ? ReduceOrder::kRankOrder : ReduceOrder::kMpi);
  const int device = device_for_local_rank(local.local_rank, devices);
  try {
    if (settings_.backend == Backend::kCuda) {
      runner_ = make_cuda_runner(config_, shard_, settings_,
                                 CudaPlacement{device, weights.get(), MPI_Comm_c2f(comm_)});
    } else {
      runner_ = make_cpu_runner(config_, shard_, *weights, *tp_comm_,
                                cpu_threads_for_rank(cfg.cpu_threads, local.local_size),
                                settings_.knobs.cpu_split);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);
  size_kv_cache(cfg.kv_cache_blocks, cfg.block_size, cpu_default_blocks);

  // The planner's arithmetic and the runner's allocation must agree byte for byte: `llama2 plan`
  // is only trustworthy if it describes what the engine really allocates.
  const int linear_bytes = settings_.weight_dtype == WeightDType::kAuto
                               ? 0
                               : weight_dtype_bytes(settings_.weight_dtype, settings_.dtype);
  LLAMA2_CHECK(shard_weight_bytes(config_, shard_, runner_->dtype_bytes(), linear_bytes) ==
               runner_->weight_bytes());
  LLAMA2_CHECK(kv_bytes_per_token(config_, shard_, runner_->kv_dtype_bytes()) *
                   static_cast<uint64_t>(kv_.block_size) * kv_.num_blocks ==
               runner_->kv_cache_bytes());

  std::ostringstream line;
  line << "rank " << rank_ << "/" << size_ << ": local rank " << local.local_rank << "/"
       << local.local_size << ", backend " << backend_name() << " " << dtype_name()
       << (settings_.weight_dtype == WeightDType::kAuto
               ? std::string()
               : std::string(" (projections ") +
                     weight_dtype_name(settings_.weight_dtype, settings_.dtype) + ")")
       << ", device " << runner_->device_description() << ", heads [" << shard_.head_begin << ","
       << shard_.head_begin + shard_.num_heads << "), kv heads [" << shard_.kv_head_begin << ","
       << shard_.kv_head_begin + shard_.num_kv_heads << "), vocab [" << shard_.vocab_begin << ","
       << shard_.vocab_begin + shard_.vocab_size << "), shard " << runner_->weight_bytes() << " B ("
       << (weights ? "copied " + std::to_string(weights->bytes_copied()) + " B from " +
                         files_read(*weights)
                   : std::string("synthetic ") + cfg.synthetic)
       << "), KV " << kv_.num_blocks << " blocks x " << kv_.block_size
       << " tokens = " << runner_->kv_cache_bytes() << " B " << kv_dtype_name();
  if (!local.note.empty()) line << " [" << local.note << "]";
  if (!backend_note_.empty()) line << " [" << backend_note_ << "]";
  if (!checkpoint_note_.empty()) line << " [" << checkpoint_note_ << "]";
  if (settings_.deterministic) {
    line << (settings_.backend == Backend::kCuda
                 ? " [deterministic: batch-invariant GEMM and attention, all-reduces in rank order]"
                 : " [deterministic: all-reduces sum the ranks in rank order]");
  }
  line << "\n";
  report_ = gather_lines(comm_, line.str());
}

void RankEngine::size_kv_cache(int requested_blocks, int block_size, int cpu_default_blocks) {
  kv_ = KvCacheSpec{block_size, requested_blocks};
  std::string error;
  try {
    // Every rank measures its own GPU; the smallest answer is the one all ranks can honour.
    long long fit = runner_->kv_blocks_that_fit(block_size);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fit, 1, MPI_LONG_LONG, MPI_MIN, comm_));
    if (kv_.num_blocks == 0) {
      kv_.num_blocks =
          fit < 0 ? cpu_default_blocks : static_cast<int>(std::min<long long>(fit, 1 << 30));
      if (kv_.num_blocks <= 0) {
        throw Error("no GPU memory is left for the KV cache after the weights (" +
                    format_bytes(static_cast<int64_t>(runner_->weight_bytes())) +
                    " per GPU) at --gpu-memory-fraction " +
                    std::to_string(settings_.gpu_memory_fraction) +
                    "; use more GPUs or see `llama2 plan`");
      }
    } else if (fit >= 0 && kv_.num_blocks > fit) {
      throw Error("--kv-cache-blocks " + std::to_string(kv_.num_blocks) +
                  " does not fit: " + std::to_string(fit) + " blocks of " +
                  std::to_string(kv_.block_size) + " tokens fit in --gpu-memory-fraction " +
                  std::to_string(settings_.gpu_memory_fraction));
    }
    runner_->allocate_kv(kv_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);
}

RankEngine::~RankEngine() = default;

void RankEngine::run_step(const StepPlan& plan, StepLogits* logits, std::vector<double>* logprobs) {
  const int64_t step = ++steps_;
  if (rank_ != 0) beat_->begin_step(step);  // rank 0 began it before handing out the plan
  const StallHook& stall = settings_.knobs.test_stall;
  if (stall.step == step && stall.rank == world_rank_) stall_for_test(stall, world_rank_);
  if (settings_.knobs.test_step_delay_ms > 0 && rank_ == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(settings_.knobs.test_step_delay_ms));
  }
  if (plan.kind == StepKind::kScore) {
    runner_->score(plan, rank_ == 0 ? logprobs : nullptr);
  } else {
    runner_->forward(plan, rank_ == 0 ? logits : nullptr);
  }
  beat_->end_step(step);
}

void RankEngine::score(const StepPlan& plan, std::vector<double>* logprobs) {
  LLAMA2_CHECK(rank_ == 0 && plan.kind == StepKind::kScore);
  beat_->begin_step(steps_ + 1);
  plans_->send(encode_step_plan(plan));
  run_step(plan, nullptr, logprobs);
}

void RankEngine::execute(const StepPlan& plan, StepLogits* logits) {
  LLAMA2_CHECK(rank_ == 0);
  // The step's clock starts before the hand-over: a worker that never takes its plan stalls it.
  beat_->begin_step(steps_ + 1);
  if (plan.adjust.empty()) {
    plans_->send(encode_step_plan(plan));
    return run_step(plan, logits);
  }
  // Vocabulary adjustments: each rank gets only its slice's mask words and biases.
  std::vector<std::vector<int32_t>> wires(static_cast<size_t>(size_));
  for (int r = 1; r < size_; ++r) {
    const ShardPlan& s = all_shards_[static_cast<size_t>(r)];
    wires[static_cast<size_t>(r)] =
        encode_step_plan(slice_adjustments(plan, s.vocab_begin, s.vocab_size));
  }
  plans_->send(wires);
  run_step(slice_adjustments(plan, shard_.vocab_begin, shard_.vocab_size), logits);
}

void RankEngine::execute(const StepPlan& plan, std::vector<float>* logits) {
  LLAMA2_CHECK(plan.candidates == 0);
  StepLogits out;
  execute(plan, &out);
  *logits = std::move(out.values);
}

void RankEngine::shutdown(int exit_code) {
  LLAMA2_CHECK(rank_ == 0);
  StepPlan plan;
  plan.kind = StepKind::kShutdown;
  plan.exit_code = exit_code;
  plans_->send(encode_step_plan(plan));
}

int RankEngine::worker_loop() {
  LLAMA2_CHECK(rank_ != 0);
  std::vector<int32_t> wire;
  for (;;) {
    plans_->receive(&wire);
    const StepPlan plan = decode_step_plan(wire);
    if (plan.kind == StepKind::kShutdown) return plan.exit_code;
    run_step(plan, nullptr);
  }
}

std::string RankEngine::describe_stall() const {
  LLAMA2_CHECK(rank_ == 0);
  return llama2::describe_stall(beat_->snapshot(), StepHeartbeat::now_ns());
}

std::string RankEngine::exited_ranks() const {
  LLAMA2_CHECK(rank_ == 0);
  return llama2::exited_ranks(beat_->snapshot());
}

}  // namespace llama2
