#include "common/capacity.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <utility>

#include "common/check.h"

namespace llama2 {
namespace {

// Sizes above this are typos, and keeping them far below 2^63 lets free-memory arithmetic use
// signed 64-bit integers (free memory may be negative) without overflow.
constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 60;  // 1 EiB

void check_bytes_flag(uint64_t v, const char* flag) {
  if (v > kMaxPlanBytes) {
    throw Error(std::string(flag) + " is larger than 1 EiB (" + std::to_string(v) +
                " bytes); give the memory of one GPU, e.g. 80GiB");
  }
}

// Fills the per-GPU fields of `p` for p->tp, which must be valid.
void fill_per_gpu(const ModelConfig& c, CapacityPlan* p) {
  const ShardPlan s0 = make_shard_plan(c, p->tp, 0);
  p->heads_per_gpu = s0.num_heads;
  p->kv_heads_per_gpu = s0.num_kv_heads;
  p->kv_replicated = c.num_kv_heads < p->tp;
  p->weight_bytes_per_gpu = max_shard_weight_bytes(c, p->tp, p->dtype_bytes, p->linear_bytes);
  if (p->linear_bytes == kInt4LinearBytes) {  // CudaLinear's dequant_: the largest [N, K] in T
    const uint64_t H = static_cast<uint64_t>(c.hidden_size);
    const uint64_t qkv = static_cast<uint64_t>(s0.num_heads + 2 * s0.num_kv_heads) * s0.head_dim;
    const uint64_t ffn = static_cast<uint64_t>(s0.ffn_size);
    p->scratch_bytes_per_gpu =
        std::max({qkv * H, 2 * ffn * H, H * ffn}) * static_cast<uint64_t>(p->dtype_bytes);
  }
  p->kv_bytes_per_token = kv_bytes_per_token(c, s0, p->kv_dtype_bytes);
  p->kv_bytes_per_block = p->kv_bytes_per_token * static_cast<uint64_t>(p->block_size);
  p->blocks_per_sequence = (int64_t{p->max_seq_len} + p->block_size - 1) / p->block_size;
  p->kv_bytes_per_sequence = static_cast<uint64_t>(p->blocks_per_sequence) * p->kv_bytes_per_block;
  p->free_bytes_for_kv = static_cast<int64_t>(p->gpu_mem_bytes) -
                         static_cast<int64_t>(p->reserve_bytes) -
                         static_cast<int64_t>(p->weight_bytes_per_gpu) -
                         static_cast<int64_t>(p->scratch_bytes_per_gpu);
  p->kv_blocks = kv_blocks_that_fit(p->free_bytes_for_kv, p->kv_bytes_per_block);
  p->kv_tokens = p->kv_blocks * p->block_size;
  p->max_sequences = p->kv_blocks / p->blocks_per_sequence;
  p->fits = p->kv_blocks >= p->blocks_per_sequence;
  // fits <=> free >= blocks_per_sequence * block_bytes, so this is exactly the missing memory.
  p->shortfall_bytes =
      p->fits ? 0 : static_cast<int64_t>(p->kv_bytes_per_sequence) - p->free_bytes_for_kv;
}

}  // namespace

uint64_t default_reserve_bytes(uint64_t gpu_mem_bytes) {
  // What the engine needs besides weights and KV cache: the CUDA context and module images
  // (typically 0.3-0.6 GiB), cuBLAS/cuBLASLt workspaces, NCCL channel buffers (grow with the number
  // of peers), activation and logits buffers of the largest step (grow with batch tokens, which
  // bigger GPUs are given more of), and caching-allocator fragmentation. The fixed part dominates
  // on small cards, hence the 2 GiB floor; the batch-dependent part scales with the card, hence
  // 10% — the same headroom as vLLM's default gpu_memory_utilization of 0.9. --reserve overrides.
  return std::max<uint64_t>(2 * kGiB, gpu_mem_bytes / 10);
}

int int4_group(const ModelConfig& c) {
  if (c.quant.int4 == Int4Format::kNone) return kInt4LoadGroup;
  return c.quant.group_size > 0 ? c.quant.group_size : std::max(c.hidden_size, c.intermediate_size);
}

uint64_t shard_weight_bytes(const ModelConfig& c, const ShardPlan& s, int dtype_bytes,
                            int linear_bytes) {
  const uint64_t H = static_cast<uint64_t>(c.hidden_size);
  const uint64_t q = static_cast<uint64_t>(s.num_heads) * s.head_dim;      // local q/o width
  const uint64_t kv = static_cast<uint64_t>(s.num_kv_heads) * s.head_dim;  // local k/v width
  const uint64_t ffn = static_cast<uint64_t>(s.ffn_size);
  const uint64_t projections = q * H          // q_proj rows [q, H]
                               + 2 * kv * H   // k_proj, v_proj rows [kv, H]
                               + H * q        // o_proj columns [H, q]
                               + 2 * ffn * H  // gate_proj, up_proj rows [ffn, H]
                               + H * ffn;     // down_proj columns [H, ffn]
  if (linear_bytes == kInt4LinearBytes) {
    // [n out, k in] as q [n, k / 8] words and sz [groups, n] pairs of the compute dtype.
    const uint64_t G = static_cast<uint64_t>(int4_group(c));
    auto packed = [&](uint64_t n, uint64_t k) {
      return n * k / 2 + (k + G - 1) / G * n * 2 * static_cast<uint64_t>(dtype_bytes);
    };
    const uint64_t layer = packed(q, H) + 2 * packed(kv, H) + packed(H, q) + 2 * packed(ffn, H) +
                           packed(H, ffn) + 2 * H * static_cast<uint64_t>(dtype_bytes);
    const uint64_t vocab4 =
        static_cast<uint64_t>(s.vocab_size) * H * (c.tie_word_embeddings ? 1 : 2);
    return static_cast<uint64_t>(c.num_layers) * layer +
           (vocab4 + H) * static_cast<uint64_t>(dtype_bytes);
  }
  // Quantized projections: one fp32 scale per output row (q + 2 kv, H, 2 ffn, H rows).
  const uint64_t scales = q + 2 * kv + H + 2 * ffn + H;
  const uint64_t per_layer_bytes =
      linear_bytes == 0 ? (projections + 2 * H) * static_cast<uint64_t>(dtype_bytes)
                        : projections * static_cast<uint64_t>(linear_bytes) + scales * 4 +
                              2 * H * static_cast<uint64_t>(dtype_bytes);  // + the two RMSNorms
  // Embedding and LM head rows of this rank's vocab slice; a tied LM head is the same tensor.
  const uint64_t vocab = static_cast<uint64_t>(s.vocab_size) * H * (c.tie_word_embeddings ? 1 : 2);
  return static_cast<uint64_t>(c.num_layers) * per_layer_bytes +
         (vocab + H /* norm */) * static_cast<uint64_t>(dtype_bytes);
}

uint64_t max_shard_weight_bytes(const ModelConfig& c, int tp, int dtype_bytes, int linear_bytes) {
  // Rank 0 always gets split_range's extra rows today, but asking every rank keeps this right if
  // the split ever changes; tp <= num_heads for any valid degree, so the loop is short.
  uint64_t most = 0;
  for (int r = 0; r < tp; ++r) {
    most =
        std::max(most, shard_weight_bytes(c, make_shard_plan(c, tp, r), dtype_bytes, linear_bytes));
  }
  return most;
}

uint64_t kv_bytes_per_token(const ModelConfig& c, const ShardPlan& s, int kv_dtype_bytes) {
  return uint64_t{2} * static_cast<uint64_t>(c.num_layers) * static_cast<uint64_t>(s.num_kv_heads) *
         static_cast<uint64_t>(s.head_dim) * static_cast<uint64_t>(kv_dtype_bytes);
}

int64_t kv_blocks_that_fit(int64_t free_bytes, uint64_t block_bytes) {
  LLAMA2_CHECK(block_bytes > 0);
  if (free_bytes <= 0) return 0;
  return static_cast<int64_t>(static_cast<uint64_t>(free_bytes) / block_bytes);
}

CapacityPlan plan_capacity(const ModelConfig& c, const CapacityRequest& req) {
  if (req.tp < 1) {
    std::string valid;
    for (int d : valid_tp_degrees(c, kPlanMaxTp)) {
      valid += (valid.empty() ? "" : ", ") + std::to_string(d);
    }
    throw Error("--tp must be >= 1 (got " + std::to_string(req.tp) +
                "); valid degrees for this model: " + valid);
  }
  if (req.dtype_bytes != 2 && req.dtype_bytes != 4) {
    throw Error("--dtype must be fp16, bf16 (2 bytes) or fp32 (4 bytes) (got " +
                std::to_string(req.dtype_bytes) + " bytes)");
  }
  const int kv_bytes = req.kv_dtype_bytes == 0 ? req.dtype_bytes : req.kv_dtype_bytes;
  if (kv_bytes == 1 ? req.dtype_bytes != 2 : kv_bytes != req.dtype_bytes) {
    throw Error(
        "--kv-cache-dtype must be auto (same as --dtype) or fp8 / fp8_e4m3 (1 byte, "
        "fp16/bf16 weights only) (got " +
        std::to_string(kv_bytes) + "-byte KV elements with " + std::to_string(req.dtype_bytes) +
        "-byte weights)");
  }
  if (req.linear_bytes != 0 &&
      ((req.linear_bytes != 1 && req.linear_bytes != kInt4LinearBytes) || req.dtype_bytes != 2)) {
    throw Error(
        "--weight-dtype must be auto (same as --dtype), fp8 / int8 (1 byte) or int4 (fp16/bf16 "
        "models only) (got " +
        std::to_string(req.linear_bytes) + "-byte projections with " +
        std::to_string(req.dtype_bytes) + "-byte weights)");
  }
  if (req.block_size < 1 || req.block_size > kMaxKvBlockSize) {
    throw Error("--block-size must be in [1, " + std::to_string(kMaxKvBlockSize) + "] (got " +
                std::to_string(req.block_size) + ")");
  }
  if (req.gpu_mem_bytes == 0) throw Error("--gpu-mem must be > 0, e.g. 24GiB or 80GiB");
  check_bytes_flag(req.gpu_mem_bytes, "--gpu-mem");
  if (req.reserve_bytes) check_bytes_flag(*req.reserve_bytes, "--reserve");
  const int max_seq = req.max_seq_len.value_or(c.max_position_embeddings);
  if (max_seq < 1 || max_seq > c.max_position_embeddings) {
    throw Error("--max-seq-len must be in [1, " + std::to_string(c.max_position_embeddings) +
                "] (the model's max_position_embeddings; got " + std::to_string(max_seq) + ")");
  }

  CapacityPlan p;
  p.tp = req.tp;
  p.dtype_bytes = req.dtype_bytes;
  p.kv_dtype_bytes = kv_bytes;
  p.linear_bytes = req.linear_bytes;
  p.block_size = req.block_size;
  p.max_seq_len = max_seq;
  p.gpu_mem_bytes = req.gpu_mem_bytes;
  p.reserve_is_default = !req.reserve_bytes.has_value();
  p.reserve_bytes = req.reserve_bytes.value_or(default_reserve_bytes(req.gpu_mem_bytes));
  p.model_weight_bytes =
      shard_weight_bytes(c, make_shard_plan(c, 1, 0), p.dtype_bytes, p.linear_bytes);
  p.valid_tp_degrees = valid_tp_degrees(c, kPlanMaxTp);
  // Degrees 1..8 cover one node; the requested degree is added so its reason is always listed.
  std::vector<int> explain = {1, 2, 3, 4, 5, 6, 7, 8};
  if (req.tp > 8) explain.push_back(req.tp);
  for (int t : explain) {
    if (std::string why = tp_invalid_reason(c, t); !why.empty()) p.invalid_tp.push_back({t, why});
  }
  p.tp_invalid_reason = tp_invalid_reason(c, req.tp);
  p.tp_valid = p.tp_invalid_reason.empty();
  if (p.tp_valid) fill_per_gpu(c, &p);

  for (int t : p.valid_tp_degrees) {
    CapacityPlan trial = p;
    trial.tp = t;
    fill_per_gpu(c, &trial);
    if (trial.fits) {
      p.smallest_fitting_tp = t;
      break;
    }
  }
  return p;
}

ModelConfig preset_config(const std::string& name) {
  // Shapes from the official meta-llama/Llama-2-{7b,13b,70b}-hf and
  // codellama/CodeLlama-{7b,13b,34b}-hf config.json files.
  ModelConfig c;
  c.vocab_size = 32000;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.torch_dtype = "float16";
  const bool code = name.rfind("codellama-", 0) == 0;
  const std::string size = code ? name.substr(10) : name;
  if (code) {
    // CodeLlama: rope_theta 1e6 and a 16384-token context; 7B and 13B add 16 infilling tokens
    // to the vocabulary (32016), 34B does not.
    c.rope_theta = 1000000.0;
    c.max_position_embeddings = 16384;
    c.vocab_size = size == "34b" ? 32000 : 32016;
    c.torch_dtype = "bfloat16";
  }
  if (size == "7b") {
    c.hidden_size = 4096, c.intermediate_size = 11008, c.num_layers = 32;
    c.num_heads = 32, c.num_kv_heads = 32;
  } else if (size == "13b") {
    c.hidden_size = 5120, c.intermediate_size = 13824, c.num_layers = 40;
    c.num_heads = 40, c.num_kv_heads = 40;
  } else if (size == "70b" && !code) {
    c.hidden_size = 8192, c.intermediate_size = 28672, c.num_layers = 80;
    c.num_heads = 64, c.num_kv_heads = 8;
  } else if (size == "34b" && code) {
    c.hidden_size = 8192, c.intermediate_size = 22016, c.num_layers = 48;
    c.num_heads = 64, c.num_kv_heads = 8;  // grouped-query attention, 8 KV heads
  } else {
    throw Error("unknown preset '" + name +
                "' (allowed: 7b, 13b, 70b, codellama-7b, codellama-13b, codellama-34b)");
  }
  return c;
}

int dtype_bytes_of(const std::string& name) {
  // The HF torch_dtype spellings are accepted too so a config's torch_dtype can be passed as is.
  if (name == "fp16" || name == "bf16" || name == "float16" || name == "bfloat16") return 2;
  if (name == "fp32" || name == "float32") return 4;
  throw Error("--dtype: unknown dtype '" + name + "' (allowed: fp16, bf16, fp32)");
}

int kv_dtype_bytes_of(const std::string& name, int weight_dtype_bytes) {
  if (name == "auto") return weight_dtype_bytes;
  if (name == "fp8" || name == "fp8_e4m3") {
    if (weight_dtype_bytes != 2) {
      throw Error("--kv-cache-dtype: fp8 KV cache needs fp16 or bf16 weights (got " +
                  std::to_string(weight_dtype_bytes) + "-byte weights); use auto");
    }
    return 1;
  }
  throw Error("--kv-cache-dtype: unknown KV-cache dtype '" + name +
              "' (allowed: auto, fp8, fp8_e4m3)");
}

uint64_t parse_bytes(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Error("'" + text + "' is not a size" + (why.empty() ? "" : " (" + why + ")") +
                 ": give a number with an optional suffix B, KiB, MiB, GiB, TiB (binary) or kB, "
                 "MB, GB, TB (decimal), e.g. 24GiB, 141GB, 1.5TiB, 4096");
  };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  size_t i = 0;
  uint64_t whole = 0;
  const size_t digits_begin = i;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (whole > (kMax - digit) / 10) throw bad("too large");
    whole = whole * 10 + digit;
  }
  if (i == digits_begin) throw bad("");
  std::string frac;
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      frac += text[i];
    }
    if (frac.empty()) throw bad("");
  }
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  // Six places are plenty for memory sizes and keep frac * 2^40 below 2^64.
  if (frac.size() > 6) throw bad("at most 6 decimal places");

  std::string suffix = text.substr(i);
  for (char& ch : suffix) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  struct Unit {
    const char* name;
    uint64_t mult;
  };
  static const Unit kUnits[] = {{"", 1},
                                {"b", 1},
                                {"kib", kKiB},
                                {"mib", kMiB},
                                {"gib", kGiB},
                                {"tib", kTiB},
                                {"kb", 1000},
                                {"mb", 1000 * 1000},
                                {"gb", 1000000000ULL},
                                {"tb", 1000000000000ULL}};
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (suffix == u.name) unit = &u;
  }
  if (!unit) throw bad("unknown suffix '" + text.substr(i) + "'");
  // "1.5" or "1.5B" would be a fraction of a byte: most likely a typo for a missing suffix.
  if (unit->mult == 1 && !frac.empty()) throw bad("a byte count must be whole");

  if (whole > kMax / unit->mult) throw bad("too large");
  uint64_t bytes = whole * unit->mult;
  if (!frac.empty()) {
    uint64_t scale = 1;
    for (size_t k = 0; k < frac.size(); ++k) scale *= 10;
    const uint64_t part = std::stoull(frac) * unit->mult / scale;  // fractions of a byte dropped
    if (bytes > kMax - part) throw bad("too large");
    bytes += part;
  }
  return bytes;
}

std::string format_bytes(int64_t bytes) {
  const uint64_t mag = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  const char* sign = bytes < 0 ? "-" : "";
  char buf[64];
  if (mag < kKiB) {
    std::snprintf(buf, sizeof buf, "%s%llu B", sign, static_cast<unsigned long long>(mag));
    return buf;
  }
  static const std::pair<uint64_t, const char*> kUnits[] = {
      {kTiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  size_t u = 0;
  while (mag < kUnits[u].first) ++u;  // stops at KiB at the latest: mag >= kKiB here
  std::snprintf(buf, sizeof buf, "%s%.2f %s", sign,
                static_cast<double>(mag) / static_cast<double>(kUnits[u].first), kUnits[u].second);
  return buf;
}

}  // namespace llama2
