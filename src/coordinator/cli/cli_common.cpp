#include "coordinator/cli/cli_common.h"

#include <cstdio>
#include <iostream>
#include <random>

#include "common/check.h"
#include "common/generation_config.h"

namespace llama2 {
namespace {
// "1" rather than std::to_string's "1.000000" in --help.
std::string shortest(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}
}  // namespace

// Every engine command's step shape (see StepDefaults). generate runs one sequence; batch and
// serve decode up to 32 together; serve takes smaller prompt chunks than batch, so that streams
// already running wait less behind a newly admitted prompt; perplexity scores up to 64 windows
// per step.
const StepDefaults kGenerateSteps{1, 512};
const StepDefaults kBatchSteps{32, 512};
const StepDefaults kServeSteps{32, 256};
const StepDefaults kPerplexitySteps{64, 512};

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

cxxopts::ParseResult parse_or_usage(cxxopts::Options& opts, int argc, char** argv) {
  try {
    auto r = opts.parse(argc, argv);
    if (!r.unmatched().empty()) {
      throw UsageError("unexpected argument '" + r.unmatched().front() + "'", opts.help());
    }
    return r;
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what(), opts.help());
  }
}

CommandLine parse_command(cxxopts::Options& opts, int argc, char** argv,
                          std::initializer_list<const char*> required, const char* epilog,
                          bool print_help) {
  CommandLine cl{parse_or_usage(opts, argc, argv), opts.help() + epilog};
  if (cl.args.count("help")) {
    if (print_help) std::cout << cl.help << std::flush;
    cl.help_requested = true;
    return cl;
  }
  for (const std::string entry : required) {
    if (!cl.args.count(entry.substr(0, entry.find(' ')))) {
      throw UsageError("--" + entry + " is required", cl.help);
    }
  }
  return cl;
}

void require_one_of(const CommandLine& cl, std::initializer_list<const char*> flags,
                    const std::string& message) {
  size_t given = 0;
  for (const char* f : flags) given += cl.args.count(f);
  if (given != 1) throw UsageError(message, cl.help);
}

void add_engine_options(cxxopts::Options& opts) {
  opts.add_options("Engine")("m,model", "Model directory (Hugging Face Llama format)",
                             cxxopts::value<std::string>())(
      "backend", "cpu | cuda | auto (cuda when a GPU is visible)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "dtype", "auto | fp16 | bf16 | fp32 (cuda; auto: the checkpoint's torch_dtype; cpu is fp32)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "kv-cache-dtype",
      "auto | fp8 | fp8_e4m3: KV cache element type (auto: as --dtype; fp8: e4m3, half the bytes "
      "of fp16 per cached token; cuda with fp16/bf16)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "weight-dtype",
      "auto | fp16 | bf16 | fp8 | fp8_e4m3 | int8 | int4: projection weights (auto: as --dtype, "
      "or an FP8 / 4-bit checkpoint's values as stored; fp8: e4m3 weights per output channel, "
      "activations per token on FP8 tensor cores above the GEMV's rows; int8: weight-only; int4: "
      "4 bits in groups of 128, weight-only; quantized at load, cuda with fp16/bf16; fp16/bf16 "
      "dequantize an FP8 checkpoint)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "block-size", "KV cache block size in tokens", cxxopts::value<int>()->default_value("16"))(
      "gpu-memory-fraction",
      "cuda: share of each GPU's memory for weights, activations and the KV cache (the cache takes "
      "what is left)",
      cxxopts::value<double>()->default_value("0.9"))(
      "synthetic",
      "7b | 13b | 70b: random weights of that official shape made on each GPU, for benchmarks "
      "(tokenizer.model still comes from --model)",
      cxxopts::value<std::string>())("cpu-threads",
                                     "cpu: threads per rank, at most the CPUs this rank may run "
                                     "on; 0 = those CPUs shared among the ranks on the node",
                                     cxxopts::value<int>()->default_value("0"))(
      "no-cuda-graphs",
      "cuda: launch decode steps kernel by kernel instead of replaying CUDA graphs")(
      "q,quiet", "No start-up report on stderr")("h,help", "Show this help");
}

void add_prefix_caching_options(cxxopts::Options& opts) {
  opts.add_options("Engine")(
      "prefix-caching",
      "on | off: share the KV blocks of prompt prefixes already computed (kept until the cache "
      "needs the room, least recently used first); default on",
      cxxopts::value<std::string>())("no-prefix-caching", "Same as --prefix-caching off");
}

void add_speculative_options(cxxopts::Options& opts) {
  const SpeculativeConfig d;
  opts.add_options("Speculative decoding")(
      "speculative",
      "ngram:K[:MIN_MATCH[:MAX_MATCH]]: propose up to K (1..16) tokens per step by prompt lookup "
      "(the tokens after the latest earlier match of the last MAX_MATCH..MIN_MATCH tokens, "
      "default 2..4) and verify them in the step; greedy output is unchanged, sampled output keeps "
      "its distribution (docs/speculative.md). Default: off",
      cxxopts::value<std::string>())(
      "speculative-max-batch",
      "Above this many running sequences a step speculates for nobody (default " +
          std::to_string(d.max_batch) + ", a placeholder until measured on the H200)",
      cxxopts::value<int>());
}

void add_deterministic_option(cxxopts::Options& opts) {
  opts.add_options("Engine")(
      "deterministic",
      "The same tokens and logits for a request, bit for bit, whatever its batch mates, prompt "
      "chunking and prefix-cache hits, at a given rank count (cpu backend; cuda refuses it for "
      "now; docs/deterministic.md)");
}

void add_generation_config_option(cxxopts::Options& opts) {
  opts.add_options("Sampling")(
      "generation-config",
      "auto: the model's generation_config.json supplies the sampling defaults (temperature, "
      "top_p, top_k, repetition_penalty, max_new_tokens) that the flags and requests do not set, "
      "as vLLM does; ignore: the built-in defaults",
      cxxopts::value<std::string>()->default_value("auto"));
}

void apply_generation_config(const cxxopts::ParseResult& r, SessionStart* start,
                             SamplingParams* defaults) {
  const std::string dir = start->cfg.model_dir;
  if (parse_generation_config_mode(r["generation-config"].as<std::string>()) ==
      GenerationConfigMode::kIgnore) {
    start->notes += "sampling defaults: the built-in ones (--generation-config ignore)\n";
    return;
  }
  GenerationDefaults g = load_generation_config(dir);
  // A flag given on the command line wins over the file.
  std::string overridden;
  auto flag_wins = [&](auto& field, const char* flag) {
    if (r.count(flag) == 0 || !field) return;
    field.reset();
    overridden += std::string(overridden.empty() ? "" : ", ") + "--" + flag;
  };
  flag_wins(g.temperature, "temperature");
  flag_wins(g.top_p, "top-p");
  flag_wins(g.top_k, "top-k");
  flag_wins(g.repetition_penalty, "repetition-penalty");
  flag_wins(g.max_new_tokens, "max-new-tokens");
  g.apply_to(defaults);
  std::string note = g.empty() ? "sampling defaults: the built-in ones (" +
                                     std::string(g.source.empty() ? "no generation_config.json"
                                                                  : "generation_config.json "
                                                                    "sets none") +
                                     ")"
                               : "sampling defaults from generation_config.json: " + g.describe();
  if (!overridden.empty()) note += " (" + overridden + " given on the command line)";
  if (g.min_p) note += "; its min_p is not applied as a default (a request's min_p is)";
  start->notes += note + "\n";
}

void check_engine_flags(const CommandLine& cl) {
  const double fraction = cl.args["gpu-memory-fraction"].as<double>();
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    throw UsageError("--gpu-memory-fraction must be in (0, 1] (got " +
                         shortest(static_cast<float>(fraction)) + ")",
                     cl.help);
  }
  const int threads = cl.args["cpu-threads"].as<int>();
  if (threads < 0 || threads > 1024) {
    throw UsageError(
        "--cpu-threads must be 0 (automatic) or 1..1024 (got " + std::to_string(threads) + ")",
        cl.help);
  }
}

EngineConfig engine_config_from(const cxxopts::ParseResult& r, const StepDefaults& steps) {
  EngineConfig c;
  c.model_dir = r["model"].as<std::string>();
  if (r.count("synthetic")) c.synthetic = r["synthetic"].as<std::string>();
  c.backend = parse_backend(r["backend"].as<std::string>());
  c.dtype = parse_compute_dtype(r["dtype"].as<std::string>());
  c.kv_cache_dtype = parse_kv_cache_dtype(r["kv-cache-dtype"].as<std::string>());
  c.weight_dtype = parse_weight_dtype(r["weight-dtype"].as<std::string>(), &c.weight_dtype_named);
  c.block_size = r["block-size"].as<int>();
  if (c.block_size < 1 || c.block_size > 1024) {
    throw Error("--block-size must be in [1, 1024] (got " + std::to_string(c.block_size) + ")");
  }
  if (r.count("kv-cache-blocks")) {
    c.kv_cache_blocks = r["kv-cache-blocks"].as<int>();
    if (c.kv_cache_blocks < 1) {
      throw Error("--kv-cache-blocks must be >= 1 (got " + std::to_string(c.kv_cache_blocks) + ")");
    }
  }
  c.gpu_memory_fraction = r["gpu-memory-fraction"].as<double>();
  c.cpu_threads = r["cpu-threads"].as<int>();
  c.cuda_graphs = r.count("no-cuda-graphs") == 0;
  c.deterministic = r.count("deterministic") > 0;  // generate, batch and serve have the flag
  // Only batch and serve have the flags (count() is 0 for a flag a command does not define).
  if (r.count("prefix-caching")) {
    c.prefix_caching = parse_prefix_caching(r["prefix-caching"].as<std::string>());
  }
  if (r.count("no-prefix-caching")) {
    if (r.count("prefix-caching") && c.prefix_caching) {
      throw Error("--no-prefix-caching and --prefix-caching on contradict each other; give one");
    }
    c.prefix_caching = false;
  }
  c.max_batch = r.count("max-batch-size") ? r["max-batch-size"].as<int>() : steps.max_batch;
  c.prefill_chunk = r.count("prefill-chunk") ? r["prefill-chunk"].as<int>() : steps.prefill_chunk;
  if (c.max_batch < 1) {
    throw Error("--max-batch-size must be >= 1 (got " + std::to_string(c.max_batch) + ")");
  }
  if (c.prefill_chunk < 1) {
    throw Error("--prefill-chunk must be >= 1 (got " + std::to_string(c.prefill_chunk) + ")");
  }
  c.knobs = tuning_knobs_from_env();
  // Only generate, batch and serve have the flags.
  if (r.count("speculative")) c.speculative = parse_speculative(r["speculative"].as<std::string>());
  if (c.speculative.method == SpecMethod::kDraft) {
    throw Error(
        "--speculative draft:DIR:K is not available yet; use ngram:K[:MIN_MATCH[:MAX_MATCH]]");
  }
  if (r.count("speculative-max-batch")) {
    const int n = r["speculative-max-batch"].as<int>();
    if (n < 1) throw Error("--speculative-max-batch must be >= 1 (got " + std::to_string(n) + ")");
    if (!c.speculative.enabled()) throw Error("--speculative-max-batch needs --speculative");
    c.speculative.max_batch = n;
  }
  return c;
}

SessionStart start_session(const CommandLine& cl, const StepDefaults& steps, int rank) {
  check_engine_flags(cl);
  SessionStart start(rank);
  start.step([&] { start.cfg = engine_config_from(cl.args, steps); });
  start.plan_replicas(cl.args.count("tp") ? cl.args["tp"].as<int>() : 0,
                      cl.args.count("dedicated-front") > 0);
  start.load_model();
  return start;
}

void add_replica_options(cxxopts::Options& opts) {
  opts.add_options("Data parallelism")(
      "tp",
      "Tensor-parallel degree of each replica: the job's N ranks form N/T replicas of T "
      "consecutive ranks, each on one node, behind one endpoint (default: T = N, one replica)",
      cxxopts::value<int>());
}

SchedulerOptions scheduler_options(const EngineConfig& cfg) {
  return SchedulerOptions{cfg.max_batch, cfg.prefill_chunk, cfg.knobs.full_logits,
                          cfg.prefix_caching, cfg.speculative};
}

void add_sampling_options(cxxopts::Options& opts) {
  const SamplingParams d;
  opts.add_options("Sampling")("temperature", "Softmax temperature; 0 = greedy",
                               cxxopts::value<float>()->default_value(shortest(d.temperature)))(
      "top-p", "Nucleus sampling mass in (0, 1]",
      cxxopts::value<float>()->default_value(shortest(d.top_p)))(
      "top-k", "Keep the k most likely tokens; 0 = off",
      cxxopts::value<int>()->default_value(std::to_string(d.top_k)))(
      "repetition-penalty", "Penalty > 0 for tokens already seen (HF semantics); 1 = off",
      cxxopts::value<float>()->default_value(shortest(d.repetition_penalty)))(
      "presence-penalty",
      "OpenAI's: subtracted once from the logit of every token generated so far, in [-2, 2]",
      cxxopts::value<float>()->default_value(shortest(d.presence_penalty)))(
      "frequency-penalty",
      "OpenAI's: times how often a token was generated, subtracted from its logit, in [-2, 2]",
      cxxopts::value<float>()->default_value(shortest(d.frequency_penalty)))(
      "n,max-new-tokens", "Maximum tokens to generate",
      cxxopts::value<int>()->default_value(std::to_string(d.max_new_tokens)))(
      "seed", "Sampling seed (default: random, reported with --json)", cxxopts::value<uint64_t>())(
      "stop", "Stop string (repeatable); not included in the output",
      cxxopts::value<std::vector<std::string>>())(
      "ignore-eos", "Keep generating after the end-of-sequence token");
}

SamplingParams sampling_from_options(const cxxopts::ParseResult& r) {
  SamplingParams p;
  p.temperature = r["temperature"].as<float>();
  p.top_p = r["top-p"].as<float>();
  p.top_k = r["top-k"].as<int>();
  p.repetition_penalty = r["repetition-penalty"].as<float>();
  p.presence_penalty = r["presence-penalty"].as<float>();
  p.frequency_penalty = r["frequency-penalty"].as<float>();
  p.max_new_tokens = r["max-new-tokens"].as<int>();
  if (r.count("seed")) p.seed = r["seed"].as<uint64_t>();
  if (r.count("stop")) p.stop = r["stop"].as<std::vector<std::string>>();
  p.ignore_eos = r.count("ignore-eos") > 0;
  return p;
}

void check_sampling_defaults(const SamplingParams& defaults, const ModelConfig& model) {
  if (std::string bad = validate_sampling(defaults, 1, model.max_position_embeddings);
      !bad.empty()) {
    throw Error(bad);
  }
}

}  // namespace llama2
