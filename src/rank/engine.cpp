#include "rank/engine.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/capacity.h"
#include "common/check.h"
#include "rank/cpu_threads.h"
#include "rank/local_rank.h"
#include "rank/safetensors.h"
#include "rank/weight_layout.h"

namespace llama2 {
namespace {

// Validates every tensor's presence, dtype and shape before any rank copies a byte, so that a
// defect is reported identically by every rank rather than by whichever reaches it first.
void validate_checkpoint(const WeightStore& w, const ModelConfig& c) {
  for (const TensorSlice& t : all_full_tensors(c)) w.expect_shape(t.name, t.full_shape);
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

StallHook parse_stall_hook(const char* text) {
  StallHook h;
  if (text == nullptr || *text == '\0') return h;
  const std::string s = text;
  std::vector<int64_t> v;  // STEP, RANK, MS: unsigned decimal fields separated by ':'
  bool ok = true;
  for (size_t pos = 0; ok;) {
    const size_t end = s.find(':', pos);
    const std::string field = s.substr(pos, end == std::string::npos ? end : end - pos);
    ok = !field.empty() && field.size() <= 12 &&
         field.find_first_not_of("0123456789") == std::string::npos;
    if (ok) v.push_back(std::stoll(field));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  ok = ok && v.size() <= 3 && v[0] >= 1 && (v.size() < 2 || v[1] <= INT_MAX);
  if (!ok) {
    throw Error(
        "LLAMA2_TEST_STALL must be STEP[:RANK[:MS]] with STEP >= 1, RANK >= 0 and MS >= 0 "
        "(0: for ever), e.g. 5:1:3000 (got \"" +
        s + "\")");
  }
  h.step = v[0];
  h.rank = v.size() > 1 ? static_cast<int>(v[1]) : 0;
  h.ms = v.size() > 2 ? v[2] : 0;
  return h;
}

std::string choose_backend(const std::string& requested, int visible_devices, int head_dim,
                           std::string* note) {
  const std::string head_reason =
      "the CUDA kernels support head_dim 64 and 128, this model has " + std::to_string(head_dim);
  if (requested == "cpu") return "cpu";
  if (requested == "auto") {
    if (visible_devices == 0 || !cuda_backend_built()) return "cpu";
    if (!cuda_supports_head_dim(head_dim)) {
      if (note != nullptr) *note = "auto chose cpu: " + head_reason;
      return "cpu";
    }
    return "cuda";
  }
  if (requested == "cuda") {
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
    if (!cuda_supports_head_dim(head_dim)) {
      throw Error("--backend cuda: " + head_reason + "; use --backend cpu or auto");
    }
    return "cuda";
  }
  throw Error("--backend must be one of cpu, cuda, auto (got \"" + requested + "\")");
}

std::string choose_dtype(const std::string& requested, const std::string& backend,
                         const std::string& torch_dtype) {
  if (requested != "auto" && requested != "fp16" && requested != "bf16" && requested != "fp32") {
    throw Error("--dtype must be one of auto, fp16, bf16, fp32 (got \"" + requested + "\")");
  }
  if (backend == "cpu") {
    if (requested != "auto" && requested != "fp32") {
      throw Error("--dtype " + requested +
                  " needs the cuda backend; the cpu backend computes in "
                  "fp32 (use --dtype auto or fp32)");
    }
    return "fp32";
  }
  if (requested != "auto") return requested;
  if (torch_dtype == "bfloat16") return "bf16";
  if (torch_dtype == "float32") return "fp32";
  return "fp16";  // float16 and anything unstated: Llama-2 checkpoints are fp16
}

std::string choose_kv_dtype(const std::string& requested, const std::string& backend,
                            const std::string& dtype) {
  if (requested == "auto") return dtype;
  if (requested != "fp8" && requested != "fp8_e4m3") {
    throw Error("--kv-cache-dtype must be one of auto, fp8, fp8_e4m3 (got \"" + requested + "\")");
  }
  if (backend != "cuda") {
    throw Error("--kv-cache-dtype " + requested +
                " needs the cuda backend (the cpu backend keeps "
                "its cache in fp32; use --kv-cache-dtype auto)");
  }
  if (dtype != "fp16" && dtype != "bf16") {
    throw Error("--kv-cache-dtype " + requested +
                " needs --dtype fp16 or bf16 (this run: " + dtype + ")");
  }
  return "fp8_e4m3";
}

RankEngine::RankEngine(const EngineSpec& spec, const ModelConfig& config, MPI_Comm comm)
    : config_(config), comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));

  MPI_Comm node_comm;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  int shm_rank = 0, shm_size = 1;
  MPI_CHECK(MPI_Comm_rank(node_comm, &shm_rank));
  MPI_CHECK(MPI_Comm_size(node_comm, &shm_size));
  MPI_CHECK(MPI_Comm_free(&node_comm));
  const LocalRank local = resolve_local_rank(shm_rank, shm_size, std::getenv("SLURM_LOCALID"),
                                             std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"));
  const int devices = visible_cuda_devices();
  beat_ = std::make_unique<StepHeartbeat>(comm_);
  plans_ = std::make_unique<PlanChannel>(comm_, beat_.get());

  std::string error;
  std::unique_ptr<WeightStore> weights;
  try {
    backend_ = choose_backend(spec.backend, devices, config_.head_dim(), &backend_note_);
    if (backend_ == "cuda" && local.local_size > devices) {
      // NCCL refuses two ranks of one communicator on one GPU ("invalid usage"): say so up front.
      throw Error(std::to_string(local.local_size) + " ranks on this node share " +
                  std::to_string(devices) +
                  " visible GPU(s), and the CUDA backend runs one rank "
                  "per GPU: start at most " +
                  std::to_string(devices) + " rank(s) per node, or use --backend cpu");
    }
    stall_hook_ = parse_stall_hook(std::getenv("LLAMA2_TEST_STALL"));
    dtype_ = choose_dtype(spec.dtype, backend_, config_.torch_dtype);
    kv_dtype_ = choose_kv_dtype(spec.kv_cache_dtype, backend_, dtype_);
    shard_ = make_shard_plan(config_, size_, rank_);
    if (spec.kv.block_size <= 0 || spec.kv.num_blocks < 0) {
      throw Error("KV cache needs block_size > 0 and num_blocks >= 0 (got " +
                  std::to_string(spec.kv.block_size) + ", " + std::to_string(spec.kv.num_blocks) +
                  ")");
    }
    if (!spec.synthetic.empty() && backend_ != "cuda") {
      throw Error("--synthetic weights are generated on the GPU: it needs the cuda backend");
    }
    if (spec.synthetic.empty()) {
      weights = std::make_unique<WeightStore>(WeightStore::open(spec.model_dir));
      validate_checkpoint(*weights, config_);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);

  tp_comm_ = make_mpi_comm(comm_, beat_.get());
  const int device = device_for_local_rank(local.local_rank, devices);
  try {
    if (backend_ == "cuda") {
      CudaRunnerOptions o;
      o.device = device;
      o.dtype = dtype_;
      o.kv_dtype = kv_dtype_;
      o.weights = weights.get();
      o.synthetic_seed = spec.synthetic_seed;
      o.gpu_memory_fraction = spec.gpu_memory_fraction;
      o.max_batch = spec.max_batch;
      o.max_step_tokens =
          spec.max_step_tokens > 0 ? spec.max_step_tokens : std::max(2048, spec.max_batch);
      o.max_seq_len = spec.max_seq_len > 0 ? spec.max_seq_len : config_.max_position_embeddings;
      o.max_graph_batch = spec.cuda_graphs ? spec.max_batch : 0;
      o.mpi_comm = MPI_Comm_c2f(comm_);
      runner_ = make_cuda_runner(config_, shard_, o);
    } else {
      runner_ = make_cpu_runner(config_, shard_, *weights, *tp_comm_,
                                cpu_threads_for_rank(spec.cpu_threads, local.local_size),
                                cpu_split_from_env());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);
  size_kv_cache(spec);

  // The planner's arithmetic and the runner's allocation must agree byte for byte: `llama2 plan`
  // is only trustworthy if it describes what the engine really allocates.
  LLAMA2_CHECK(shard_weight_bytes(config_, shard_, runner_->dtype_bytes()) ==
               runner_->weight_bytes());
  LLAMA2_CHECK(kv_bytes_per_token(config_, shard_, runner_->kv_dtype_bytes()) *
                   static_cast<uint64_t>(kv_.block_size) * kv_.num_blocks ==
               runner_->kv_cache_bytes());

  std::ostringstream line;
  line << "rank " << rank_ << "/" << size_ << ": local rank " << local.local_rank << "/"
       << local.local_size << ", backend " << backend_ << " " << dtype_ << ", device "
       << runner_->device_description() << ", heads [" << shard_.head_begin << ","
       << shard_.head_begin + shard_.num_heads << "), kv heads [" << shard_.kv_head_begin << ","
       << shard_.kv_head_begin + shard_.num_kv_heads << "), vocab [" << shard_.vocab_begin << ","
       << shard_.vocab_begin + shard_.vocab_size << "), shard " << runner_->weight_bytes() << " B ("
       << (weights ? "copied " + std::to_string(weights->bytes_copied()) + " B from files"
                   : std::string("synthetic ") + spec.synthetic)
       << "), KV " << kv_.num_blocks << " blocks x " << kv_.block_size
       << " tokens = " << runner_->kv_cache_bytes() << " B " << kv_dtype_;
  if (!local.note.empty()) line << " [" << local.note << "]";
  if (!backend_note_.empty()) line << " [" << backend_note_ << "]";
  line << "\n";
  report_ = gather_lines(comm_, line.str());
}

void RankEngine::size_kv_cache(const EngineSpec& spec) {
  kv_ = spec.kv;
  std::string error;
  try {
    // Every rank measures its own GPU; the smallest answer is the one all ranks can honour.
    long long fit = runner_->kv_blocks_that_fit(spec.kv.block_size);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &fit, 1, MPI_LONG_LONG, MPI_MIN, comm_));
    if (kv_.num_blocks == 0) {
      kv_.num_blocks =
          fit < 0 ? spec.cpu_default_blocks : static_cast<int>(std::min<long long>(fit, 1 << 30));
      if (kv_.num_blocks <= 0) {
        throw Error("no GPU memory is left for the KV cache after the weights (" +
                    format_bytes(static_cast<int64_t>(runner_->weight_bytes())) +
                    " per GPU) at --gpu-memory-fraction " +
                    std::to_string(spec.gpu_memory_fraction) +
                    "; use more GPUs or see `llama2 plan`");
      }
    } else if (fit >= 0 && kv_.num_blocks > fit) {
      throw Error("--kv-cache-blocks " + std::to_string(kv_.num_blocks) +
                  " does not fit: " + std::to_string(fit) + " blocks of " +
                  std::to_string(kv_.block_size) + " tokens fit in --gpu-memory-fraction " +
                  std::to_string(spec.gpu_memory_fraction));
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
  if (stall_hook_.step == step && stall_hook_.rank == rank_) stall_for_test(stall_hook_, rank_);
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
  plans_->send(encode_step_plan(plan));
  run_step(plan, logits);
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

}  // namespace llama2
