#include "rank/engine.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/capacity.h"
#include "common/check.h"
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

}  // namespace

std::string choose_backend(const std::string& requested, int visible_devices) {
  // The CUDA model runner lands with its own issue; until then `auto` runs the CPU oracle even
  // where a GPU is visible, and an explicit `cuda` says why it cannot.
  if (requested == "cpu" || requested == "auto") return "cpu";
  if (requested == "cuda") {
    throw Error("--backend cuda: the CUDA backend is not available in this build yet"
                " (visible CUDA devices: " + std::to_string(visible_devices) +
                "); use --backend cpu or auto");
  }
  throw Error("--backend must be one of cpu, cuda, auto (got \"" + requested + "\")");
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

  std::string error;
  std::unique_ptr<WeightStore> weights;
  try {
    backend_ = choose_backend(spec.backend, devices);
    shard_ = make_shard_plan(config_, size_, rank_);
    if (spec.kv.block_size <= 0 || spec.kv.num_blocks <= 0) {
      throw Error("KV cache needs block_size > 0 and num_blocks > 0 (got " +
                  std::to_string(spec.kv.block_size) + ", " + std::to_string(spec.kv.num_blocks) + ")");
    }
    weights = std::make_unique<WeightStore>(WeightStore::open(spec.model_dir));
    validate_checkpoint(*weights, config_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);

  tp_comm_ = make_mpi_comm(comm_);
  for (int r = 0; r < size_; ++r) all_shards_.push_back(make_shard_plan(config_, size_, r));
  try {
    runner_ = make_cpu_runner(config_, shard_, *weights, spec.kv, *tp_comm_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_errors(comm_, error);

  // The planner's arithmetic and the runner's allocation must agree byte for byte (fp32 on CPU):
  // `llama2 plan` is only trustworthy if it describes what the engine really allocates.
  const uint64_t planned_weights = shard_weight_bytes(config_, shard_, sizeof(float));
  const uint64_t planned_kv = kv_bytes_per_token(config_, shard_, sizeof(float)) *
                              static_cast<uint64_t>(spec.kv.block_size) * spec.kv.num_blocks;
  LLAMA2_CHECK(planned_weights == runner_->weight_bytes());
  LLAMA2_CHECK(planned_kv == runner_->kv_cache_bytes());

  std::ostringstream line;
  line << "rank " << rank_ << "/" << size_ << ": local rank " << local.local_rank << "/"
       << local.local_size << ", backend " << backend_ << ", device "
       << (backend_ == "cuda" ? std::to_string(device_for_local_rank(local.local_rank, devices))
                              : std::string("host"))
       << ", heads [" << shard_.head_begin << "," << shard_.head_begin + shard_.num_heads
       << "), kv heads [" << shard_.kv_head_begin << ","
       << shard_.kv_head_begin + shard_.num_kv_heads << "), vocab [" << shard_.vocab_begin << ","
       << shard_.vocab_begin + shard_.vocab_size << "), shard " << runner_->weight_bytes()
       << " B (copied " << weights->bytes_copied() << " B from files), KV " << spec.kv.num_blocks
       << " blocks x " << spec.kv.block_size << " tokens = " << runner_->kv_cache_bytes() << " B";
  if (!local.note.empty()) line << " [" << local.note << "]";
  line << "\n";
  report_ = gather_lines(comm_, line.str());
}

RankEngine::~RankEngine() = default;

void RankEngine::run_local(const StepPlan& plan, std::vector<float>* logits) {
  std::vector<float> local;  // [rows, vocab_local]
  runner_->forward(plan, &local);
  const int rows = plan.logit_rows();
  const std::vector<ShardPlan>& shards = all_shards_;
  std::vector<int> counts(size_);
  for (int r = 0; r < size_; ++r) counts[r] = rows * shards[r].vocab_size;
  std::vector<float> gathered(rank_ == 0 ? static_cast<size_t>(rows) * config_.vocab_size : 0);
  tp_comm_->gather_to_root(local.data(), counts, gathered.data());
  if (rank_ != 0 || logits == nullptr) return;
  // gathered is [rank][rows, vocab_r]; the sampler wants [rows, V] with the vocab in order.
  logits->assign(static_cast<size_t>(rows) * config_.vocab_size, 0.f);
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    for (int row = 0; row < rows; ++row) {
      std::copy_n(gathered.data() + off + static_cast<size_t>(row) * shards[r].vocab_size,
                  shards[r].vocab_size,
                  logits->data() + static_cast<size_t>(row) * config_.vocab_size + shards[r].vocab_begin);
    }
    off += static_cast<size_t>(rows) * shards[r].vocab_size;
  }
}

void RankEngine::execute(const StepPlan& plan, std::vector<float>* logits) {
  LLAMA2_CHECK(rank_ == 0);
  std::vector<int32_t> wire = encode_step_plan(plan);
  broadcast_words(comm_, &wire);
  run_local(plan, logits);
}

void RankEngine::shutdown(int exit_code) {
  LLAMA2_CHECK(rank_ == 0);
  StepPlan plan;
  plan.kind = StepKind::kShutdown;
  plan.exit_code = exit_code;
  std::vector<int32_t> wire = encode_step_plan(plan);
  broadcast_words(comm_, &wire);
}

int RankEngine::worker_loop() {
  LLAMA2_CHECK(rank_ != 0);
  std::vector<int32_t> wire;
  for (;;) {
    broadcast_words(comm_, &wire);
    const StepPlan plan = decode_step_plan(wire);
    if (plan.kind == StepKind::kShutdown) return plan.exit_code;
    run_local(plan, nullptr);
  }
}

}  // namespace llama2
