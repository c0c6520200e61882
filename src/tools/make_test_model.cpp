// `llama2 make-test-model`: a small Llama directory with deterministic random weights and a
// SentencePiece tokenizer trained by the project, for tests, the demo and the reference fixtures.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "rank/weight_layout.h"
#include "tools/safetensors_writer.h"
#include "tools/train_tokenizer.h"

namespace llama2 {
namespace {

namespace fs = std::filesystem;

// Box-Muller on mt19937_64 bits: unlike std::normal_distribution its output is fixed by the
// standard, so the same seed gives the same weights with any standard library.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : gen_(seed) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(gen_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(gen_() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    have_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::mt19937_64 gen_;
  double spare_ = 0.0;
  bool have_spare_ = false;
};

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return DType::F32;
  if (s == "f16" || s == "float16") return DType::F16;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  throw Error("--dtype must be one of f32, f16, bf16 (got \"" + s + "\")");
}

const char* torch_dtype_name(DType d) {
  return d == DType::F16 ? "float16" : d == DType::BF16 ? "bfloat16" : "float32";
}

// Scales chosen so that the random model has well separated logits (std ~3 over the vocabulary):
// greedy decoding then has clear winners, and reference comparisons are not decided by near-ties.
double init_std(const TensorSlice& t, const ModelConfig& c) {
  const std::string& n = t.name;
  if (n == "model.embed_tokens.weight" || n == "lm_head.weight") return 0.4;
  if (t.full_shape.size() == 1) return 0.1;  // norms: 1 + N(0, 0.1)
  return 1.0 / std::sqrt(static_cast<double>(t.full_shape[1]));
  (void)c;
}

cxxopts::Options make_options() {
  cxxopts::Options opts("llama2 make-test-model",
                        "Write a small Hugging Face Llama directory with random weights (fixed "
                        "seed) and a SentencePiece BPE tokenizer trained on the project's corpus.");
  opts.add_options()("o,out", "Output directory", cxxopts::value<std::string>())(
      "hidden-size", "Hidden size", cxxopts::value<int>()->default_value("64"))(
      "intermediate-size", "SwiGLU inner size", cxxopts::value<int>()->default_value("172"))(
      "layers", "Transformer layers", cxxopts::value<int>()->default_value("2"))(
      "heads", "Attention heads", cxxopts::value<int>()->default_value("4"))(
      "kv-heads", "Key/value heads (default: heads)", cxxopts::value<int>())(
      "vocab", "Vocabulary size (the tokenizer is trained to this size)",
      cxxopts::value<int>()->default_value("512"))("max-position-embeddings", "Context length",
                                                   cxxopts::value<int>()->default_value("512"))(
      "rope-theta", "RoPE base", cxxopts::value<double>()->default_value("10000"))(
      "dtype", "Tensor dtype: f32, f16, bf16", cxxopts::value<std::string>()->default_value("f32"))(
      "shards", "Number of safetensors files", cxxopts::value<int>()->default_value("1"))(
      "tie-embeddings", "Share the embedding with the LM head (no lm_head.weight)")(
      "seed", "Weight seed", cxxopts::value<uint64_t>()->default_value("1234"))(
      "lm-head-near-ties",
      "LM-head rows in groups of N near-copies (relative noise 1e-6), so that logits tie up to "
      "rounding as a trained model's byte-fallback tokens do (1 = off)",
      cxxopts::value<int>()->default_value("1"))(
      "corpus", "Tokenizer training text",
      cxxopts::value<std::string>()->default_value(LLAMA2_SOURCE_DIR "/data/corpus.txt"))(
      "tokenizer", "Copy this tokenizer.model instead of training one",
      cxxopts::value<std::string>())("force", "Overwrite an existing non-empty output directory")(
      "h,help", "Show this help");
  return opts;
}

// Makes the rows of `lm_head` [vocab, hidden] come in groups of `group` near-copies: every row of a
// group is the group's first row times (1 + 1e-6 g), g ~ N(0, 1) per element. Their logits then
// differ by ~1e-6 of their size, the size of the rounding differences between rank counts, which
// is what trained checkpoints show for their 256 byte-fallback tokens (logits within ~1e-5) and
// what random weights never do. A separate generator leaves every other tensor as without it.
void make_near_ties(TensorToWrite& lm_head, int group, uint64_t seed) {
  constexpr double kRelativeNoise = 1e-6;
  const int64_t rows = lm_head.shape[0], cols = lm_head.shape[1];
  Gaussian noise(seed ^ 0x9e3779b97f4a7c15ULL);
  for (int64_t r = 0; r < rows; ++r) {
    if (r % group == 0) continue;
    const float* first = lm_head.values.data() + (r - r % group) * cols;
    float* row = lm_head.values.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = static_cast<float>(first[c] * (1.0 + kRelativeNoise * noise.next()));
    }
  }
}

}  // namespace

int run_make_test_model(int argc, char** argv) {
  cxxopts::Options opts = make_options();
  const auto args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    std::cout << opts.help() << std::endl;
    return 0;
  }
  if (!args.count("out")) throw UsageError("--out is required", opts.help());
  const std::string out = args["out"].as<std::string>();
  const DType dtype = parse_dtype(args["dtype"].as<std::string>());
  const int shards = args["shards"].as<int>();
  const int near_ties = args["lm-head-near-ties"].as<int>();

  ModelConfig c;
  c.hidden_size = args["hidden-size"].as<int>();
  c.intermediate_size = args["intermediate-size"].as<int>();
  c.num_layers = args["layers"].as<int>();
  c.num_heads = args["heads"].as<int>();
  c.num_kv_heads = args.count("kv-heads") ? args["kv-heads"].as<int>() : c.num_heads;
  c.vocab_size = args["vocab"].as<int>();
  c.max_position_embeddings = args["max-position-embeddings"].as<int>();
  c.rope_theta = args["rope-theta"].as<double>();
  c.tie_word_embeddings = args.count("tie-embeddings") > 0;
  c.torch_dtype = torch_dtype_name(dtype);
  // Round-trip through the parser so the directory is valid by the engine's own rules.
  const nlohmann::json config_json = model_config_to_json(c);
  c = parse_model_config(config_json, "make-test-model options");
  if (c.vocab_size < kMinTokenizerVocab) {
    throw Error("--vocab must be >= " + std::to_string(kMinTokenizerVocab) +
                " (3 special + 256 byte pieces + 1) (got " + std::to_string(c.vocab_size) + ")");
  }
  const std::vector<TensorSlice> tensors = all_full_tensors(c);
  if (shards < 1 || shards > static_cast<int>(tensors.size())) {
    throw Error("--shards must be in [1, " + std::to_string(tensors.size()) + "] (got " +
                std::to_string(shards) + ")");
  }

  if (near_ties < 1 || near_ties > c.vocab_size) {
    throw Error("--lm-head-near-ties must be in [1, " + std::to_string(c.vocab_size) + "] (got " +
                std::to_string(near_ties) + ")");
  }
  // Tied embeddings: the embedding matrix is the LM head.
  const std::string lm_head_name =
      c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";

  if (fs::exists(out) && !fs::is_empty(out) && !args.count("force")) {
    throw Error(out + " exists and is not empty (use --force to overwrite)");
  }
  fs::create_directories(out);
  for (const char* stale : {"model.safetensors", "model.safetensors.index.json"}) {
    fs::remove(fs::path(out) / stale);
  }

  Gaussian rng(args["seed"].as<uint64_t>());
  std::vector<std::vector<TensorToWrite>> files(shards);
  std::map<std::string, std::string> weight_map;
  uint64_t total_bytes = 0;
  // Contiguous runs of tensors per file, like HF's sharded checkpoints.
  const size_t per_file = (tensors.size() + shards - 1) / shards;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSlice& t = tensors[i];
    TensorToWrite w{t.name, dtype, t.full_shape,
                    std::vector<float>(static_cast<size_t>(t.numel()))};
    const double std_dev = init_std(t, c);
    const double mean = t.full_shape.size() == 1 ? 1.0 : 0.0;
    for (float& v : w.values) v = static_cast<float>(mean + std_dev * rng.next());
    if (near_ties > 1 && t.name == lm_head_name) {
      make_near_ties(w, near_ties, args["seed"].as<uint64_t>());
    }
    total_bytes += w.values.size() * dtype_size(dtype);
    const size_t f = std::min(i / per_file, static_cast<size_t>(shards - 1));
    files[f].push_back(std::move(w));
  }
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  if (shards == 1) {
    write_safetensors((fs::path(out) / "model.safetensors").string(), files[0], meta);
  } else {
    for (int f = 0; f < shards; ++f) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", f + 1, shards);
      for (const auto& t : files[f]) weight_map[t.name] = name;
      write_safetensors((fs::path(out) / name).string(), files[f], meta);
    }
    write_safetensors_index((fs::path(out) / "model.safetensors.index.json").string(), weight_map,
                            total_bytes);
  }

  {
    std::ofstream cfg(fs::path(out) / "config.json");
    cfg << model_config_to_json(c).dump(2) << "\n";
    if (!cfg) throw Error(out + "/config.json: write failed");
  }
  {
    std::ofstream gen(fs::path(out) / "generation_config.json");
    gen << nlohmann::json{{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id}}.dump(
               2)
        << "\n";
  }
  if (args.count("tokenizer")) {
    fs::copy_file(args["tokenizer"].as<std::string>(), fs::path(out) / "tokenizer.model",
                  fs::copy_options::overwrite_existing);
  } else {
    train_tokenizer(args["corpus"].as<std::string>(), (fs::path(out) / "tokenizer").string(),
                    c.vocab_size);
  }
  std::cout << "wrote " << out << ": " << c.num_layers << " layers, hidden " << c.hidden_size
            << ", heads " << c.num_heads << "/" << c.num_kv_heads << " kv, vocab " << c.vocab_size
            << ", " << torch_dtype_name(dtype) << ", " << shards << " safetensors file(s), "
            << total_bytes << " bytes of weights" << std::endl;
  return 0;
}

}  // namespace llama2
