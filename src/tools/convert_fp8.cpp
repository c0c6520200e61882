// `llama2 convert-fp8`: writes a model directory's projections as an FP8 checkpoint in the layout
// peers publish (F8_E4M3 weights, weight_scale beside each, config.json quantization_config), with
// the quantization rule of kernels/quant.cu, so that reading the result with --weight-dtype fp8
// gives the bytes the GPU makes from the 16-bit model itself. Tests make their FP8 fixtures with
// it; users may convert a checkpoint once instead of quantizing on every start-up.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "rank/fp8_checkpoint.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"
#include "tools/safetensors_writer.h"

namespace llama2 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

cxxopts::Options make_options() {
  cxxopts::Options opts(
      "llama2 convert-fp8",
      "Write a model's q/k/v/o/gate/up/down projections as F8_E4M3 with per-channel or per-tensor "
      "weight_scale (s = max|w| / 448, e4m3 round to nearest even: the rule of --weight-dtype "
      "fp8), embeddings, norms and lm_head unchanged, and config.json's quantization_config.");
  opts.add_options()("m,model", "Input model directory (F32, F16 or BF16 safetensors)",
                     cxxopts::value<std::string>())("o,out", "Output directory",
                                                    cxxopts::value<std::string>())(
      "scales", "channel (one scale per output row) | tensor (one per projection)",
      cxxopts::value<std::string>()->default_value("channel"))(
      "format",
      "compressed-tensors (llm-compressor: scales [out, 1] or [1]) | fp8 (AutoFP8: scales [out] "
      "or [])",
      cxxopts::value<std::string>()->default_value("compressed-tensors"))(
      "static-input-scales",
      "Also write an input_scale per projection and declare static activation scales (the "
      "engine reads such files and ignores the scales)")(
      "dequantized-out",
      "Also write DIR: the same model with the projections dequantized to F32 (scale * e4m3), "
      "no quantization_config; its logits must equal the FP8 checkpoint's",
      cxxopts::value<std::string>())("force", "Overwrite existing output directories")(
      "h,help", "Show this help");
  return opts;
}

bool is_projection_name(const std::string& name) {
  const std::string suffix = "_proj.weight";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json quantization_config(const std::string& format, bool per_channel, bool static_inputs) {
  if (format == "fp8") {
    return {{"quant_method", "fp8"},
            {"activation_scheme", static_inputs ? "static" : "dynamic"},
            {"ignored_layers", {"lm_head"}}};
  }
  json inputs = static_inputs ? json{{"num_bits", 8},
                                     {"type", "float"},
                                     {"symmetric", true},
                                     {"strategy", "tensor"},
                                     {"dynamic", false}}
                              : json{{"num_bits", 8},
                                     {"type", "float"},
                                     {"symmetric", true},
                                     {"strategy", "token"},
                                     {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 8},
                {"type", "float"},
                {"symmetric", true},
                {"dynamic", false},
                {"strategy", per_channel ? "channel" : "tensor"}}},
              {"input_activations", inputs}}}}}};
}

// Quantizes w [rows, cols] in place to the e4m3 grid (values stay floats, exactly e4m3 values)
// and returns the scales: one per row, or one for the whole tensor. The rule of kernels/quant.cu:
// s = max|x| / 448 (1 for all zeros), q = e4m3_rn_satfinite(x / s).
std::vector<float> quantize(std::vector<float>* w, int64_t rows, int64_t cols, bool per_channel) {
  const int64_t groups = per_channel ? rows : 1;
  const int64_t per_group = per_channel ? cols : rows * cols;
  std::vector<float> scales(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    float* x = w->data() + g * per_group;
    float amax = 0.f;
    for (int64_t i = 0; i < per_group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = amax > 0.f ? amax / 448.f : 1.f;
    scales[static_cast<size_t>(g)] = s;
    for (int64_t i = 0; i < per_group; ++i) x[i] = e4m3_to_f32(f32_to_e4m3(x[i] / s));
  }
  return scales;
}

void prepare_dir(const std::string& dir, bool force) {
  if (fs::exists(dir) && !fs::is_empty(dir) && !force) {
    throw Error(dir + " exists and is not empty (use --force to overwrite)");
  }
  fs::create_directories(dir);
  for (const char* stale : {"model.safetensors", "model.safetensors.index.json"}) {
    fs::remove(fs::path(dir) / stale);
  }
}

void copy_side_files(const fs::path& from, const fs::path& to) {
  for (const char* name : {"tokenizer.model", "generation_config.json"}) {
    if (fs::exists(from / name)) {
      fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
    }
  }
}

}  // namespace

int run_convert_fp8(int argc, char** argv) {
  cxxopts::Options opts = make_options();
  const auto args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!args.count("model") || !args.count("out")) {
    throw UsageError("--model and --out are required", opts.help());
  }
  const std::string in = args["model"].as<std::string>(), out = args["out"].as<std::string>();
  const std::string scales = args["scales"].as<std::string>();
  const std::string format = args["format"].as<std::string>();
  if (scales != "channel" && scales != "tensor") {
    throw Error("--scales must be channel or tensor (got \"" + scales + "\")");
  }
  if (format != "compressed-tensors" && format != "fp8") {
    throw Error("--format must be compressed-tensors or fp8 (got \"" + format + "\")");
  }
  const bool per_channel = scales == "channel";
  const bool static_inputs = args.count("static-input-scales") > 0;
  const bool force = args.count("force") > 0;

  json config = read_json_file((fs::path(in) / "config.json").string());
  const ModelConfig c = parse_model_config(config, in + "/config.json");
  if (c.quant.fp8) throw Error(in + " is already an FP8 checkpoint (" + c.quant.describe() + ")");
  const WeightStore store = WeightStore::open(in);
  validate_fp8_checkpoint(store, c);  // refuses fp8 tensors in a checkpoint that is not FP8

  std::vector<TensorToWrite> fp8, plain;
  uint64_t projections = 0;
  for (const TensorSlice& t : all_full_tensors(c)) {
    store.expect_shape(t.name, t.full_shape);
    const DType dtype = store.get(t.name).dtype;
    std::vector<float> v(static_cast<size_t>(t.numel()));
    store.read_vector_f32(t.name, v.data());
    if (!is_projection_name(t.name)) {
      fp8.push_back({t.name, dtype, t.full_shape, v});
      plain.push_back({t.name, dtype, t.full_shape, std::move(v)});
      continue;
    }
    ++projections;
    const int64_t rows = t.full_shape[0], cols = t.full_shape[1];
    const std::vector<float> s = quantize(&v, rows, cols, per_channel);
    std::vector<float> deq(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      deq[i] = s[per_channel ? i / static_cast<size_t>(cols) : 0] * v[i];
    }
    // [rows] or [rows, 1] per channel, [] or [1] per tensor (fp8 / compressed-tensors). Built by
    // push_back: g++ 14 reports a false -Warray-bounds on copies of vectors made from the
    // initializer lists of a conditional expression.
    std::vector<int64_t> scale_shape;
    if (per_channel) scale_shape.push_back(rows);
    if (format != "fp8") scale_shape.push_back(1);
    fp8.push_back({t.name, DType::F8_E4M3, t.full_shape, std::move(v)});
    fp8.push_back({weight_scale_name(t.name), DType::F32, scale_shape, s});
    if (static_inputs) {
      // Any positive value: the engine does not use it (it quantizes activations per token).
      // Scalar in the fp8 layout, [1] in compressed-tensors', as each writes its scales.
      std::vector<int64_t> one;
      if (format != "fp8") one.push_back(1);
      fp8.push_back({input_scale_name(t.name), DType::F32, one, {0.05f}});
    }
    plain.push_back({t.name, DType::F32, t.full_shape, std::move(deq)});
  }

  prepare_dir(out, force);
  write_safetensors((fs::path(out) / "model.safetensors").string(), fp8);
  json quantized = config;
  quantized["quantization_config"] = quantization_config(format, per_channel, static_inputs);
  write_json_file((fs::path(out) / "config.json").string(), quantized);
  copy_side_files(in, out);
  std::cout << "wrote " << out << ": " << projections << " projections as F8_E4M3 with " << scales
            << " scales (" << format << ")" << std::endl;

  if (args.count("dequantized-out")) {
    const std::string deq_dir = args["dequantized-out"].as<std::string>();
    prepare_dir(deq_dir, force);
    write_safetensors((fs::path(deq_dir) / "model.safetensors").string(), plain);
    config.erase("quantization_config");
    write_json_file((fs::path(deq_dir) / "config.json").string(), config);
    copy_side_files(in, deq_dir);
    std::cout << "wrote " << deq_dir << ": the same weights dequantized to F32" << std::endl;
  }
  return 0;
}

}  // namespace llama2
