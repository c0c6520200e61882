// FP8 checkpoints (issue 20): the e4m3 codec against a brute-force nearest-value search, the
// quantization_config parser's accepted and refused schemes, and the tensor checks and shard reads
// of rank/fp8_checkpoint.h on small files written here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/checkpoint_quant.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/engine.h"
#include "rank/fp8_checkpoint.h"
#include "rank/weight_layout.h"
#include "rank/weight_store.h"
#include "test_util.h"
#include "tools/safetensors_writer.h"

namespace {

using llama2::test::contains;
using llama2::test::error_of;

using llama2::DType;
using llama2::Error;
using llama2::TensorToWrite;
using llama2::WeightStore;
using nlohmann::json;

// The e4m3 code nearest to x (ties to the even code), saturating at +-448: the definition the
// encoder must meet, by search over every finite code.
uint8_t nearest_e4m3(float x) {
  const float a = std::min(std::fabs(x), 448.f);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double d =
        std::fabs(static_cast<double>(llama2::e4m3_to_f32(static_cast<uint8_t>(c))) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

}  // namespace

TEST_SUITE("fp8_checkpoint") {
  TEST_CASE("e4m3: every finite code round-trips; NaN codes; known values") {
    for (int c = 0; c < 256; ++c) {
      const float v = llama2::e4m3_to_f32(static_cast<uint8_t>(c));
      if ((c & 0x7f) == 0x7f) {
        CHECK(std::isnan(v));
        continue;
      }
      CHECK(llama2::f32_to_e4m3(v) == c);
    }
    CHECK(llama2::e4m3_to_f32(0x7e) == 448.f);
    CHECK(llama2::e4m3_to_f32(0x01) == std::ldexp(1.f, -9));  // smallest subnormal
    CHECK(llama2::e4m3_to_f32(0x38) == 1.f);
    CHECK(llama2::f32_to_e4m3(1000.f) == 0x7e);  // saturating, not NaN
    CHECK(llama2::f32_to_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
    CHECK(llama2::f32_to_e4m3(std::nanf("")) == 0x7f);
    CHECK(llama2::f32_to_e4m3(1.0625f) == 0x38);  // halfway 1 | 1.125: to the even mantissa
    CHECK(llama2::f32_to_e4m3(1.1875f) == 0x3a);  // halfway 1.125 | 1.25: to the even one
    CHECK(llama2::f32_to_e4m3(248.f) == 0x78);    // halfway 240 | 256: carries into 2^8
    CHECK(llama2::f32_to_e4m3(std::ldexp(1.f, -10)) == 0x00);  // half the smallest subnormal
  }

  TEST_CASE("e4m3: the encoder is round-to-nearest-even, saturating (random values)") {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> exp(-14.f, 10.f);
    int mismatches = 0;
    for (int i = 0; i < 20000; ++i) {
      const float x = (i & 1 ? -1.f : 1.f) * std::exp2(exp(gen));
      if (llama2::f32_to_e4m3(x) != nearest_e4m3(x) && ++mismatches < 5) {
        MESSAGE("x = " << x << ": got " << int(llama2::f32_to_e4m3(x)) << ", want "
                       << int(nearest_e4m3(x)));
      }
    }
    CHECK(mismatches == 0);
  }

  TEST_CASE("quantization_config: the published FP8 schemes are accepted") {
    auto parse = [](const json& q) {
      return llama2::parse_checkpoint_quant(json{{"quantization_config", q}}, "config.json");
    };
    CHECK_FALSE(llama2::parse_checkpoint_quant(json::object(), "c").fp8);
    CHECK_FALSE(parse(nullptr).fp8);
    auto q = parse({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}});
    CHECK(q.fp8);
    CHECK_FALSE(q.static_activations);
    q = parse(
        {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", nullptr}});
    CHECK(q.static_activations);
    CHECK(q.describe() == "fp8 e4m3 (fp8, static activation scales)");
    const json weights = {{"num_bits", 8},     {"type", "float"},  {"strategy", "channel"},
                          {"symmetric", true}, {"dynamic", false}, {"group_size", nullptr}};
    const json dynamic = {
        {"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};
    json ct = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"quantization_status", "compressed"},
        {"kv_cache_scheme", nullptr},
        {"ignore", {"lm_head"}},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", dynamic}}}}}};
    q = parse(ct);
    CHECK(q.fp8);
    CHECK(q.method == "compressed-tensors");
    CHECK_FALSE(q.static_activations);
    ct["config_groups"]["group_0"]["input_activations"] = nullptr;  // weight-only (W8A16)
    CHECK(parse(ct).fp8);
    q = parse({{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}});
    CHECK(q.fp8);
    CHECK(q.describe() == "fp8 e4m3 (fbgemm_fp8)");
  }

  TEST_CASE("quantization_config: other schemes are refused naming the field") {
    auto error = [](const json& q) {
      return error_of([&] {
        llama2::parse_checkpoint_quant(json{{"quantization_config", q}}, "M/config.json");
      });
    };
    std::string e = error({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}});
    CHECK(contains(
        e, "M/config.json: quantization_config.weight_block_size [128,128] is not supported"));
    CHECK(contains(e, "per-tensor or per-channel"));
    CHECK(contains(error({{"quant_method", "bitsandbytes"}, {"bits", 4}}),
                   "quantization_config.quant_method \"bitsandbytes\" is not supported (allowed: "
                   "\"fp8\", \"compressed-tensors\" with fp8 weights, \"fbgemm_fp8\", \"awq\", "
                   "\"gptq\""));
    CHECK(contains(error({{"quant_method", "fp8"}, {"activation_scheme", "smooth"}}),
                   "activation_scheme \"smooth\""));
    CHECK(contains(error({{"quant_method", "fp8"}, {"fmt", "e5m2"}}), "fmt \"e5m2\""));
    const json w = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
    auto ct = [&](const json& weights, const json& inputs) {
      return json{
          {"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups", {{"g", {{"weights", weights}, {"input_activations", inputs}}}}}};
    };
    json packed = ct(w, nullptr);
    packed["format"] = "pack-quantized";
    CHECK(contains(error(packed), "format \"pack-quantized\""));
    json int8 = w;
    int8["type"] = "int";
    CHECK(contains(error(ct(int8, nullptr)), "config_groups.g.weights.type \"int\""));
    json group = w;
    group["strategy"] = "group";
    CHECK(contains(error(ct(group, nullptr)), "weights.strategy \"group\""));
    json block = w;
    block["block_structure"] = {128, 128};
    CHECK(contains(error(ct(block, nullptr)), "weights.block_structure [128,128]"));
    CHECK(contains(
        error(
            ct(w, {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", false}})),
        "input_activations.dynamic false"));
    json kv = ct(w, nullptr);
    kv["kv_cache_scheme"] = {{"num_bits", 8}};
    CHECK(contains(error(kv), "kv_cache_scheme"));
  }
}

namespace {

// A one-layer model [H 8, F 16, 2 heads, vocab 16] written to `dir`: 16-bit tensors in F16, the
// projections as F8_E4M3 with per-channel scales 0.5 + row/8 when `fp8`; `edit` changes the list
// before it is written.
llama2::ModelConfig tiny_config(bool fp8) {
  json j = {{"hidden_size", 8},         {"intermediate_size", 16}, {"num_hidden_layers", 1},
            {"num_attention_heads", 2}, {"vocab_size", 16},        {"max_position_embeddings", 32}};
  if (fp8) j["quantization_config"] = {{"quant_method", "fp8"}};
  return llama2::parse_model_config(j, "tiny");
}

std::vector<TensorToWrite> tiny_tensors(const llama2::ModelConfig& c, bool fp8) {
  std::vector<TensorToWrite> out;
  for (const llama2::TensorSlice& t : llama2::all_full_tensors(c)) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = llama2::e4m3_to_f32(static_cast<uint8_t>(i % 0x70));
    const bool projection = t.name.find("_proj.weight") != std::string::npos;
    out.push_back({t.name, projection && fp8 ? DType::F8_E4M3 : DType::F16, t.full_shape, v});
    if (projection && fp8) {
      std::vector<float> s(static_cast<size_t>(t.full_shape[0]));
      for (size_t r = 0; r < s.size(); ++r) s[r] = 0.5f + static_cast<float>(r) / 8;
      out.push_back({llama2::weight_scale_name(t.name), DType::F32, {t.full_shape[0], 1}, s});
    }
  }
  return out;
}

TensorToWrite* find(std::vector<TensorToWrite>* ts, const std::string& name) {
  for (TensorToWrite& t : *ts) {
    if (t.name == name) return &t;
  }
  FAIL("no tensor " << name);
  return nullptr;
}

// The error validate_fp8_checkpoint gives for the tensors after `edit` ("<no error>" if none).
std::string validate_error(bool fp8_config, bool fp8_tensors,
                           const std::function<void(std::vector<TensorToWrite>*)>& edit) {
  const llama2::test::TempDir dir;
  const llama2::ModelConfig c = tiny_config(fp8_config);
  std::vector<TensorToWrite> ts = tiny_tensors(c, fp8_tensors);
  edit(&ts);
  llama2::write_safetensors(dir.file("model.safetensors"), ts);
  const WeightStore w = WeightStore::open(dir.path);
  return error_of([&] { llama2::validate_fp8_checkpoint(w, c); });
}

}  // namespace

TEST_SUITE("fp8_checkpoint") {
  TEST_CASE("validate: a well-formed FP8 checkpoint; input scales are counted") {
    const std::string q = "model.layers.0.self_attn.q_proj.";
    CHECK(validate_error(true, true, [](auto*) {}) == "<no error>");
    CHECK(validate_error(false, false, [](auto*) {}) == "<no error>");
    const llama2::test::TempDir dir;
    const llama2::ModelConfig c = tiny_config(true);
    std::vector<TensorToWrite> ts = tiny_tensors(c, true);
    ts.push_back({q + "input_scale", DType::F32, {}, {0.1f}});
    ts.push_back({"model.layers.0.mlp.up_proj.input_scale", DType::BF16, {1}, {0.1f}});
    find(&ts, q + "weight_scale")->shape = {};  // per tensor
    find(&ts, q + "weight_scale")->values.resize(1);
    llama2::write_safetensors(dir.file("model.safetensors"), ts);
    CHECK(llama2::validate_fp8_checkpoint(WeightStore::open(dir.path), c) == 2);
  }

  TEST_CASE("validate: each defect named with what is allowed") {
    const std::string q = "model.layers.0.self_attn.q_proj.";
    std::string e = validate_error(true, true, [&](auto* ts) {
      ts->erase(
          std::remove_if(ts->begin(), ts->end(),
                         [&](const TensorToWrite& t) { return t.name == q + "weight_scale"; }),
          ts->end());
    });
    CHECK(contains(e, "tensor '" + q + "weight' is F8_E4M3 but its scale '" + q +
                          "weight_scale' is missing (allowed: a per-tensor [] or [1], or "
                          "per-channel [8] or [8, 1] weight_scale)"));
    e = validate_error(true, true, [&](auto* ts) { find(ts, q + "weight_scale")->shape = {2, 4}; });
    CHECK(contains(e, q + "weight_scale' has shape [2, 4]; allowed: [] or [1] (per tensor), [8] "
                          "or [8, 1] (per output channel)"));
    e = validate_error(true, true,
                       [&](auto* ts) { find(ts, q + "weight_scale")->dtype = DType::F8_E4M3; });
    CHECK(contains(e, "has dtype F8_E4M3; a scale must be F32, F16 or BF16"));
    e = validate_error(true, true, [&](auto* ts) {
      ts->push_back({q + "input_scale", DType::F32, {8}, std::vector<float>(8, 1.f)});
    });
    CHECK(contains(e, q + "input_scale' has shape [8]; allowed: [] or [1]"));
    // fp8 where the engine needs 16 bits, with or without quantization_config.
    e = validate_error(true, true,
                       [&](auto* ts) { find(ts, "model.norm.weight")->dtype = DType::F8_E4M3; });
    CHECK(contains(e,
                   "tensor 'model.norm.weight' is F8_E4M3; fp8 is allowed on the "
                   "q/k/v/o/gate/up/down projections (embeddings, norms and lm_head stay"));
    e = validate_error(false, false, [&](auto* ts) {
      find(ts, "model.embed_tokens.weight")->dtype = DType::F8_E4M3;
    });
    CHECK(contains(e, "fp8 is allowed on no tensor: config.json has no quantization_config"));
    e = validate_error(false, true, [](auto*) {});
    CHECK(contains(e, "is F8_E4M3 but config.json has no quantization_config"));
    // A quantization_config whose projections are 16-bit (or partly so).
    e = validate_error(true, false, [](auto*) {});
    CHECK(contains(e,
                   "has dtype F16, but config.json's fp8 e4m3 (fp8) quantization_config needs "
                   "every projection as F8_E4M3"));
  }

  TEST_CASE("shard reads: rows with their scales, columns with every row's scale") {
    const llama2::test::TempDir dir;
    const llama2::ModelConfig c = tiny_config(true);
    std::vector<TensorToWrite> ts = tiny_tensors(c, true);
    const std::string down = "model.layers.0.mlp.down_proj.weight";  // [8, 16], per tensor
    find(&ts, llama2::weight_scale_name(down))->shape = {1};
    find(&ts, llama2::weight_scale_name(down))->values = {0.25f};
    llama2::write_safetensors(dir.file("model.safetensors"), ts);
    const WeightStore w = WeightStore::open(dir.path);
    const std::vector<float> stored = find(&ts, "model.layers.0.mlp.up_proj.weight")->values;
    for (int rank = 0; rank < 2; ++rank) {
      const llama2::ShardPlan s = llama2::make_shard_plan(c, 2, rank);
      const llama2::TensorSlice up = llama2::layer_slice(c, s, 0, llama2::LayerTensor::kWup);
      CHECK(llama2::is_fp8_slice(w, up));
      std::vector<float> got(static_cast<size_t>(up.numel()));
      const uint64_t before = w.bytes_copied();
      llama2::read_slice_f32(w, up, got.data());
      // Only the shard's bytes: one e4m3 byte per weight and its rows' fp32 scales.
      CHECK(w.bytes_copied() - before ==
            static_cast<uint64_t>(up.numel() + 4 * (up.row_end - up.row_begin)));
      for (int64_t r = up.row_begin; r < up.row_end; ++r) {
        for (int64_t k = 0; k < 8; ++k) {
          CHECK(got[(r - up.row_begin) * 8 + k] == (0.5f + r / 8.f) * stored[r * 8 + k]);
        }
      }
      const llama2::TensorSlice dn = llama2::layer_slice(c, s, 0, llama2::LayerTensor::kWdown);
      CHECK(llama2::fp8_row_scales(w, dn) == std::vector<float>(8, 0.25f));
      const llama2::TensorSlice norm = llama2::layer_slice(c, s, 0, llama2::LayerTensor::kAttnNorm);
      CHECK_FALSE(llama2::is_fp8_slice(w, norm));
    }
  }

  TEST_CASE("shard reads: a negative or non-finite scale is refused") {
    const llama2::test::TempDir dir;
    const llama2::ModelConfig c = tiny_config(true);
    std::vector<TensorToWrite> ts = tiny_tensors(c, true);
    const std::string k = "model.layers.0.self_attn.k_proj.weight";
    find(&ts, llama2::weight_scale_name(k))->values[3] = -1.f;
    llama2::write_safetensors(dir.file("model.safetensors"), ts);
    const WeightStore w = WeightStore::open(dir.path);
    const llama2::TensorSlice t =
        llama2::layer_slice(c, llama2::make_shard_plan(c, 1, 0), 0, llama2::LayerTensor::kWk);
    CHECK(contains(error_of([&] { llama2::fp8_row_scales(w, t); }),
                   "k_proj.weight_scale' row 3 holds -1.000000; a weight scale must be finite "
                   "and >= 0"));
  }

  TEST_CASE("--weight-dtype on an FP8 checkpoint: stored, dequantized or requantized") {
    using llama2::Backend;
    using llama2::ComputeDType;
    using llama2::WeightDType;
    llama2::CheckpointQuant fp8;
    fp8.fp8 = true;
    fp8.method = "fp8";
    llama2::EngineConfig cfg;  // auto: the stored e4m3 where the fp8 path runs, else dequantized
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, fp8) ==
          WeightDType::kFp8);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kBf16, fp8) ==
          WeightDType::kFp8);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp32, fp8) ==
          WeightDType::kAuto);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCpu, ComputeDType::kFp32, fp8) ==
          WeightDType::kAuto);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16) ==
          WeightDType::kAuto);                     // a 16-bit checkpoint: unchanged
    cfg.weight_dtype_named = ComputeDType::kBf16;  // --weight-dtype bf16: dequantize on load
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kBf16, fp8) ==
          WeightDType::kAuto);
    cfg.weight_dtype_named = ComputeDType::kAuto;
    cfg.weight_dtype = WeightDType::kInt8;  // dequantize, then quantize to int8
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, fp8) ==
          WeightDType::kInt8);
    cfg.weight_dtype = WeightDType::kFp8;
    CHECK_THROWS_WITH_AS(llama2::choose_weight_dtype(cfg, Backend::kCpu, ComputeDType::kFp32, fp8),
                         doctest::Contains("--weight-dtype fp8_e4m3 needs the cuda backend"),
                         llama2::Error);
  }
}
