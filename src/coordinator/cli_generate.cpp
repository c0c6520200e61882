// `llama2 generate`: one prompt through the tensor-parallel engine, text streamed to stdout.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/block_allocator.h"
#include "coordinator/cli_common.h"
#include "coordinator/commands.h"
#include "coordinator/request_owner.h"
#include "coordinator/session.h"
#include "coordinator/tokenizer.h"

namespace llama2 {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> parse_token_list(const std::string& s, int vocab) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      throw Error("--prompt-tokens: '" + item + "' is not an integer token id");
    }
    if (v < 0 || v >= vocab) {
      throw Error("--prompt-tokens: token id " + item + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw Error("--prompt-tokens: no token ids given");
  return ids;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--prompt-file: cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cxxopts::Options generate_options() {
  cxxopts::Options opts("llama2 generate",
                        "Generate text for one prompt. Run under mpirun: one rank per GPU "
                        "(or per tensor-parallel CPU shard).");
  opts.add_options()("p,prompt", "Prompt text (BOS is added)", cxxopts::value<std::string>())(
      "prompt-file", "Read the prompt text from a file", cxxopts::value<std::string>())(
      "prompt-tokens", "Prompt as comma-separated token ids, used as given",
      cxxopts::value<std::string>())(
      "json", "Print one JSON object (ids, text, finish reason, timings) instead of streaming");
  add_engine_options(opts);
  add_sampling_options(opts);
  return opts;
}

}  // namespace

int run_generate(int argc, char** argv, int rank) {
  cxxopts::Options opts = generate_options();
  const cxxopts::ParseResult args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    if (rank == 0) std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!args.count("model")) throw UsageError("--model is required", opts.help());
  const int sources = static_cast<int>(args.count("prompt") + args.count("prompt-file") +
                                       args.count("prompt-tokens"));
  if (sources != 1) {
    throw UsageError("give exactly one of --prompt, --prompt-file, --prompt-tokens", opts.help());
  }
  const std::string model_dir = args["model"].as<std::string>();
  SamplingParams params = sampling_from_options(args);
  const bool json_out = args.count("json") > 0;

  std::vector<int> prompt;
  SessionOptions sopts = session_options_from(args, opts.help());
  sopts.max_batch = 1;
  sopts.prefill_chunk = 512;
  Session session = open_session(sopts, rank, [&](const ModelConfig& config, const Tokenizer& tok) {
    if (args.count("prompt-tokens")) {
      prompt = parse_token_list(args["prompt-tokens"].as<std::string>(), config.vocab_size);
    } else {
      const std::string text = args.count("prompt")
                                   ? args["prompt"].as<std::string>()
                                   : read_file(args["prompt-file"].as<std::string>());
      prompt = tok.encode(text, /*add_bos=*/true);
    }
    const std::string bad =
        validate_sampling(params, static_cast<int>(prompt.size()), config.max_position_embeddings);
    if (!bad.empty()) throw Error(bad);
    if (!params.seed) params.seed = random_seed();
    return BlockAllocator::blocks_for(static_cast<int>(prompt.size()) + params.max_new_tokens,
                                      sopts.block_size);
  });
  RankEngine& engine = *session.engine;
  if (rank != 0) return engine.worker_loop();
  if (!args.count("quiet")) std::cerr << engine.startup_report() << std::flush;
  const ModelConfig& config = session.config;
  const Tokenizer* tok = session.tokenizer.get();
  const double load_s = session.load_s;

  // The one prompt through the same request owner -> scheduler path as `serve` and `batch`.
  struct Output final : RequestEvents {
    bool stream = false;
    Finished result;
    Timings timings;
    void on_token(const TokenEvent& ev) override {
      if (!stream) return;
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    void on_finished(const Finished& done, const Timings& t) override {
      result = done;
      timings = t;
    }
  } output;
  output.stream = !json_out;
  LocalServing serving(engine, *tok, config, session.num_blocks, session.block_size,
                       SchedulerOptions{1, 512}, output);
  if (std::optional<Refusal> refusal =
          serving.submit(SubmitRequest{0, prompt, params, *params.seed})) {
    engine.shutdown(1);  // the workers wait for a plan: release them before reporting
    throw ReportedError(refusal->message);
  }
  const auto t_gen = Clock::now();
  while (!serving.owner.idle()) serving.owner.step();
  const double gen_s = std::chrono::duration<double>(Clock::now() - t_gen).count();
  engine.shutdown(0);
  const Finished& result = output.result;

  const double decode_s = gen_s - output.timings.ttft_s;
  const size_t n_out = result.tokens.size();
  const double decode_tps = n_out > 1 && decode_s > 0 ? (n_out - 1) / decode_s : 0.0;
  if (json_out) {
    nlohmann::json j{{"prompt_token_ids", prompt},
                     {"token_ids", result.tokens},
                     {"text", result.text},
                     {"finish_reason", result.finish_reason},
                     {"seed", *params.seed},
                     {"backend", engine.backend()},
                     {"ranks", engine.shard().tp},
                     {"usage", {{"prompt_tokens", prompt.size()}, {"completion_tokens", n_out}}},
                     {"timings",
                      {{"load_s", load_s},
                       {"time_to_first_token_s", output.timings.ttft_s},
                       {"generate_s", gen_s},
                       {"decode_tokens_per_s", decode_tps}}}};
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << std::endl;
    if (!args.count("quiet")) {
      std::fprintf(stderr,
                   "[%s] %zu prompt + %zu generated tokens, finish_reason=%s, seed=%llu, "
                   "TTFT %.1f ms, decode %.1f tok/s\n",
                   engine.backend().c_str(), prompt.size(), n_out, result.finish_reason.c_str(),
                   static_cast<unsigned long long>(*params.seed), output.timings.ttft_s * 1e3,
                   decode_tps);
    }
  }
  return 0;
}

}  // namespace llama2
