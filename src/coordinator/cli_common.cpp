#include "coordinator/cli_common.h"

#include <cstdio>
#include <random>

#include "common/check.h"

namespace llama2 {
namespace {
// "1" rather than std::to_string's "1.000000" in --help.
std::string shortest(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
  return buf;
}
}  // namespace

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
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

SessionOptions session_options_from(const cxxopts::ParseResult& r, const std::string& help) {
  SessionOptions o;
  o.model_dir = r["model"].as<std::string>();
  if (r.count("synthetic")) o.synthetic = r["synthetic"].as<std::string>();
  o.backend = r["backend"].as<std::string>();
  o.dtype = r["dtype"].as<std::string>();
  o.kv_cache_dtype = r["kv-cache-dtype"].as<std::string>();
  o.block_size = r["block-size"].as<int>();
  o.gpu_memory_fraction = r["gpu-memory-fraction"].as<double>();
  if (!(o.gpu_memory_fraction > 0.0 && o.gpu_memory_fraction <= 1.0)) {
    throw UsageError("--gpu-memory-fraction must be in (0, 1] (got " +
                         shortest(static_cast<float>(o.gpu_memory_fraction)) + ")",
                     help);
  }
  o.cpu_threads = r["cpu-threads"].as<int>();
  if (o.cpu_threads < 0 || o.cpu_threads > 1024) {
    throw UsageError("--cpu-threads must be 0 (automatic) or 1..1024 (got " +
                         std::to_string(o.cpu_threads) + ")",
                     help);
  }
  o.cuda_graphs = r.count("no-cuda-graphs") == 0;
  o.kv_blocks_given = r.count("kv-cache-blocks") > 0;
  return o;
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
  p.max_new_tokens = r["max-new-tokens"].as<int>();
  if (r.count("seed")) p.seed = r["seed"].as<uint64_t>();
  if (r.count("stop")) p.stop = r["stop"].as<std::vector<std::string>>();
  p.ignore_eos = r.count("ignore-eos") > 0;
  return p;
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

}  // namespace llama2
