// `llama2 plan`: will a model fit on N GPUs of a given size, and how many full-length sequences
// does the KV cache hold? Pure arithmetic (common/capacity.h, the engine's own sizing functions):
// no MPI, no GPU, no weights read — only config.json, or a built-in Llama-2 preset.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/capacity.h"
#include "common/check.h"
#include "common/engine_config.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"

namespace llama2 {
namespace {

// Schedulers and scripts branch on the exit status, so it is part of the help text.
const char* kPlanEpilog =
    "\nExit status: 0 the model fits at --tp (weights + reserve + one --max-seq-len sequence of\n"
    "KV cache per GPU); 1 it does not fit, the --tp degree is invalid for the model, or a value\n"
    "is wrong (bad size, dtype, model directory); 2 usage error (unknown flag, missing value).\n";

cxxopts::Options plan_options() {
  cxxopts::Options opts("llama2 plan",
                        "Capacity planner: weight and KV-cache memory per GPU for a "
                        "tensor-parallel degree. Reads only config.json; no MPI or GPU needed.");
  // clang-format off
  opts.add_options()
      ("m,model", "Model directory (its config.json is read)", cxxopts::value<std::string>())
      ("preset", "Official shapes instead of --model: 7b | 13b | 70b (Llama-2) | codellama-7b | "
       "codellama-13b | codellama-34b",
       cxxopts::value<std::string>())
      ("tp", "Tensor-parallel degree (GPUs per replica)", cxxopts::value<int>()->default_value("1"))
      ("dp", "Data-parallel replicas (the job runs tp x dp GPUs, `mpirun -np tp*dp ... --tp tp`): "
       "memory per GPU is per replica, sequences multiply", cxxopts::value<int>()->default_value("1"))
      ("gpu-mem", "Memory of ONE GPU, e.g. 24GiB, 80GiB, 141GB",
       cxxopts::value<std::string>()->default_value("80GiB"))
      ("max-seq-len", "Tokens per sequence (prompt + generated); default: the model's "
       "max_position_embeddings", cxxopts::value<int>())
      ("dtype", "Weight dtype (and the KV cache's with --kv-cache-dtype auto): fp16 | bf16 | fp32",
       cxxopts::value<std::string>()->default_value("fp16"))
      ("kv-cache-dtype", "KV-cache dtype: auto (same as --dtype) | fp8 | fp8_e4m3 (1 byte per "
       "element, fp16/bf16 weights only)", cxxopts::value<std::string>()->default_value("auto"))
      ("weight-dtype", "Projection weights: auto (same as --dtype; fp8 for an FP8 checkpoint) | "
       "fp8 | fp8_e4m3 | int8 (1 "
       "byte per weight plus a 4-byte scale per output row, fp16/bf16 only) | int4 (half a byte "
       "per weight plus a 4-byte pair per group of 128 and row; a 4-bit checkpoint's own groups)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("block-size", "KV cache block size in tokens", cxxopts::value<int>()->default_value("16"))
      ("reserve", "Memory per GPU held back for CUDA context, workspaces, activations; default "
       "max(2GiB, 10% of --gpu-mem)", cxxopts::value<std::string>())
      ("json", "Print one JSON object (exact byte counts) instead of a table")
      ("h,help", "Show this help");
  // clang-format on
  return opts;
}

uint64_t bytes_flag(const cxxopts::ParseResult& args, const char* flag) {
  try {
    return parse_bytes(args[flag].as<std::string>());
  } catch (const Error& e) {
    throw Error(std::string("--") + flag + ": " + e.what());
  }
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

std::string verdict(const CapacityPlan& p) {
  if (!p.tp_valid) return "no: tp " + std::to_string(p.tp) + " invalid: " + p.tp_invalid_reason;
  if (p.fits) return "yes";
  return "no: short by " + format_bytes(p.shortfall_bytes) + " per GPU for one " +
         std::to_string(p.max_seq_len) + "-token sequence";
}

// One line of the table: a label column, then the value.
void row(const std::string& label, const std::string& value) {
  std::printf("  %-32s %s\n", label.c_str(), value.c_str());
}

// "7.5 GiB (8053063680 B)": the exact count too, where rounding hides it.
std::string with_exact(int64_t b) {
  return b < 1024 ? format_bytes(b) : format_bytes(b) + " (" + std::to_string(b) + " B)";
}

// The table's rows for one GPU's shard (a valid TP degree): weights, KV cache, what fits.
void print_shard_rows(const CapacityPlan& p, const ModelConfig& c, const std::string& kv_dtype,
                      int dp) {
  row("weights per GPU (largest shard)", with_exact(p.weight_bytes_per_gpu));
  if (p.scratch_bytes_per_gpu > 0) {
    row("4-bit prefill scratch per GPU", with_exact(p.scratch_bytes_per_gpu));
  }
  row("reserve per GPU",
      format_bytes(p.reserve_bytes) +
          (p.reserve_is_default ? " (default: max(2GiB, 10% of --gpu-mem))" : " (--reserve)"));
  row("free for KV cache per GPU", format_bytes(p.free_bytes_for_kv));
  row("heads / kv heads per GPU",
      std::to_string(p.heads_per_gpu) + " / " + std::to_string(p.kv_heads_per_gpu) +
          (p.kv_replicated ? " (kv heads replicated: " + std::to_string(c.num_kv_heads) +
                                 " kv heads < tp " + std::to_string(p.tp) + ")"
                           : ""));
  row("KV per token per GPU", with_exact(p.kv_bytes_per_token) + ", " + kv_dtype + " (" +
                                  std::to_string(p.kv_dtype_bytes) + " B/element)");
  row("KV per block (" + std::to_string(p.block_size) + " tokens)",
      format_bytes(p.kv_bytes_per_block));
  row("KV per full sequence", format_bytes(p.kv_bytes_per_sequence) + " (" +
                                  std::to_string(p.blocks_per_sequence) + " blocks)");
  row("KV blocks that fit per GPU",
      std::to_string(p.kv_blocks) + " (" + std::to_string(p.kv_tokens) + " tokens)");
  row("max full-length sequences", std::to_string(p.max_sequences));
  if (dp > 1) {
    // Every replica holds its own cache of the same size: per-GPU numbers stay as above.
    row("replicas (--dp)", std::to_string(dp) + " x tp " + std::to_string(p.tp) + " = " +
                               std::to_string(dp * p.tp) + " GPUs (mpirun -np " +
                               std::to_string(dp * p.tp) + " ... --tp " + std::to_string(p.tp) +
                               ")");
    row("KV tokens, all replicas", std::to_string(p.kv_tokens * dp));
    row("max full-length sequences, all", std::to_string(p.max_sequences * dp));
  }
}

void print_table(const CapacityPlan& p, const ModelConfig& c, const std::string& source,
                 const std::string& dtype, const std::string& kv_dtype, int dp) {
  std::printf(
      "llama2 plan: %s, tp %d, %s weights, %s KV cache, %s per GPU, max_seq_len %d, block %d "
      "tokens\n",
      source.c_str(), p.tp, dtype.c_str(), kv_dtype.c_str(), format_bytes(p.gpu_mem_bytes).c_str(),
      p.max_seq_len, p.block_size);
  row("model", std::to_string(c.num_layers) + " layers, hidden " + std::to_string(c.hidden_size) +
                   ", " + std::to_string(c.num_heads) + " heads, " +
                   std::to_string(c.num_kv_heads) + " kv heads, head_dim " +
                   std::to_string(c.head_dim()) + ", vocab " + std::to_string(c.vocab_size) +
                   (c.tie_word_embeddings ? ", tied embeddings" : ""));
  row("weights, whole model", with_exact(p.model_weight_bytes));
  if (p.tp_valid) print_shard_rows(p, c, kv_dtype, dp);
  row("fits", verdict(p));
  if (!p.fits) {
    row("smallest TP degree that fits", p.smallest_fitting_tp
                                            ? std::to_string(p.smallest_fitting_tp)
                                            : "none up to " + std::to_string(kPlanMaxTp));
  }
  row("valid TP degrees", join_ints(p.valid_tp_degrees));
  for (size_t i = 0; i < p.invalid_tp.size(); ++i) {
    row(i == 0 ? "invalid TP degrees" : "",
        std::to_string(p.invalid_tp[i].tp) + ": " + p.invalid_tp[i].reason);
  }
}

nlohmann::ordered_json plan_json(const CapacityPlan& p, const std::string& source,
                                 const std::string& dtype, const std::string& kv_dtype, int dp) {
  using nlohmann::ordered_json;
  // Per-GPU numbers are null when the degree is invalid: there is no shard to measure.
  auto per_gpu = [&](auto v) { return p.tp_valid ? ordered_json(v) : ordered_json(nullptr); };
  ordered_json invalid = ordered_json::array();
  for (const TpDegreeNote& n : p.invalid_tp)
    invalid.push_back({{"tp", n.tp}, {"reason", n.reason}});
  return ordered_json{
      {"model", source},
      {"tp", p.tp},
      {"dtype", dtype},
      {"dtype_bytes", p.dtype_bytes},
      {"kv_cache_dtype", kv_dtype},
      {"kv_dtype_bytes", p.kv_dtype_bytes},
      {"gpu_mem_bytes", p.gpu_mem_bytes},
      {"reserve_bytes", p.reserve_bytes},
      {"reserve_is_default", p.reserve_is_default},
      {"max_seq_len", p.max_seq_len},
      {"block_size", p.block_size},
      {"tp_valid", p.tp_valid},
      {"tp_invalid_reason", p.tp_valid ? ordered_json(nullptr) : ordered_json(p.tp_invalid_reason)},
      {"model_weight_bytes", p.model_weight_bytes},
      {"weight_bytes_per_gpu", per_gpu(p.weight_bytes_per_gpu)},
      {"scratch_bytes_per_gpu", per_gpu(p.scratch_bytes_per_gpu)},
      {"heads_per_gpu", per_gpu(p.heads_per_gpu)},
      {"kv_heads_per_gpu", per_gpu(p.kv_heads_per_gpu)},
      {"kv_replicated", per_gpu(p.kv_replicated)},
      {"kv_bytes_per_token_per_gpu", per_gpu(p.kv_bytes_per_token)},
      {"kv_bytes_per_block", per_gpu(p.kv_bytes_per_block)},
      {"blocks_per_sequence", per_gpu(p.blocks_per_sequence)},
      {"kv_bytes_per_sequence", per_gpu(p.kv_bytes_per_sequence)},
      {"free_bytes_for_kv", per_gpu(p.free_bytes_for_kv)},
      {"kv_blocks", per_gpu(p.kv_blocks)},
      {"kv_tokens", per_gpu(p.kv_tokens)},
      {"max_sequences", per_gpu(p.max_sequences)},
      {"fits", p.fits},
      {"shortfall_bytes", per_gpu(p.shortfall_bytes)},
      {"smallest_fitting_tp",
       p.smallest_fitting_tp ? ordered_json(p.smallest_fitting_tp) : ordered_json(nullptr)},
      {"valid_tp_degrees", p.valid_tp_degrees},
      {"invalid_tp_degrees", invalid},
      {"dp", dp},
      {"gpus", dp * p.tp},
      {"job_kv_tokens", per_gpu(p.kv_tokens * dp)},
      {"job_max_sequences", per_gpu(p.max_sequences * dp)}};
}

// --preset NAME or --model DIR: the model's config and how the report names it.
ModelConfig plan_model(const cxxopts::ParseResult& args, std::string* source) {
  if (!args.count("preset")) {
    *source = args["model"].as<std::string>();
    return load_model_config(*source);
  }
  const std::string name = args["preset"].as<std::string>();
  *source =
      (name.rfind("codellama-", 0) == 0 ? "CodeLlama-" + name.substr(10) : "Llama-2-" + name) +
      " (preset)";
  try {
    return preset_config(name);
  } catch (const Error& e) {
    throw Error(std::string("--preset: ") + e.what());
  }
}

// --dtype: the planner has no checkpoint to follow, so auto is not among its dtypes.
ComputeDType plan_dtype(const std::string& dtype) {
  ComputeDType parsed = ComputeDType::kAuto;
  try {
    parsed = parse_compute_dtype(dtype);
  } catch (const Error&) {
  }
  if (parsed == ComputeDType::kAuto) {
    throw Error("--dtype: unknown dtype '" + dtype + "' (allowed: fp16, bf16, fp32)");
  }
  return parsed;
}

// The projections' element type: --weight-dtype, or an FP8 checkpoint's own under auto.
WeightDType plan_weights(const cxxopts::ParseResult& args, const ModelConfig& config,
                         ComputeDType dtype) {
  ComputeDType weight_named = ComputeDType::kAuto;
  const std::string flag = args["weight-dtype"].as<std::string>();
  WeightDType weights = parse_weight_dtype(flag, &weight_named);
  if (weight_named != ComputeDType::kAuto && weight_named != dtype) {
    throw Error("--weight-dtype " + flag + " differs from --dtype " +
                args["dtype"].as<std::string>() +
                " (allowed: auto, fp8, fp8_e4m3, int8, or the --dtype itself)");
  }
  // An FP8 or 4-bit checkpoint's projections stay as stored under auto where the engine keeps
  // them so on cuda (fp16/bf16; 4-bit: a packing the kernels take, choose_weight_dtype); else
  // they are dequantized.
  const bool as_stored = weights == WeightDType::kAuto && weight_named == ComputeDType::kAuto &&
                         dtype != ComputeDType::kFp32;
  if (config.quant.fp8 && as_stored) return WeightDType::kFp8;
  if (config.quant.int4_runs_packed() && as_stored) return WeightDType::kInt4;
  if (weights == WeightDType::kInt4 && config.quant.int4 != Int4Format::kNone &&
      !config.quant.int4_runs_packed()) {
    throw Error("--weight-dtype int4: the 4-bit kernels need contiguous groups of a multiple of " +
                std::string("64 columns; this checkpoint is ") + config.quant.describe() +
                " (use --weight-dtype auto: dequantized at load)");
  }
  return weights;
}

CapacityRequest plan_request(const cxxopts::ParseResult& args, WeightDType weights) {
  CapacityRequest req;
  req.tp = args["tp"].as<int>();
  req.dtype_bytes = dtype_bytes_of(args["dtype"].as<std::string>());
  req.kv_dtype_bytes = kv_dtype_bytes_of(args["kv-cache-dtype"].as<std::string>(), req.dtype_bytes);
  // 1 (fp8, int8) or kInt4LinearBytes; the dtype does not matter for a quantized dtype.
  req.linear_bytes =
      weights == WeightDType::kAuto ? 0 : weight_dtype_bytes(weights, ComputeDType::kFp16);
  req.block_size = args["block-size"].as<int>();
  req.gpu_mem_bytes = bytes_flag(args, "gpu-mem");
  if (args.count("reserve")) req.reserve_bytes = bytes_flag(args, "reserve");
  if (args.count("max-seq-len")) req.max_seq_len = args["max-seq-len"].as<int>();
  return req;
}

}  // namespace

int run_plan(int argc, char** argv) {
  cxxopts::Options opts = plan_options();
  const CommandLine cl = parse_command(opts, argc, argv, {}, kPlanEpilog);
  if (cl.help_requested) return 0;
  const cxxopts::ParseResult& args = cl.args;
  require_one_of(cl, {"model", "preset"},
                 "give exactly one of --model DIR, --preset 7b|13b|70b|codellama-34b|...");

  // Values (not syntax) are checked here and in plan_capacity; their errors name the flag.
  std::string source;
  const ModelConfig config = plan_model(args, &source);
  const std::string dtype = args["dtype"].as<std::string>();
  const ComputeDType parsed = plan_dtype(dtype);
  const int dp = args["dp"].as<int>();
  if (dp < 1) throw Error("--dp must be >= 1 (got " + std::to_string(dp) + ")");
  const WeightDType weights = plan_weights(args, config, parsed);
  const CapacityPlan plan = plan_capacity(config, plan_request(args, weights));
  // Output shows the resolved name, so "auto" never reaches a script that reads the JSON.
  const std::string kv_dtype = plan.kv_dtype_bytes == 1 ? "fp8_e4m3" : dtype;
  const std::string weight_dtype =
      weights == WeightDType::kInt4 && config.quant.int4 != Int4Format::kNone
          ? std::string("int4 (") + config.quant.method + ")"
          : std::string(weight_dtype_name(weights, parsed));

  if (args.count("json")) {
    nlohmann::json j = plan_json(plan, source, dtype, kv_dtype, dp);
    j["weight_dtype"] = weight_dtype;
    if (!config.quant.method.empty()) j["checkpoint_quantization"] = config.quant.describe();
    std::cout << j.dump() << std::endl;
  } else {
    std::string label =
        weight_dtype == dtype ? dtype : dtype + " (projections " + weight_dtype + ")";
    if (!config.quant.method.empty()) label += "; checkpoint " + config.quant.describe();
    print_table(plan, config, source, label, kv_dtype, dp);
    std::fflush(stdout);
  }
  return plan.fits ? 0 : 1;
}

}  // namespace llama2
