// Two model directories (or one under two --weight-dtype settings) give the same logits:
//
//   mpirun -np 2 llama2_logits_diff --model A [--weight-dtype W] --against B
//       [--against-weight-dtype W2] [--backend cpu|cuda] [--against-backend cpu|cuda]
//       [--dtype auto|fp16|bf16|fp32] [--tolerance T] [--prompt-len N]
//
// Each engine runs the same prompt (19 tokens, or N) token by token (logits at every position),
// as one prefill, and in chunks of 5 (logits at each chunk end); the two sets of logit rows are
// compared value by value. A long prompt takes the products of many rows (4-bit weights: more
// than kInt4GemmMaxRows go through the dequantized copy and cuBLAS). Used for FP8 checkpoints
// (tests/integration/fp8_checkpoint.sh): the FP8 file against an F32 file of its dequantized
// weights on the CPU backend, and on the GPU against the 16-bit model quantized at load by
// --weight-dtype fp8 (benchmarks/gpu/fp8_checkpoint.sh). With
// --against-backend, B runs on that backend: CUDA against the CPU (checked against transformers)
// for what has no fixture of a CUDA-sized head, e.g. rope_scaling (benchmarks/gpu/rope_check.sh).
// Rank 0 prints each engine's start-up report and a last line:
//   RESULT max_abs_diff=.. compared=.. tolerance=.. status=PASS|FAIL
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/mpi_program.h"
#include "coordinator/scheduler/block_allocator.h"
#include "rank/engine.h"

namespace {

constexpr const char* kUsage =
    "usage: llama2_logits_diff --model A [--weight-dtype W] --against B "
    "[--against-weight-dtype W2] [--backend cpu|cuda] [--against-backend cpu|cuda] "
    "[--dtype auto|fp16|bf16|fp32] [--tolerance T] [--prompt-len N]";

struct Options {
  std::string model, against, weight_dtype = "auto", against_weight_dtype = "auto";
  std::string backend = "cpu", against_backend, dtype = "auto";  // against_backend: backend
  double tolerance = 0.0;
  int prompt_len = 19;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw llama2::Error(a + " needs a value\n" + kUsage);
    const std::string v = argv[i + 1];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--against") {
      o.against = v;
    } else if (a == "--weight-dtype") {
      o.weight_dtype = v;
    } else if (a == "--against-weight-dtype") {
      o.against_weight_dtype = v;
    } else if (a == "--backend") {
      o.backend = v;
    } else if (a == "--against-backend") {
      o.against_backend = v;
    } else if (a == "--dtype") {
      o.dtype = v;
    } else if (a == "--tolerance") {
      o.tolerance = std::stod(v);
    } else if (a == "--prompt-len") {
      o.prompt_len = std::stoi(v);
      if (o.prompt_len < 2)
        throw llama2::Error("--prompt-len must be at least 2\n" + std::string(kUsage));
    } else {
      throw llama2::Error("unknown option " + a + "\n" + kUsage);
    }
  }
  if (o.model.empty() || o.against.empty()) throw llama2::Error(kUsage);
  if (o.against_backend.empty()) o.against_backend = o.backend;
  return o;
}

// Every logit row the three paths produce for `ids`, in a fixed order (rank 0; empty elsewhere).
std::vector<float> run_model(const Options& opt, const std::string& dir,
                             const std::string& weight_dtype, const std::string& backend,
                             const std::vector<int>& ids, int rank) {
  const llama2::ModelConfig config = llama2::load_model_config(dir);
  llama2::EngineConfig cfg;
  cfg.model_dir = dir;
  cfg.backend = llama2::parse_backend(backend);
  cfg.dtype = llama2::parse_compute_dtype(opt.dtype);
  cfg.weight_dtype = llama2::parse_weight_dtype(weight_dtype, &cfg.weight_dtype_named);
  const int n = static_cast<int>(ids.size());
  cfg.max_batch = 1;
  cfg.prefill_chunk = std::max(64, n);  // the whole prompt in one step
  cfg.block_size = 16;
  cfg.kv_cache_blocks = (n + cfg.block_size - 1) / cfg.block_size + 1;
  cfg.cuda_graphs = false;
  llama2::RankEngine engine(cfg, config, MPI_COMM_WORLD);
  if (rank != 0) {
    engine.worker_loop();
    return {};
  }
  std::printf("%s --weight-dtype %s --backend %s:\n%s", dir.c_str(), weight_dtype.c_str(),
              backend.c_str(), engine.startup_report().c_str());
  llama2::BlockAllocator blocks(cfg.kv_cache_blocks, cfg.block_size);
  std::vector<float> all;
  for (const int chunk : {1, n, 5}) {
    std::vector<int> table;
    LLAMA2_CHECK(blocks.ensure(&table, n));
    for (int pos = 0; pos < n; pos += chunk) {
      const int len = std::min(chunk, n - pos);
      llama2::StepPlan plan;
      llama2::append_seq(&plan, 0, pos, ids.data() + pos, len, true, table.data(),
                         llama2::BlockAllocator::blocks_for(pos + len, cfg.block_size));
      std::vector<float> logits;
      engine.execute(plan, &logits);
      all.insert(all.end(), logits.begin(), logits.end());
    }
    blocks.release(&table);
  }
  engine.shutdown(0);
  return all;
}

int run(int argc, char** argv, int rank, int size) {
  const Options opt = parse_options(argc, argv);
  const llama2::ModelConfig config = llama2::load_model_config(opt.model);
  std::vector<int> ids;  // BOS, then a spread of ids over the vocabulary
  ids.push_back(config.bos_token_id);
  for (int i = 1; i < opt.prompt_len; ++i) ids.push_back(3 + (i * 37) % (config.vocab_size - 3));

  const std::vector<float> a = run_model(opt, opt.model, opt.weight_dtype, opt.backend, ids, rank);
  const std::vector<float> b =
      run_model(opt, opt.against, opt.against_weight_dtype, opt.against_backend, ids, rank);
  int ok = 1;
  if (rank == 0) {
    double max_diff = 0.0;
    bool finite = a.size() == b.size() && !a.empty();
    for (size_t i = 0; finite && i < a.size(); ++i) {
      finite = std::isfinite(a[i]) && std::isfinite(b[i]);
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    ok = finite && max_diff <= opt.tolerance;
    std::printf("RESULT np=%d max_abs_diff=%.3g compared=%zu tolerance=%g status=%s\n", size,
                max_diff, a.size(), opt.tolerance, ok ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_logits_diff", argc, argv, run);
}
