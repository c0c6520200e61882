// End-to-end benchmark of the CUDA engine at official Llama-2 shapes with synthetic weights:
// decode throughput per batch size, prefill time to first token and model TFLOP/s, GPU memory.
//
//   mpirun -np N llama2_bench_e2e --synthetic 7b --dtype fp16 --batches 1,8,32,64
//       --prompt-len 128 --decode-steps 128 --prefill-lens 512,2048 --json out.json
//   mpirun -np 1 llama2_bench_e2e --batches 1 --verify-lens 1,2,4,8,16 --prefill-lens ""
//       (speculative verification's step cost: K tokens scored per sequence in each step)
// --deterministic runs the engine in that mode (batch-invariant kernels, docs/deterministic.md).
//
// Rank 0 builds every StepPlan by hand (as tests/integration/reference_test.cpp does) and owns the
// KV blocks (coordinator/scheduler/block_allocator.h); the other ranks sit in
// RankEngine::worker_loop. All timings are steady_clock wall time on rank 0 around
// RankEngine::execute(), which returns only when the step's greedy candidates are back on the host,
// so each interval covers the whole step: plan broadcast, metadata upload, forward pass on every
// GPU, NCCL, candidate gather. What is measured and the FLOP formula: benchmarks/e2e/README.md.
#include <cuda_runtime.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cxxopts.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/mpi_program.h"
#include "coordinator/scheduler/block_allocator.h"
#include "rank/comm.h"
#include "rank/engine.h"

namespace {

using llama2::BlockAllocator;
using llama2::Error;
using llama2::StepLogits;
using llama2::StepPlan;
using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

struct Options {
  std::string synthetic, dtype, kv_cache_dtype, weight_dtype, json_path, command;
  std::vector<int> batches, prefill_lens, verify_lens;
  int prompt_len = 0, decode_steps = 0, warmup = 0, repeats = 0, block_size = 0;
  double gpu_memory_fraction = 0.9;
  bool cuda_graphs = true;
  bool deterministic = false;  // --deterministic: the engine's batch-invariant mode
  uint64_t seed = 0;
};

cxxopts::Options bench_options() {
  cxxopts::Options opts(
      "llama2_bench_e2e",
      "End-to-end decode/prefill benchmark of the CUDA engine with synthetic "
      "weights. Run under mpirun, one rank per GPU (-np = tensor-parallel degree).");
  // clang-format off
  opts.add_options()
      ("synthetic", "Model shape: 7b | 13b | 70b (random weights made on each GPU)",
       cxxopts::value<std::string>()->default_value("7b"))
      ("dtype", "fp16 | bf16 | fp32", cxxopts::value<std::string>()->default_value("fp16"))
      ("kv-cache-dtype", "auto | fp8 | fp8_e4m3 (KV cache element type; auto: as --dtype)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("weight-dtype", "auto | fp8 | int8 (projection weights, quantized at load; auto: as --dtype)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("batches", "Decode batch sizes, comma-separated (\"\" for none)",
       cxxopts::value<std::string>()->default_value("1,8,32,64"))
      ("verify-lens", "Tokens per sequence of each timed step, comma-separated: a speculative "
       "verify step scores K tokens of every sequence (1 = a decode step); each batch size is "
       "measured at each K instead of --batches' decode run (\"\" for none)",
       cxxopts::value<std::string>()->default_value(""))
      ("prompt-len", "Prompt tokens of each decode sequence (prefilled, not timed)",
       cxxopts::value<int>()->default_value("128"))
      ("decode-steps", "Timed decode steps per repeat", cxxopts::value<int>()->default_value("128"))
      ("prefill-lens", "Prompt lengths of the prefill (TTFT) measurement, comma-separated (\"\" for none)",
       cxxopts::value<std::string>()->default_value("512,2048"))
      ("warmup", "Untimed decode steps before each timed run (they capture the CUDA graphs); "
       "untimed prefills before each prefill length", cxxopts::value<int>()->default_value("1"))
      ("repeats", "Timed runs per batch size / prefill length (the median is reported)",
       cxxopts::value<int>()->default_value("3"))
      ("block-size", "KV cache block size in tokens", cxxopts::value<int>()->default_value("16"))
      ("gpu-memory-fraction", "Share of each GPU's memory for weights, activations and the KV cache",
       cxxopts::value<double>()->default_value("0.9"))
      ("no-cuda-graphs", "Launch decode steps kernel by kernel instead of replaying CUDA graphs")
      ("deterministic", "Batch-invariant kernels and rank-order all-reduces (docs/deterministic.md)")
      ("seed", "Seed of the random prompt tokens", cxxopts::value<uint64_t>()->default_value("1234"))
      ("json", "Write the results as one JSON object to this file", cxxopts::value<std::string>())
      ("h,help", "Show this help");
  // clang-format on
  return opts;
}

// "1,8,32" -> {1, 8, 32}; every item a positive integer, "" -> {}.
std::vector<int> parse_int_list(const std::string& text, const std::string& flag,
                                const std::string& help) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v <= 0 || v > (1 << 24)) {
      throw llama2::UsageError("--" + flag + ": '" + item +
                                   "' is not a positive integer (give a "
                                   "comma-separated list such as 1,8,32)",
                               help);
    }
    out.push_back(static_cast<int>(v));
  }
  if (text.back() == ',') throw llama2::UsageError("--" + flag + ": trailing comma", help);
  return out;
}

Options parse_options(int argc, char** argv, int rank, bool* help_only) {
  cxxopts::Options opts = bench_options();
  const std::string help = opts.help();
  const cxxopts::ParseResult r = llama2::parse_or_usage(opts, argc, argv);
  *help_only = r.count("help") > 0;
  if (*help_only) {
    if (rank == 0) std::cout << help << std::endl;
    return {};
  }
  Options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  o.synthetic = r["synthetic"].as<std::string>();
  o.dtype = r["dtype"].as<std::string>();
  o.kv_cache_dtype = r["kv-cache-dtype"].as<std::string>();
  o.weight_dtype = r["weight-dtype"].as<std::string>();
  o.batches = parse_int_list(r["batches"].as<std::string>(), "batches", help);
  o.prefill_lens = parse_int_list(r["prefill-lens"].as<std::string>(), "prefill-lens", help);
  o.verify_lens = parse_int_list(r["verify-lens"].as<std::string>(), "verify-lens", help);
  o.prompt_len = r["prompt-len"].as<int>();
  o.decode_steps = r["decode-steps"].as<int>();
  o.warmup = r["warmup"].as<int>();
  o.repeats = r["repeats"].as<int>();
  o.block_size = r["block-size"].as<int>();
  o.gpu_memory_fraction = r["gpu-memory-fraction"].as<double>();
  o.cuda_graphs = r.count("no-cuda-graphs") == 0;
  o.deterministic = r.count("deterministic") > 0;
  o.seed = r["seed"].as<uint64_t>();
  if (r.count("json")) o.json_path = r["json"].as<std::string>();

  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw llama2::UsageError(what, help);
  };
  require(o.synthetic == "7b" || o.synthetic == "13b" || o.synthetic == "70b",
          "--synthetic must be one of 7b, 13b, 70b (got \"" + o.synthetic + "\")");
  require(o.dtype == "fp16" || o.dtype == "bf16" || o.dtype == "fp32",
          "--dtype must be one of fp16, bf16, fp32 (got \"" + o.dtype + "\")");
  require(!o.batches.empty() || !o.prefill_lens.empty(),
          "--batches and --prefill-lens are both empty: nothing to measure");
  require(o.verify_lens.empty() || !o.batches.empty(), "--verify-lens needs --batches");
  require(o.prompt_len >= 1, "--prompt-len must be >= 1");
  require(o.decode_steps >= 1, "--decode-steps must be >= 1");
  require(o.warmup >= 0, "--warmup must be >= 0");
  require(o.repeats >= 1, "--repeats must be >= 1");
  require(o.block_size >= 1 && o.block_size <= llama2::kMaxKvBlockSize,
          "--block-size must be in [1, " + std::to_string(llama2::kMaxKvBlockSize) + "]");
  require(o.gpu_memory_fraction > 0.0 && o.gpu_memory_fraction <= 1.0,
          "--gpu-memory-fraction must be in (0, 1]");
  return o;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(std::llround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// Weights of the whole (unsplit) model, by role. `matmul` are the layer weights every token is
// multiplied with (q, k, v, o, gate, up, down): the N of the 2*N*P prefill FLOP count.
struct ParamCount {
  uint64_t matmul = 0, norms = 0, embedding = 0, lm_head = 0;
  uint64_t total() const { return matmul + norms + embedding + lm_head; }
};

ParamCount count_params(const llama2::ModelConfig& c) {
  const uint64_t H = c.hidden_size, I = c.intermediate_size, L = c.num_layers, V = c.vocab_size;
  const uint64_t q = static_cast<uint64_t>(c.num_heads) * c.head_dim();
  const uint64_t kv = static_cast<uint64_t>(c.num_kv_heads) * c.head_dim();
  ParamCount p;
  p.matmul = L * (H * q + 2 * H * kv + q * H + 3 * H * I);
  p.norms = L * 2 * H + H;
  p.embedding = V * H;
  p.lm_head = c.tie_word_embeddings ? 0 : V * H;
  // The planner counts the same weights (in bytes; 1 byte per element gives the count): if the
  // two disagree, the FLOP formula below describes some other model.
  LLAMA2_CHECK(p.total() == llama2::shard_weight_bytes(c, llama2::make_shard_plan(c, 1, 0), 1));
  return p;
}

// Prefill FLOPs of one P-token prompt with logits for its last token only:
//   2*N*P        the layer matmuls (one multiply-add = 2 FLOPs per weight per token)
//   2*H*V        the LM head, applied to the one logit row
//   2*L*H*P^2    causal attention: QK^T and PV are 2*P*P*H FLOPs each per layer over the full
//                score matrix (4*L*H*P*P), halved for the causal mask.
double prefill_flops(const llama2::ModelConfig& c, const ParamCount& p, int P) {
  const double Pd = P, H = c.hidden_size, L = c.num_layers, V = c.vocab_size;
  return 2.0 * static_cast<double>(p.matmul) * Pd + 2.0 * H * V + 4.0 * L * H * Pd * Pd / 2.0;
}

// Appends one sequence's part of a step; its block table is the prefix of `table` covering
// positions [0, pos_begin + tokens.size()).
void add_seq(StepPlan* plan, int seq_id, int pos_begin, const std::vector<int32_t>& tokens,
             const std::vector<int>& table, int block_size, int n_logits = 1) {
  const int n = static_cast<int>(tokens.size());
  const int table_len = BlockAllocator::blocks_for(pos_begin + n, block_size);
  LLAMA2_CHECK(table_len <= static_cast<int>(table.size()));
  llama2::append_seq(plan, seq_id, pos_begin, tokens.data(), n, n_logits, table.data(), table_len);
}

class Bench {
 public:
  Bench(llama2::RankEngine& engine, const Options& o)
      : engine_(engine),
        o_(o),
        blocks_(engine.kv().num_blocks, engine.kv().block_size),
        rng_(o.seed) {}

  std::vector<int32_t> random_tokens(int n) {
    std::uniform_int_distribution<int32_t> d(3, engine_.config().vocab_size - 1);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = d(rng_);
    return t;
  }

  // One decode measurement at batch B: B fresh sequences prefilled (untimed), `warmup` untimed
  // steps, then `decode_steps` timed steps of K tokens per sequence (K > 1: a verify step, the
  // sampled token and K - 1 random proposals, every one scored). Returns the total ms; appends
  // each step's ms.
  double decode_run(int B, std::vector<double>* step_ms, int K = 1) {
    const int bs = blocks_.block_size();
    const int final_len = o_.prompt_len + (o_.warmup + o_.decode_steps) * K;
    std::vector<std::vector<int>> tables(B);
    for (auto& t : tables) LLAMA2_CHECK(blocks_.ensure(&t, final_len));
    std::vector<int32_t> next(B);
    StepLogits logits;

    // Prefill: as many whole prompts per step as the engine's step size allows.
    const int per_step = std::max(1, std::min(B, max_step_tokens() / o_.prompt_len));
    for (int first = 0; first < B; first += per_step) {
      StepPlan plan;
      plan.candidates = 1;
      const int n = std::min(per_step, B - first);
      for (int i = first; i < first + n; ++i) {
        add_seq(&plan, i, 0, random_tokens(o_.prompt_len), tables[i], bs);
      }
      engine_.execute(plan, &logits);
      LLAMA2_CHECK(logits.rows == n && logits.width >= 1);
      for (int i = 0; i < n; ++i)
        next[first + i] = logits.ids[static_cast<size_t>(i) * logits.width];
    }

    int pos = o_.prompt_len;
    auto step = [&]() {
      StepPlan plan;
      plan.candidates = 1;
      for (int i = 0; i < B; ++i) {
        std::vector<int32_t> tokens = random_tokens(K);
        tokens[0] = next[i];
        add_seq(&plan, i, pos, tokens, tables[i], bs, K);
      }
      engine_.execute(plan, &logits);
      LLAMA2_CHECK(logits.rows == B * K && logits.width >= 1);
      for (int i = 0; i < B; ++i) next[i] = logits.ids[static_cast<size_t>(i) * K * logits.width];
      pos += K;
    };
    for (int w = 0; w < o_.warmup; ++w) step();
    const auto t0 = Clock::now();
    for (int s = 0; s < o_.decode_steps; ++s) {
      const auto ts = Clock::now();
      step();
      step_ms->push_back(ms_since(ts));
    }
    const double total = ms_since(t0);
    for (auto& t : tables) blocks_.release(&t);
    return total;
  }

  // One prefill of P fresh tokens in a single step; returns its wall time in ms.
  double prefill_run(int P) {
    std::vector<int> table;
    LLAMA2_CHECK(blocks_.ensure(&table, P));
    StepPlan plan;
    plan.candidates = 1;
    add_seq(&plan, 0, 0, random_tokens(P), table, blocks_.block_size());
    StepLogits logits;
    const auto t0 = Clock::now();
    engine_.execute(plan, &logits);
    const double ms = ms_since(t0);
    LLAMA2_CHECK(logits.rows == 1);
    blocks_.release(&table);
    return ms;
  }

  // Per batch size, the median step time at each verify length K, and its ratio to K = 1's.
  ojson run_verify() {
    ojson out = ojson::array();
    for (int B : o_.batches) {
      double one = 0.0;
      for (int K : o_.verify_lens) {
        std::vector<double> step_ms;
        for (int r = 0; r < o_.repeats; ++r) decode_run(B, &step_ms, K);
        const double ms = median(step_ms);
        if (K == 1) one = ms;
        ojson e = {{"batch", B},
                   {"tokens_per_seq", K},
                   {"step_ms_median", ms},
                   {"step_ms_p90", percentile(step_ms, 0.9)}};
        if (one > 0.0) e["vs_one_token"] = ms / one;
        std::printf(
            "verify  batch %4d, %2d tokens each: step %.3f ms median, %.3fx a one-token step\n", B,
            K, ms, one > 0.0 ? ms / one : 0.0);
        std::fflush(stdout);
        out.push_back(e);
      }
    }
    return out;
  }

  ojson run_decode() {
    if (!o_.verify_lens.empty()) return run_verify();
    ojson out = ojson::array();
    for (int B : o_.batches) {
      std::vector<double> tok_s_runs, step_ms;
      for (int r = 0; r < o_.repeats; ++r) {
        const double total_ms = decode_run(B, &step_ms);
        tok_s_runs.push_back(static_cast<double>(B) * o_.decode_steps / (total_ms / 1e3));
      }
      ojson e;
      e["batch"] = B;
      e["tok_s"] = median(tok_s_runs);
      e["tok_s_runs"] = tok_s_runs;
      e["step_ms_median"] = median(step_ms);
      e["step_ms_p90"] = percentile(step_ms, 0.9);
      std::printf(
          "decode  batch %4d: %10.1f tok/s (median of %d), step %.3f ms median, %.3f ms p90\n", B,
          e["tok_s"].get<double>(), o_.repeats, e["step_ms_median"].get<double>(),
          e["step_ms_p90"].get<double>());
      std::fflush(stdout);
      out.push_back(e);
    }
    return out;
  }

  ojson run_prefill(const ParamCount& params, int tp) {
    ojson out = ojson::array();
    for (int P : o_.prefill_lens) {
      for (int w = 0; w < std::max(1, o_.warmup); ++w) prefill_run(P);
      std::vector<double> runs;
      for (int r = 0; r < o_.repeats; ++r) runs.push_back(prefill_run(P));
      const double ttft = median(runs);
      const double flops = prefill_flops(engine_.config(), params, P);
      const double tflops = flops / (ttft / 1e3) / 1e12;
      ojson e;
      e["prompt_len"] = P;
      e["ttft_ms"] = ttft;
      e["ttft_ms_runs"] = runs;
      e["flops"] = flops;
      e["model_tflops"] = tflops;
      e["tflops_per_gpu"] = tflops / tp;
      e["flops_formula"] =
          "2*N*P + 2*H*V + 4*L*H*P*P/2 with N = " + std::to_string(params.matmul) +
          " layer matmul weights (q,k,v,o,gate,up,down; embedding, norms excluded), H = " +
          std::to_string(engine_.config().hidden_size) +
          ", V = " + std::to_string(engine_.config().vocab_size) +
          " (LM head on the last token only), L = " + std::to_string(engine_.config().num_layers) +
          " (causal attention QK^T + PV)";
      std::printf(
          "prefill P %5d: TTFT %9.2f ms (median of %d), %7.1f TFLOP/s model, %7.1f per GPU\n", P,
          ttft, o_.repeats, tflops, tflops / tp);
      std::fflush(stdout);
      out.push_back(e);
    }
    return out;
  }

  int max_step_tokens() const { return max_step_tokens_; }
  void set_max_step_tokens(int n) { max_step_tokens_ = n; }

 private:
  llama2::RankEngine& engine_;
  const Options& o_;
  BlockAllocator blocks_;
  std::mt19937 rng_;
  int max_step_tokens_ = 0;
};

// This rank's GPU: {used bytes, total bytes} from cudaMemGetInfo (the device the engine set).
std::vector<unsigned long long> gpu_memory() {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return {total_b - free_b, total_b};
}

// Gathers `mine` (the same length on every rank) to rank 0: [size][mine.size()].
std::vector<unsigned long long> gather_u64(const std::vector<unsigned long long>& mine, int size) {
  std::vector<unsigned long long> all(mine.size() * size);
  MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_LONG_LONG,
                       all.data(), static_cast<int>(mine.size()), MPI_UNSIGNED_LONG_LONG, 0,
                       MPI_COMM_WORLD));
  return all;
}

int run(int argc, char** argv, int rank, int size) {
  bool help_only = false;
  const Options o = parse_options(argc, argv, rank, &help_only);
  if (help_only) return 0;

  // A bad --json path must fail now, not after the whole benchmark; every rank learns of it.
  std::string early_error;
  if (rank == 0 && !o.json_path.empty()) {
    const bool existed = static_cast<bool>(std::ifstream(o.json_path));
    if (!std::ofstream(o.json_path, std::ios::app)) {
      early_error = "--json: cannot open " + o.json_path + " for writing";
    } else if (!existed) {
      std::remove(o.json_path.c_str());  // a failed run leaves no empty result file behind
    }
  }
  llama2::agree_on_errors(MPI_COMM_WORLD, early_error);

  const llama2::ModelConfig config = llama2::preset_config(o.synthetic);
  const int max_batch =
      o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int max_prefill =
      o.prefill_lens.empty() ? 0 : *std::max_element(o.prefill_lens.begin(), o.prefill_lens.end());
  const int max_verify =
      o.verify_lens.empty() ? 1 : *std::max_element(o.verify_lens.begin(), o.verify_lens.end());
  const int decode_len =
      o.batches.empty() ? 0 : o.prompt_len + (o.warmup + o.decode_steps) * max_verify;
  // Decode prompts are prefilled several to a step (whole prompts only), so a step holds the
  // longest prefill, one prompt, or one token of every decode sequence, whichever is largest.
  const int max_step_tokens = std::max({max_prefill, o.prompt_len, max_batch * max_verify});
  const int longest = std::max(max_prefill, decode_len);
  const int max_seq_len = (longest + o.block_size - 1) / o.block_size * o.block_size;
  if (longest > config.max_position_embeddings) {
    throw llama2::ReportedError("the longest sequence (" + std::to_string(longest) +
                                " tokens: max(--prefill-lens, "
                                "--prompt-len + --warmup + --decode-steps)) exceeds the model's " +
                                std::to_string(config.max_position_embeddings) + " positions");
  }

  llama2::EngineConfig spec;
  spec.synthetic = o.synthetic;
  spec.backend = llama2::Backend::kCuda;
  spec.dtype = llama2::parse_compute_dtype(o.dtype);
  spec.kv_cache_dtype = llama2::parse_kv_cache_dtype(o.kv_cache_dtype);
  spec.weight_dtype = llama2::parse_weight_dtype(o.weight_dtype, &spec.weight_dtype_named);
  spec.block_size = o.block_size;
  spec.gpu_memory_fraction = o.gpu_memory_fraction;
  spec.max_batch = max_batch;
  if (max_verify > 1) {  // verify steps carry K logit rows per sequence: size the engine for them
    spec.speculative.method = llama2::SpecMethod::kNgram;
    spec.speculative.k = max_verify - 1;
    spec.speculative.max_batch = max_batch;
  }
  spec.prefill_chunk = max_step_tokens - spec.max_logit_rows();  // >= 0 (max_step_tokens' max)
  spec.max_seq_len = std::min(max_seq_len, config.max_position_embeddings);
  spec.cuda_graphs = o.cuda_graphs;
  spec.deterministic = o.deterministic;
  spec.knobs = llama2::tuning_knobs_from_env();
  const auto t_setup = Clock::now();
  llama2::RankEngine engine(spec, config, MPI_COMM_WORLD);
  const double setup_s = ms_since(t_setup) / 1e3;

  // Every rank knows the cache size, so a benchmark that cannot fit fails on all ranks alike
  // (before any worker enters its loop).
  const llama2::KvCacheSpec kv = engine.kv();
  const int64_t need = std::max<int64_t>(
      o.batches.empty()
          ? 0
          : int64_t{max_batch} * BlockAllocator::blocks_for(decode_len, kv.block_size),
      BlockAllocator::blocks_for(max_prefill, kv.block_size));
  if (need > kv.num_blocks) {
    throw llama2::ReportedError("the KV cache holds " + std::to_string(kv.num_blocks) +
                                " blocks of " + std::to_string(kv.block_size) + " tokens; batch " +
                                std::to_string(max_batch) + " x " + std::to_string(decode_len) +
                                " tokens needs " + std::to_string(need) +
                                ": lower --batches or raise --gpu-memory-fraction");
  }

  // Weights, KV cache (the same arithmetic the engine checks its allocations against) and
  // cudaMemGetInfo of this rank's GPU after setup.
  const int elem = llama2::dtype_bytes_of(engine.dtype_name());
  const int kv_elem = llama2::kv_dtype_bytes_of(o.kv_cache_dtype, elem);
  std::vector<unsigned long long> mine = gpu_memory();
  const bool quantized = engine.settings().weight_dtype != llama2::WeightDType::kAuto;
  mine.push_back(llama2::shard_weight_bytes(config, engine.shard(), elem, quantized ? 1 : 0));
  mine.push_back(llama2::kv_bytes_per_token(config, engine.shard(), kv_elem) * kv.block_size *
                 static_cast<unsigned long long>(kv.num_blocks));
  const std::vector<unsigned long long> setup_mem = gather_u64(mine, size);

  int code = 0;
  ojson result;
  if (rank != 0) {
    code = engine.worker_loop();
  } else {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::fprintf(stderr, "%s", engine.startup_report().c_str());
    std::printf(
        "llama2_bench_e2e: %s %s, tp %d, %s, CUDA graphs %s%s, setup %.1f s, KV %d blocks (%s)\n",
        o.synthetic.c_str(), engine.dtype_name(), size, prop.name, o.cuda_graphs ? "on" : "off",
        o.deterministic ? ", deterministic" : "", setup_s, kv.num_blocks, engine.kv_dtype_name());
    std::fflush(stdout);

    const ParamCount params = count_params(config);
    result["model"] = o.synthetic;
    result["dtype"] = engine.dtype_name();
    result["kv_cache_dtype"] = engine.kv_dtype_name();
    result["weight_dtype"] =
        llama2::weight_dtype_name(engine.settings().weight_dtype, engine.settings().dtype);
    result["tp"] = size;
    result["date"] = utc_now_iso();
    result["host"] = hostname();
    result["gpu"] = prop.name;
    result["cuda_graphs"] = o.cuda_graphs;
    result["deterministic"] = o.deterministic;
    result["command"] = o.command;
    result["prompt_len"] = o.prompt_len;
    result["decode_steps"] = o.decode_steps;
    result["warmup"] = o.warmup;
    result["repeats"] = o.repeats;
    result["params"] = {{"total", params.total()},
                        {"layer_matmul", params.matmul},
                        {"embedding", params.embedding},
                        {"lm_head", params.lm_head},
                        {"norms", params.norms}};
    result["setup_s"] = setup_s;
    try {
      Bench bench(engine, o);
      bench.set_max_step_tokens(max_step_tokens);
      result["decode"] = bench.run_decode();
      result["prefill"] = bench.run_prefill(params, size);
    } catch (const std::exception& e) {
      // Let the workers leave their loop before reporting, so the job ends instead of hanging.
      std::fprintf(stderr, "llama2_bench_e2e: error during the benchmark: %s\n", e.what());
      code = 1;
    }
    engine.shutdown(code);
  }

  // After the runs: graphs, NCCL buffers and the allocator's caches have grown since setup.
  std::vector<unsigned long long> end_mine = gpu_memory();
  const std::vector<unsigned long long> end_mem = gather_u64(end_mine, size);
  if (rank != 0 || code != 0) return code;

  ojson memory = ojson::array();
  for (int r = 0; r < size; ++r) {
    ojson m;
    m["rank"] = r;
    m["used_bytes"] = setup_mem[4 * r];
    m["total_bytes"] = setup_mem[4 * r + 1];
    m["weight_bytes"] = setup_mem[4 * r + 2];
    m["kv_bytes"] = setup_mem[4 * r + 3];
    m["used_bytes_end"] = end_mem[2 * r];
    memory.push_back(m);
    std::printf(
        "memory  rank %d: %.2f GiB used after setup (%.2f at the end) of %.2f GiB; "
        "weights %.2f GiB, KV %.2f GiB\n",
        r, setup_mem[4 * r] / double(llama2::kGiB), end_mem[2 * r] / double(llama2::kGiB),
        setup_mem[4 * r + 1] / double(llama2::kGiB), setup_mem[4 * r + 2] / double(llama2::kGiB),
        setup_mem[4 * r + 3] / double(llama2::kGiB));
  }
  result["memory"] = memory;
  result["kv_blocks"] = kv.num_blocks;
  result["kv_block_size"] = kv.block_size;
  result["startup_report"] = engine.startup_report();
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path, std::ios::trunc);
    out << result.dump(2) << "\n";
    if (!out) throw Error("--json: writing " + o.json_path + " failed");
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_bench_e2e", argc, argv, run);
}
