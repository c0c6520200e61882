// `llama2 perplexity`: teacher-forced log-likelihood of a text file with sliding windows, every
// log-probability computed from per-rank vocabulary slices (RankEngine::score, kScore steps).
//
// Definition (docs/cli.md "llama2 perplexity"; tests/reference/perplexity_reference.py computes the
// same with transformers): the file is tokenized once, one BOS first, into n tokens. Window k is
// the tokens [kS, min(kS + N, n)), a sequence of its own (positions from 0). It scores, each
// predicted from the tokens before it inside the window, the tokens at positions
// p >= max(kS + 1, (k - 1)S + N) (for k = 0: p >= 1). Windows run until one reaches the end. With
// S < N every token after the first is scored exactly once; with S = N (the default) the first
// token of each later window has nothing before it inside its window and is not scored.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "coordinator/cli/session.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"
#include "rank/comm.h"

namespace llama2 {
namespace {

using Clock = std::chrono::steady_clock;

// One window: tokens [begin, end) of the file; positions >= first_scored are scored.
struct Window {
  int begin = 0, end = 0, first_scored = 0;
};

std::vector<Window> make_windows(int n, int context, int stride) {
  std::vector<Window> w;
  for (int64_t k = 0;; ++k) {
    const int64_t begin = k * stride;
    const int64_t end = std::min<int64_t>(begin + context, n);
    const int64_t prev_end = k == 0 ? 0 : (k - 1) * stride + context;
    w.push_back(Window{static_cast<int>(begin), static_cast<int>(end),
                       static_cast<int>(std::max(begin + 1, prev_end))});
    if (end >= n) return w;
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--text-file: cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cxxopts::Options perplexity_options() {
  cxxopts::Options opts("llama2 perplexity",
                        "Teacher-forced log-likelihood of a text file: mean negative "
                        "log-likelihood and perplexity over sliding windows (see docs/cli.md). Run "
                        "under mpirun: one rank per GPU (or per tensor-parallel CPU shard).");
  opts.add_options()("text-file", "UTF-8 text, tokenized once with one BOS first",
                     cxxopts::value<std::string>())(
      "context", "Window length N in tokens (default: the model's max_position_embeddings)",
      cxxopts::value<int>())("stride", "Window step S in tokens, 1 <= S <= N (default: N)",
                             cxxopts::value<int>())(
      "chunk", "Tokens per engine step (windows longer than this run in several steps)",
      cxxopts::value<int>()->default_value(std::to_string(kPerplexitySteps.prefill_chunk)))(
      "json", "Print one JSON object instead of the text summary");
  add_engine_options(opts);
  return opts;
}

// Scores every window, several whole windows per step while they fit in `chunk` tokens (and
// `max_seqs` sequences), a longer window alone in chunks. Returns the sum of log-probabilities
// and the number of scored tokens.
std::pair<double, int64_t> score_windows(RankEngine& engine, const std::vector<int>& ids,
                                         const std::vector<Window>& windows, int chunk,
                                         int max_seqs, int blocks_per_window, int block_size) {
  double sum = 0.0;
  int64_t count = 0;
  std::vector<double> logprobs;
  // Window slot s of a step uses KV blocks [s * blocks_per_window, (s + 1) * blocks_per_window).
  std::vector<int32_t> table(static_cast<size_t>(max_seqs) * blocks_per_window);
  for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
  auto run = [&](StepPlan& plan) {
    engine.score(plan, &logprobs);
    LLAMA2_CHECK(static_cast<int>(logprobs.size()) == plan.score_rows());
    for (double lp : logprobs) sum += lp;
    count += static_cast<int64_t>(logprobs.size());
  };
  // The part [from, to) of window w as sequence `slot` of `plan`: row p predicts token p + 1.
  auto append = [&](StepPlan& plan, const Window& w, int from, int to, int slot) {
    std::vector<int32_t> tokens(ids.begin() + from, ids.begin() + to);
    const int need = (to - w.begin + block_size - 1) / block_size;
    append_seq(&plan, static_cast<int32_t>(slot), from - w.begin, tokens.data(), to - from, false,
               table.data() + static_cast<size_t>(slot) * blocks_per_window, need);
    for (int p = from; p < to; ++p) {
      const bool scored = p + 1 < w.end && p + 1 >= w.first_scored;
      plan.targets.push_back(scored ? ids[p + 1] : -1);
    }
  };
  size_t i = 0;
  while (i < windows.size()) {
    const Window& w = windows[i];
    if (w.end - w.begin > chunk) {  // alone, in chunks that extend its KV cache
      for (int from = w.begin; from < w.end; from += chunk) {
        StepPlan part;
        part.kind = StepKind::kScore;
        append(part, w, from, std::min(from + chunk, w.end), 0);
        run(part);
      }
      ++i;
      continue;
    }
    StepPlan plan;  // whole windows, one sequence each
    plan.kind = StepKind::kScore;
    int tokens = 0, slot = 0;
    while (i < windows.size() && slot < max_seqs &&
           tokens + (windows[i].end - windows[i].begin) <= chunk) {
      append(plan, windows[i], windows[i].begin, windows[i].end, slot++);
      tokens += windows[i].end - windows[i].begin;
      ++i;
    }
    run(plan);
  }
  return {sum, count};
}

// What rank 0 reads before the engine opens: the window geometry and the tokenized text.
struct PerplexityInput {
  int context = 0, stride = 0;
  int windows_per_step = 1, blocks_per_window = 0;
  std::vector<int> ids;
  int kv_blocks() const { return windows_per_step * blocks_per_window; }
};

PerplexityInput read_perplexity_input(const cxxopts::ParseResult& args, const EngineConfig& cfg,
                                      const ModelConfig& model, const Tokenizer& tok) {
  PerplexityInput in;
  const int max_pos = model.max_position_embeddings;
  in.context = args.count("context") ? args["context"].as<int>() : max_pos;
  if (in.context < 2 || in.context > max_pos) {
    throw Error("--context must be in [2, " + std::to_string(max_pos) +
                "] (the model's max_position_embeddings) (got " + std::to_string(in.context) + ")");
  }
  in.stride = args.count("stride") ? args["stride"].as<int>() : in.context;
  if (in.stride < 1 || in.stride > in.context) {
    throw Error("--stride must be in [1, --context = " + std::to_string(in.context) + "] (got " +
                std::to_string(in.stride) + "): a larger stride would leave tokens unscored");
  }
  in.ids = tok.encode(read_text(args["text-file"].as<std::string>()), /*add_bos=*/true);
  if (in.ids.size() < 2) {
    throw Error("--text-file " + args["text-file"].as<std::string>() +
                " gives fewer than 2 tokens (BOS included): nothing to score");
  }
  // Up to max_batch whole windows share a step while they fit in the chunk.
  in.windows_per_step = std::clamp(cfg.prefill_chunk / in.context, 1, cfg.max_batch);
  in.blocks_per_window = BlockAllocator::blocks_for(in.context, cfg.block_size);
  return in;
}

void report(const cxxopts::ParseResult& args, const RankEngine& engine, const PerplexityInput& in,
            size_t windows, int64_t count, double sum, double seconds) {
  const double nll = -sum / static_cast<double>(count);
  const double ppl = std::exp(nll);
  const double tps = seconds > 0 ? static_cast<double>(count) / seconds : 0.0;
  if (args.count("json")) {
    nlohmann::json j{{"text_file", args["text-file"].as<std::string>()},
                     {"tokens", in.ids.size()},
                     {"evaluated_tokens", count},
                     {"windows", windows},
                     {"context", in.context},
                     {"stride", in.stride},
                     {"mean_nll", nll},
                     {"perplexity", ppl},
                     {"seconds", seconds},
                     {"tokens_per_s", tps},
                     {"backend", engine.backend_name()},
                     {"dtype", engine.dtype_name()},
                     {"kv_cache_dtype", engine.kv_dtype_name()},
                     {"ranks", engine.shard().tp}};
    std::cout << j.dump() << std::endl;
    return;
  }
  std::printf(
      "tokens evaluated: %lld (of %zu, %zu windows, context %d, stride %d)\n"
      "mean NLL: %.6f nats/token\nperplexity: %.4f\ntokens/s: %.1f (%.2f s, %s %s, KV %s, "
      "%d rank%s)\n",
      static_cast<long long>(count), in.ids.size(), windows, in.context, in.stride, nll, ppl, tps,
      seconds, engine.backend_name(), engine.dtype_name(), engine.kv_dtype_name(),
      engine.shard().tp, engine.shard().tp == 1 ? "" : "s");
}

}  // namespace

int run_perplexity(int argc, char** argv, int rank) {
  cxxopts::Options opts = perplexity_options();
  const CommandLine cl = parse_command(opts, argc, argv, {"model", "text-file"}, "", rank == 0);
  if (cl.help_requested) return 0;
  const int chunk = cl.args["chunk"].as<int>();
  if (chunk < 1 || chunk > 65536) {
    throw UsageError("--chunk must be in [1, 65536] (got " + std::to_string(chunk) + ")", cl.help);
  }

  SessionStart start = start_session(cl, StepDefaults{kPerplexitySteps.max_batch, chunk}, rank);
  start.cfg.cuda_graphs = false;  // score steps never replay decode graphs
  PerplexityInput in;             // rank 0
  start.on_rank0(
      [&] { in = read_perplexity_input(cl.args, start.cfg, start.model, *start.tokenizer); });
  Session session = open_engine(std::move(start), in.kv_blocks());
  RankEngine& engine = *session.engine;
  if (rank != 0) return engine.worker_loop();
  if (!cl.args.count("quiet") && !cl.args.count("json")) {
    std::cerr << engine.startup_report() << session.notes << std::flush;
  }
  if (session.num_blocks < in.kv_blocks()) {
    engine.shutdown(1);  // the workers leave their loop; this rank reports
    throw ReportedError("the KV cache holds " + std::to_string(session.num_blocks) + " blocks; " +
                        std::to_string(in.kv_blocks()) +
                        " are needed (lower --chunk or --context)");
  }

  const std::vector<Window> windows =
      make_windows(static_cast<int>(in.ids.size()), in.context, in.stride);
  const auto t0 = Clock::now();
  double sum = 0.0;
  int64_t count = 0;
  try {
    std::tie(sum, count) = score_windows(engine, in.ids, windows, chunk, in.windows_per_step,
                                         in.blocks_per_window, session.block_size);
  } catch (...) {
    engine.shutdown(1);
    throw;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  engine.shutdown(0);
  int64_t expected = 0;
  for (const Window& w : windows) expected += w.end - w.first_scored;
  LLAMA2_CHECK(count == expected);
  report(cl.args, engine, in, windows.size(), count, sum, seconds);
  return 0;
}

}  // namespace llama2
