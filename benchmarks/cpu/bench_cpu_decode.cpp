// Decode-step benchmark of the CPU backend: time per generated token at several batch sizes, the
// engine alone (no tokenizer, no scheduler, no output), so that what batching buys is visible.
//
//   mpirun -np N llama2_bench_cpu --model tests/models/tiny-gqa --batches 1,8,32 --context 64
//       --steps 64 --repeats 5 [--cpu-threads T] [--deterministic]
//
// Rank 0 builds the plans by hand and owns the KV blocks; the other ranks sit in
// RankEngine::worker_loop. Each repeat prefills B sequences of --context random tokens (untimed),
// then times --steps greedy decode steps with steady_clock around RankEngine::execute(). Reported:
// the median over repeats of the mean microseconds per step and per generated token.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/mpi_program.h"
#include "coordinator/scheduler/block_allocator.h"
#include "rank/comm.h"
#include "rank/engine.h"

namespace {

using llama2::BlockAllocator;
using llama2::StepLogits;
using llama2::StepPlan;
using Clock = std::chrono::steady_clock;

std::vector<int> parse_batches(const std::string& text, const std::string& help) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const bool digits =
        !item.empty() && item.size() <= 6 && std::all_of(item.begin(), item.end(), ::isdigit);
    if (!digits || std::stoi(item) <= 0) {
      throw llama2::UsageError("--batches: '" + item + "' is not a positive integer (e.g. 1,8,32)",
                               help);
    }
    out.push_back(std::stoi(item));
    at = comma + 1;
  }
  return out;
}

void add_seq(StepPlan* plan, int seq_id, int pos_begin, const std::vector<int32_t>& tokens,
             const std::vector<int>& table, int block_size) {
  const int n = static_cast<int>(tokens.size());
  llama2::append_seq(plan, seq_id, pos_begin, tokens.data(), n, true, table.data(),
                     BlockAllocator::blocks_for(pos_begin + n, block_size));
}

// Mean microseconds per decode step of one repeat at batch B.
double decode_us_per_step(llama2::RankEngine& engine, BlockAllocator& blocks, int B, int context,
                          int steps, std::mt19937& rng) {
  const int bs = blocks.block_size();
  std::vector<std::vector<int>> tables(B);
  for (auto& t : tables) LLAMA2_CHECK(blocks.ensure(&t, context + steps + 1));
  std::uniform_int_distribution<int32_t> tok(3, engine.config().vocab_size - 1);
  std::vector<int32_t> next(B);
  StepLogits logits;
  for (int i = 0; i < B; ++i) {  // prefill, one sequence per step
    StepPlan plan;
    plan.candidates = 1;
    std::vector<int32_t> prompt(context);
    for (auto& x : prompt) x = tok(rng);
    add_seq(&plan, i, 0, prompt, tables[i], bs);
    engine.execute(plan, &logits);
    next[i] = logits.ids[0];
  }
  int pos = context;
  auto step = [&] {
    StepPlan plan;
    plan.candidates = 1;  // greedy: the best (value, id) of each row, as `llama2 batch` asks
    for (int i = 0; i < B; ++i) add_seq(&plan, i, pos, {next[i]}, tables[i], bs);
    engine.execute(plan, &logits);
    for (int i = 0; i < B; ++i) next[i] = logits.ids[static_cast<size_t>(i) * logits.width];
    ++pos;
  };
  step();  // warm-up
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) step();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  for (auto& t : tables) blocks.release(&t);
  return us / steps;
}

int run(int argc, char** argv, int rank, int size) {
  cxxopts::Options opts("llama2_bench_cpu",
                        "Decode-step time of the CPU backend per batch size (run under mpirun).");
  opts.add_options()("model", "Model directory", cxxopts::value<std::string>())(
      "batches", "Batch sizes, comma-separated",
      cxxopts::value<std::string>()->default_value("1,8,32"))(
      "context", "Tokens already in each sequence's cache when the timing starts",
      cxxopts::value<int>()->default_value("64"))("steps", "Timed decode steps per repeat",
                                                  cxxopts::value<int>()->default_value("64"))(
      "repeats", "Repeats per batch size (the median is reported)",
      cxxopts::value<int>()->default_value("5"))("cpu-threads", "Threads per rank; 0 = automatic",
                                                 cxxopts::value<int>()->default_value("0"))(
      "deterministic", "EngineConfig::deterministic (docs/deterministic.md), for its cost")(
      "h,help", "Show this help");
  const cxxopts::ParseResult r = llama2::parse_or_usage(opts, argc, argv);
  if (r.count("help")) {
    if (rank == 0) std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!r.count("model")) throw llama2::UsageError("--model is required", opts.help());
  const std::vector<int> batches = parse_batches(r["batches"].as<std::string>(), opts.help());
  const int context = r["context"].as<int>(), steps = r["steps"].as<int>();
  const int repeats = r["repeats"].as<int>();
  if (context < 1 || steps < 1 || repeats < 1) {
    throw llama2::UsageError("--context, --steps and --repeats must be >= 1", opts.help());
  }
  const int max_batch = *std::max_element(batches.begin(), batches.end());

  llama2::EngineConfig spec;
  spec.model_dir = r["model"].as<std::string>();
  spec.backend = llama2::Backend::kCpu;
  spec.cpu_threads = r["cpu-threads"].as<int>();
  spec.deterministic = r.count("deterministic") > 0;
  // Every rank reads the same config and fails alike: reported once, no abort.
  llama2::ModelConfig config;
  try {
    config = llama2::load_model_config(spec.model_dir);
    spec.knobs = llama2::tuning_knobs_from_env();  // LLAMA2_CPU_SPLIT for A/B runs
  } catch (const llama2::Error& e) {
    throw llama2::ReportedError(e.what());
  }
  if (context + steps + 2 > config.max_position_embeddings) {
    throw llama2::ReportedError("--context + --steps exceeds the model's " +
                                std::to_string(config.max_position_embeddings) + " positions");
  }
  spec.block_size = 16;
  spec.kv_cache_blocks = max_batch * BlockAllocator::blocks_for(context + steps + 1, 16);
  spec.max_batch = max_batch;
  llama2::RankEngine engine(spec, config, MPI_COMM_WORLD);
  if (rank != 0) return engine.worker_loop();

  std::fprintf(stderr, "%s", engine.startup_report().c_str());
  BlockAllocator blocks(engine.kv().num_blocks, engine.kv().block_size);
  std::mt19937 rng(1234);
  std::printf("model %s, %d rank(s), context %d, %d steps, median of %d%s\n",
              spec.model_dir.c_str(), size, context, steps, repeats,
              spec.deterministic ? ", --deterministic" : "");
  std::printf("| batch | us/step | us/token | tok/s | vs batch %d |\n|---|---|---|---|---|\n",
              batches.front());
  double first = 0;
  for (int B : batches) {
    std::vector<double> us;
    for (int i = 0; i < repeats; ++i) {
      us.push_back(decode_us_per_step(engine, blocks, B, context, steps, rng));
    }
    std::sort(us.begin(), us.end());
    const double step_us = us[us.size() / 2], tok_s = B * 1e6 / step_us;
    if (first == 0) first = tok_s;
    std::printf("| %d | %.1f | %.2f | %.0f | %.2fx |\n", B, step_us, step_us / B, tok_s,
                tok_s / first);
  }
  engine.shutdown(0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_bench_cpu", argc, argv, run);
}
