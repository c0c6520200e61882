// 4-bit AWQ / GPTQ checkpoints (common/checkpoint_quant.h, common/shard_plan.h,
// rank/int4_checkpoint.h): the config blocks and their refusals, the shard rules (whole groups per
// rank, 7B at TP 4), and dequantization of modules packed here by hand from the formats'
// descriptions (AWQ's interleaved columns, GPTQ's packed rows, v1's zero - 1, act-order g_idx)
// against (q - zero) * scale computed directly, whole and in shard blocks.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/int4_checkpoint.h"
#include "rank/safetensors.h"
#include "rank/weight_store.h"
#include "test_util.h"
#include "tools/safetensors_writer.h"

namespace {

using llama2::CheckpointQuant;
using llama2::DType;
using llama2::Int4Format;
using llama2::ModelConfig;
using llama2::test::contains;
using llama2::test::error_of;
using nlohmann::json;

CheckpointQuant quant(const json& q) {
  return llama2::parse_checkpoint_quant(json{{"quantization_config", q}}, "c.json");
}

// A module W [out 8, in 16] in groups of 8 input rows: q(i, o) = (i + 3o) % 16,
// zero(g, o) = (5g + o) % 16 (as stored, before v1's + 1), scale(g, o) = 0.5 + 0.25 o + g.
constexpr int kOut = 8, kIn = 16, kGroup = 8;
int q_of(int i, int o) {
  return (i + 3 * o) % 16;
}
int z_of(int g, int o) {
  return (5 * g + o) % 16;
}
float s_of(int g, int o) {
  return 0.5f + 0.25f * o + static_cast<float>(g);
}

// Packs `nib(k)` for k < 8 into one word, nibble k at bits 4k.
template <typename F>
int32_t word(F nib) {
  uint32_t w = 0;
  for (int k = 0; k < 8; ++k) w |= static_cast<uint32_t>(nib(k)) << (4 * k);
  return static_cast<int32_t>(w);
}

std::vector<llama2::TensorToWrite> module_tensors(bool awq, const std::vector<int>& group) {
  constexpr int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AWQ: nibble k is column order[k]
  const std::string m = "model.layers.0.self_attn.q_proj";
  std::vector<int32_t> qweight, qzeros;
  if (awq) {  // [in, out/8]
    for (int i = 0; i < kIn; ++i) qweight.push_back(word([&](int k) { return q_of(i, order[k]); }));
  } else {  // [in/8, out]
    for (int r = 0; r < kIn / 8; ++r) {
      for (int o = 0; o < kOut; ++o)
        qweight.push_back(word([&](int k) { return q_of(8 * r + k, o); }));
    }
  }
  std::vector<float> scales;
  for (int g = 0; g < kIn / kGroup; ++g) {
    qzeros.push_back(word([&](int k) { return z_of(g, awq ? order[k] : k); }));
    for (int o = 0; o < kOut; ++o) scales.push_back(s_of(g, o));
  }
  std::vector<llama2::TensorToWrite> t;
  t.emplace_back(m + ".qweight", DType::I32,
                 awq ? std::vector<int64_t>{kIn, kOut / 8} : std::vector<int64_t>{kIn / 8, kOut},
                 std::vector<float>{}, qweight);
  t.emplace_back(m + ".qzeros", DType::I32, std::vector<int64_t>{kIn / kGroup, kOut / 8},
                 std::vector<float>{}, qzeros);
  t.emplace_back(m + ".scales", DType::F16, std::vector<int64_t>{kIn / kGroup, kOut}, scales);
  if (!awq) {
    t.emplace_back(m + ".g_idx", DType::I32, std::vector<int64_t>{kIn}, std::vector<float>{},
                   std::vector<int32_t>(group.begin(), group.end()));
  }
  return t;
}

// Reads the block [o0, o1) x [i0, i1) of the module and compares it with the formula.
void check_block(const llama2::WeightStore& w, const ModelConfig& c, const std::vector<int>& group,
                 int o0, int o1, int i0, int i1) {
  llama2::TensorSlice s{"model.layers.0.self_attn.q_proj.weight", {kOut, kIn}, o0, o1, i0, i1};
  std::vector<float> got(static_cast<size_t>(s.numel()));
  llama2::read_int4_slice_f32(w, c, s, got.data());
  const int extra = c.quant.int4 == Int4Format::kGptq && !c.quant.gptq_v2 ? 1 : 0;
  int differ = 0;
  for (int o = o0; o < o1; ++o) {
    for (int i = i0; i < i1; ++i) {
      const int g = group[i];
      const float want = static_cast<float>(q_of(i, o) - (z_of(g, o) + extra)) * s_of(g, o);
      differ += got[(o - o0) * (i1 - i0) + (i - i0)] != want;
    }
  }
  CHECK(differ == 0);
}

// Reads the block [0, kOut) x [i0, i1) (whole groups) in the CUDA kernels' layout and compares
// every nibble, scale and zero point with the formula.
void check_w4_block(const llama2::WeightStore& w, const ModelConfig& c, int i0, int i1) {
  llama2::TensorSlice s{"model.layers.0.self_attn.q_proj.weight", {kOut, kIn}, 0, kOut, i0, i1};
  const int64_t groups = llama2::int4_slice_groups(c, s);
  CHECK(groups == (i1 - i0) / kGroup);
  std::vector<uint32_t> q(static_cast<size_t>(kOut * (i1 - i0) / 8));
  std::vector<float> scale(static_cast<size_t>(groups * kOut));
  std::vector<int32_t> zero(scale.size());
  llama2::read_int4_slice_w4(w, c, s, q.data(), scale.data(), zero.data());
  const int extra = c.quant.int4 == Int4Format::kGptq && !c.quant.gptq_v2 ? 1 : 0;
  constexpr int nibble_of[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // kernels/w4_convert.cuh's order
  int differ = 0;
  for (int o = 0; o < kOut; ++o) {
    for (int i = i0; i < i1; ++i) {
      const uint32_t word = q[o * (i1 - i0) / 8 + (i - i0) / 8];
      differ += static_cast<int>((word >> (4 * nibble_of[(i - i0) % 8])) & 0xfu) != q_of(i, o);
    }
    for (int g = 0; g < groups; ++g) {
      const int gg = i0 / kGroup + g;
      differ += zero[g * kOut + o] != z_of(gg, o) + extra;
      differ += scale[g * kOut + o] != s_of(gg, o);
    }
  }
  CHECK(differ == 0);
}

}  // namespace

TEST_SUITE("int4_checkpoint") {
  TEST_CASE("config blocks: AWQ, GPTQ, quantize_config.json, refusals") {
    const CheckpointQuant awq = quant({{"quant_method", "awq"},
                                       {"bits", 4},
                                       {"group_size", 128},
                                       {"version", "gemm"},
                                       {"zero_point", true},
                                       {"modules_to_not_convert", json::array({"lm_head"})}});
    CHECK(awq.int4 == Int4Format::kAwq);
    CHECK(awq.group_size == 128);
    CHECK(awq.describe() == "4-bit AWQ (group 128)");
    const CheckpointQuant gptq = quant({{"quant_method", "gptq"},
                                        {"bits", 4},
                                        {"group_size", 64},
                                        {"desc_act", true},
                                        {"sym", false},
                                        {"checkpoint_format", "gptq_v2"}});
    CHECK(gptq.int4 == Int4Format::kGptq);
    CHECK(gptq.desc_act);
    CHECK(gptq.gptq_v2);
    CHECK_FALSE(gptq.int4_contiguous_groups());
    CHECK(gptq.describe() == "4-bit GPTQ (group 64, asym, desc_act, gptq_v2)");
    // AutoGPTQ's quantize_config.json names no method.
    const CheckpointQuant qc = llama2::parse_quantize_config(
        {{"bits", 4}, {"group_size", -1}, {"sym", true}, {"desc_act", false}}, "q.json");
    CHECK(qc.int4 == Int4Format::kGptq);
    CHECK(qc.group_size == -1);
    CHECK_FALSE(qc.gptq_v2);
    const std::pair<json, std::string> bad[] = {
        {{{"quant_method", "awq"}, {"bits", 8}}, "quantization_config.bits 8"},
        {{{"quant_method", "awq"}, {"zero_point", false}}, "quantization_config.zero_point false"},
        {{{"quant_method", "awq"}, {"version", "marlin"}},
         "quantization_config.version \"marlin\""},
        {{{"quant_method", "gptq"}, {"group_size", 100}}, "quantization_config.group_size 100"},
        {{{"quant_method", "awq"}, {"group_size", -1}}, "positive multiple of 8 for AWQ"},
        {{{"quant_method", "gptq"}, {"checkpoint_format", "marlin"}}, "checkpoint_format"},
        {{{"quant_method", "gptq"}, {"modules_to_not_convert", json::array({"q_proj"})}},
         "every projection must be 4-bit"},
        {{{"quant_method", "bitsandbytes"}}, "\"awq\", \"gptq\""},
    };
    for (const auto& c : bad) {
      CAPTURE(c.first.dump());
      const std::string msg = error_of([&] { quant(c.first); });
      CHECK(contains(msg, "c.json: "));
      CHECK(contains(msg, c.second));
    }
    llama2::test::TempDir dir;
    json cfg = llama2::model_config_to_json(llama2::preset_config("7b"));
    dir.write("config.json", cfg.dump());
    dir.write("quantize_config.json", R"({"bits": 4, "group_size": 128, "desc_act": false})");
    CHECK(llama2::load_model_config(dir.path).quant.int4 == Int4Format::kGptq);
  }

  TEST_CASE("shards cut on group boundaries; degrees that would cut a group are refused") {
    ModelConfig c = llama2::preset_config("7b");
    c.quant = quant({{"quant_method", "awq"}, {"group_size", 128}});
    // down_proj's 11008 columns are 86 groups of 128: at TP 4, 22, 22, 21 and 21 groups.
    const int want[4][2] = {{0, 2816}, {2816, 2816}, {5632, 2688}, {8320, 2688}};
    for (int r = 0; r < 4; ++r) {
      const llama2::ShardPlan s = llama2::make_shard_plan(c, 4, r);
      CHECK(s.ffn_begin == want[r][0]);
      CHECK(s.ffn_size == want[r][1]);
    }
    CHECK(llama2::valid_tp_degrees(c, 64) == std::vector<int>{1, 2, 4, 8, 16, 32});
    c.quant.group_size = 256;  // 32 ranks would hold 128 of o_proj's columns: half a group
    CHECK(contains(llama2::tp_invalid_reason(c, 32),
                   "each rank's 128 input columns of o_proj would cut its 4-bit groups of 256"));
    c.quant = quant({{"quant_method", "gptq"}, {"group_size", 128}, {"desc_act", true}});
    CHECK(llama2::int4_split_unit(c) == 8);  // act order: rows find their groups by g_idx
    CHECK(llama2::tp_invalid_reason(c, 32).empty());
    c.quant = CheckpointQuant{};
    CHECK(llama2::make_shard_plan(c, 4, 0).ffn_size == 2752);  // 16-bit: an even split
  }

  TEST_CASE("AWQ and GPTQ modules packed by hand dequantize to (q - zero) * scale") {
    ModelConfig c;
    c.hidden_size = kIn;
    const std::vector<int> sequential = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    const std::vector<int> act_order = {1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1};
    struct Case {
      const char* name;
      json q;
      const std::vector<int>* group;
    } cases[] = {
        {"awq", {{"quant_method", "awq"}, {"group_size", kGroup}}, &sequential},
        {"gptq v1", {{"quant_method", "gptq"}, {"group_size", kGroup}}, &sequential},
        {"gptq v2 act order",
         {{"quant_method", "gptq"},
          {"group_size", kGroup},
          {"desc_act", true},
          {"checkpoint_format", "gptq_v2"}},
         &act_order},
    };
    for (const Case& k : cases) {
      CAPTURE(k.name);
      c.quant = quant(k.q);
      llama2::test::TempDir dir;
      const std::string path = dir.file("m.safetensors");
      llama2::write_safetensors(path, module_tensors(c.quant.int4 == Int4Format::kAwq, *k.group));
      std::vector<std::unique_ptr<llama2::TensorFile>> files;
      files.push_back(std::make_unique<llama2::SafetensorsFile>(path));
      std::map<std::string, llama2::StoredTensor> tensors;
      for (const std::string& n : files[0]->names()) tensors[n].pieces = {files[0]->find(n)};
      const llama2::WeightStore w =
          llama2::WeightStore::from_pieces(dir.path, {"m"}, std::move(files), std::move(tensors));
      check_block(w, c, *k.group, 0, kOut, 0, kIn);  // whole
      check_block(w, c, *k.group, 0, kOut, 8, 16);   // a row-parallel shard: the second group
      check_block(w, c, *k.group, 0, kOut, 3, 11);   // rows crossing groups (act order's case)
      if (c.quant.int4_runs_packed() || c.quant.int4_contiguous_groups()) {
        check_w4_block(w, c, 0, kIn);  // the 4-bit kernels' layout, whole and one shard
        check_w4_block(w, c, 8, 16);
      } else {
        CHECK(contains(
            error_of([&] {
              std::vector<uint32_t> q(kOut * kIn / 8);
              std::vector<float> sc(2 * kOut);
              std::vector<int32_t> z(2 * kOut);
              llama2::read_int4_slice_w4(
                  w, c, {"model.layers.0.self_attn.q_proj.weight", {kOut, kIn}, 0, kOut, 0, kIn},
                  q.data(), sc.data(), z.data());
            }),
            "not whole contiguous groups"));
      }
      const std::string msg = error_of([&] {
        std::vector<float> out(4 * kIn);
        llama2::read_int4_slice_f32(
            w, c, {"model.layers.0.self_attn.q_proj.weight", {kOut, kIn}, 0, 4, 0, kIn},
            out.data());
      });
      CHECK(contains(msg, "would cut a packed int32 word"));
    }
  }
}
