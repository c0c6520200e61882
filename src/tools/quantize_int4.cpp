// `llama2 quantize --format awq|gptq`: writes a model's q/k/v/o/gate/up/down projections as a 4-bit
// AWQ or GPTQ checkpoint in the layouts rank/int4_checkpoint.h reads (AutoAWQ's "gemm" packing,
// AutoGPTQ's v1 / GPTQModel's v2), by round-to-nearest: each group of input rows of an output
// column gets the grid its formats' packers would choose from that group's range, without the
// activation statistics their calibration uses (so it is RTN, not AWQ's or GPTQ's search).
// Embeddings, norms and lm_head keep the source's dtype. Tests make their 4-bit models with it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"
#include "tools/safetensors_writer.h"

namespace llama2 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// AutoAWQ's packing order: nibble k of a word holds output column 8j + kAwqOrder[k].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Settings {
  bool awq = true;
  int group = 128;  // -1: one group over all input rows (GPTQ)
  bool sym = false, desc_act = false, v2 = false, quantize_config_file = false;
};

cxxopts::Options make_options() {
  cxxopts::Options opts(
      "llama2 quantize",
      "Write a model's q/k/v/o/gate/up/down projections as a 4-bit AWQ (gemm) or GPTQ checkpoint "
      "by round-to-nearest per group of input rows (no calibration), embeddings, norms and "
      "lm_head unchanged, and the quantization_config that transformers and vLLM read.");
  // clang-format off
  opts.add_options()
      ("m,model", "Input model directory (F32, F16 or BF16)", cxxopts::value<std::string>())
      ("o,out", "Output directory", cxxopts::value<std::string>())
      ("format", "awq | gptq", cxxopts::value<std::string>())
      ("group-size", "Input rows per group: 32, 64, 128, ... (gptq: -1 = one group)",
       cxxopts::value<int>()->default_value("128"))
      ("sym", "gptq: symmetric grid (zero point 8); default asymmetric (awq always is)")
      ("desc-act", "gptq: rows grouped by a fixed shuffle and g_idx (act order's layout; RTN has "
       "no activations to order by)")
      ("checkpoint-format", "gptq: gptq (zeros stored minus one, AutoGPTQ) | gptq_v2 (GPTQModel)",
       cxxopts::value<std::string>()->default_value("gptq"))
      ("quantize-config", "gptq: the settings in quantize_config.json instead of config.json")
      ("force", "Overwrite a non-empty output directory")
      ("h,help", "Show this help");
  // clang-format on
  return opts;
}

Settings settings_from(const cxxopts::ParseResult& args) {
  Settings s;
  const std::string format = args["format"].as<std::string>();
  if (format != "awq" && format != "gptq") {
    throw Error("--format must be awq or gptq (got \"" + format + "\")");
  }
  s.awq = format == "awq";
  s.group = args["group-size"].as<int>();
  if (!(s.group > 0 && s.group % 8 == 0) && !(s.group == -1 && !s.awq)) {
    throw Error("--group-size must be a positive multiple of 8 (or -1 with gptq) (got " +
                std::to_string(s.group) + ")");
  }
  const std::string cf = args["checkpoint-format"].as<std::string>();
  if (cf != "gptq" && cf != "gptq_v2") {
    throw Error("--checkpoint-format must be gptq or gptq_v2 (got \"" + cf + "\")");
  }
  s.sym = args.count("sym") > 0;
  s.desc_act = args.count("desc-act") > 0;
  s.v2 = cf == "gptq_v2";
  s.quantize_config_file = args.count("quantize-config") > 0;
  if (s.awq && (s.sym || s.desc_act || s.v2 || s.quantize_config_file)) {
    throw Error("--sym, --desc-act, --checkpoint-format gptq_v2 and --quantize-config are gptq's");
  }
  return s;
}

json quantization_config(const Settings& s) {
  if (s.awq) {
    return {{"quant_method", "awq"}, {"bits", 4},         {"group_size", s.group},
            {"zero_point", true},    {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  }
  return {{"quant_method", "gptq"},
          {"bits", 4},
          {"group_size", s.group},
          {"desc_act", s.desc_act},
          {"sym", s.sym},
          {"true_sequential", true},
          {"damp_percent", 0.0},
          {"static_groups", false},
          {"checkpoint_format", s.v2 ? "gptq_v2" : "gptq"}};
}

// Each input row's group: row / G, or under desc_act the position of the row in a fixed shuffle
// divided by G (mt19937's output is fixed by the standard, so the file is the same everywhere).
std::vector<int32_t> groups_of(const Settings& s, int64_t in) {
  const int64_t g = s.group > 0 ? s.group : in;
  std::vector<int64_t> order(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) order[i] = i;
  if (s.desc_act) {
    std::mt19937 gen(20251203);
    for (int64_t i = in - 1; i > 0; --i) std::swap(order[i], order[gen() % (i + 1)]);
  }
  std::vector<int32_t> group(static_cast<size_t>(in));
  for (int64_t p = 0; p < in; ++p) group[order[p]] = static_cast<int32_t>(p / g);
  return group;
}

struct Grid {
  float scale = 1.f;  // fp16-representable (the file stores it as F16)
  int zero = 0;
};

// The grid of one group of one column from its values' range, as the packers choose it: AWQ
// (max - min) / 15 with zero -round(min / scale); GPTQ the range widened to hold 0, symmetric
// (2 max|w| / 15, zero 8) or not; v1 keeps the zero >= 1 so that zero - 1 fits a nibble.
Grid grid(const Settings& s, float lo, float hi) {
  Grid g;
  float range;
  if (s.awq) {
    range = std::max(hi - lo, 1e-5f);
  } else {
    lo = std::min(lo, 0.f);
    hi = std::max(hi, 0.f);
    if (s.sym) {
      hi = std::max(-lo, hi);
      lo = -hi;
    }
    if (lo == 0.f && hi == 0.f) {
      lo = -1.f;
      hi = 1.f;
    }
    range = hi - lo;
  }
  g.scale = f16_to_f32(f32_to_f16(range / 15.f));
  g.zero = s.sym ? 8 : static_cast<int>(std::clamp(std::nearbyint(-lo / g.scale), 0.f, 15.f));
  if (!s.awq && !s.v2) g.zero = std::max(g.zero, 1);
  return g;
}

// W [out, in] (HF's layout) as the module's packed tensors.
std::vector<TensorToWrite> pack(const Settings& s, const std::string& module,
                                const std::vector<float>& w, int64_t out, int64_t in) {
  const std::vector<int32_t> group = groups_of(s, in);
  const int64_t groups = *std::max_element(group.begin(), group.end()) + 1;
  std::vector<float> lo(static_cast<size_t>(groups * out), INFINITY);
  std::vector<float> hi(lo.size(), -INFINITY);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      float& l = lo[group[i] * out + o];
      float& h = hi[group[i] * out + o];
      l = std::min(l, w[o * in + i]);
      h = std::max(h, w[o * in + i]);
    }
  }
  std::vector<Grid> grids(lo.size());
  for (size_t k = 0; k < grids.size(); ++k) grids[k] = grid(s, lo[k], hi[k]);
  // AWQ: [in, out/8], columns interleaved; GPTQ: [in/8, out], 8 rows per word.
  std::vector<int32_t> qweight(static_cast<size_t>(in * out / 8), 0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      const Grid& g = grids[group[i] * out + o];
      const float v = std::nearbyint(w[o * in + i] / g.scale) + static_cast<float>(g.zero);
      const auto q = static_cast<uint32_t>(std::clamp(v, 0.f, 15.f));
      if (s.awq) {
        const int k = static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, o % 8) - kAwqOrder);
        qweight[i * (out / 8) + o / 8] |= static_cast<int32_t>(q << (4 * k));
      } else {
        qweight[(i / 8) * out + o] |= static_cast<int32_t>(q << (4 * (i % 8)));
      }
    }
  }
  std::vector<int32_t> qzeros(static_cast<size_t>(groups * out / 8), 0);
  std::vector<float> scales(grids.size());
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      const Grid& gr = grids[g * out + o];
      scales[g * out + o] = gr.scale;
      const auto z = static_cast<uint32_t>(s.awq || s.v2 ? gr.zero : gr.zero - 1);
      const int k = s.awq ? static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, o % 8) - kAwqOrder)
                          : static_cast<int>(o % 8);
      qzeros[g * (out / 8) + o / 8] |= static_cast<int32_t>(z << (4 * k));
    }
  }
  std::vector<TensorToWrite> t;
  t.push_back({module + ".qweight",
               DType::I32,
               s.awq ? std::vector<int64_t>{in, out / 8} : std::vector<int64_t>{in / 8, out},
               {},
               std::move(qweight)});
  t.push_back({module + ".qzeros", DType::I32, {groups, out / 8}, {}, std::move(qzeros)});
  t.push_back({module + ".scales", DType::F16, {groups, out}, std::move(scales), {}});
  if (!s.awq) t.push_back({module + ".g_idx", DType::I32, {in}, {}, group});
  return t;
}

}  // namespace

int run_quantize(int argc, char** argv) {
  cxxopts::Options opts = make_options();
  const auto args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!args.count("model") || !args.count("out") || !args.count("format")) {
    throw UsageError("--model, --out and --format are required", opts.help());
  }
  const Settings s = settings_from(args);
  const std::string in = args["model"].as<std::string>(), out = args["out"].as<std::string>();
  json config = read_json_file((fs::path(in) / "config.json").string());
  const ModelConfig c = parse_model_config(config, in + "/config.json");
  if (!c.quant.method.empty())
    throw Error(in + " is already quantized (" + c.quant.describe() + ")");
  const WeightStore store = WeightStore::open(in);
  if (fs::exists(out) && !fs::is_empty(out) && !args.count("force")) {
    throw Error(out + " exists and is not empty (use --force to overwrite)");
  }
  std::vector<TensorToWrite> tensors;
  int projections = 0;
  for (const TensorSlice& t : all_full_tensors(c)) {
    store.expect_shape(t.name, t.full_shape);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    store.read_vector_f32(t.name, v.data());
    const std::string suffix = "_proj.weight";
    if (t.name.size() < suffix.size() || t.name.rfind(suffix) != t.name.size() - suffix.size()) {
      tensors.push_back({t.name, store.get(t.name).dtype, t.full_shape, std::move(v), {}});
      continue;
    }
    const int64_t n = t.full_shape[0], k = t.full_shape[1];
    if (n % 8 != 0 || k % 8 != 0 || (s.group > 0 && k % s.group != 0)) {
      throw Error(t.name + " [" + std::to_string(n) + ", " + std::to_string(k) +
                  "]: 4-bit packing needs both dimensions multiples of 8 and the input "
                  "dimension a multiple of --group-size " +
                  std::to_string(s.group));
    }
    for (TensorToWrite& p : pack(s, t.name.substr(0, t.name.size() - 7), v, n, k)) {
      tensors.push_back(std::move(p));
    }
    ++projections;
  }
  fs::create_directories(out);
  write_safetensors((fs::path(out) / "model.safetensors").string(), tensors);
  if (s.quantize_config_file) {
    write_json_file((fs::path(out) / "quantize_config.json").string(), quantization_config(s));
  } else {
    config["quantization_config"] = quantization_config(s);
  }
  write_json_file((fs::path(out) / "config.json").string(), config);
  for (const char* f : {"tokenizer.model", "generation_config.json"}) {
    if (fs::exists(fs::path(in) / f)) {
      fs::copy_file(fs::path(in) / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
    }
  }
  std::cout << "wrote " << out << ": " << projections << " projections as "
            << quantization_config(s).dump() << std::endl;
  return 0;
}

}  // namespace llama2
