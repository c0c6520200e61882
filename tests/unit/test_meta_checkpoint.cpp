// Meta's folder format (common/meta_params.h, rank/meta_checkpoint.h) and Hugging Face's
// pytorch_model*.bin, on the committed fixtures that tests/reference/make_meta_fixtures.py wrote
// with torch.save from tests/models/tiny-bf16 (checked there against a Meta-style forward and
// against transformers): every tensor slice any rank reads at TP 1, 2 and 4 equals, byte for byte,
// the same slice of the Hugging Face safetensors folder, and at TP = MP a rank reads only its own
// file (plus its embedding rows from the others).
#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/meta_params.h"
#include "common/model_config.h"
#include "common/sentencepiece_model.h"
#include "common/shard_plan.h"
#include "rank/meta_checkpoint.h"
#include "rank/weight_layout.h"
#include "test_util.h"

namespace {

using llama2::ModelConfig;
using llama2::ShardPlan;
using llama2::TensorSlice;
using llama2::WeightStore;
using llama2::test::contains;
using llama2::test::error_of;
using llama2::test::TempDir;
using nlohmann::json;

const std::string kModels = LLAMA2_SOURCE_DIR "/tests/models/";

// Every slice a rank of `s` loads.
std::vector<TensorSlice> rank_slices(const ModelConfig& c, const ShardPlan& s) {
  std::vector<TensorSlice> out{llama2::embedding_slice(c, s), llama2::final_norm_slice(c),
                               llama2::lm_head_slice(c, s)};
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < static_cast<int>(llama2::LayerTensor::kCount); ++i) {
      out.push_back(llama2::layer_slice(c, s, l, static_cast<llama2::LayerTensor>(i)));
    }
  }
  return out;
}

std::vector<uint8_t> raw(const WeightStore& w, const TensorSlice& t) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()) * 2);  // bf16
  w.read_block_raw(t.name, t.row_begin, t.row_end, t.col_begin, t.col_end, out.data());
  return out;
}

// For every rank of every TP degree: the slices of `dir` equal tiny-bf16's; with Meta's `meta_mp`
// files (> 0), which files each rank read.
void check_same_slices(const std::string& dir, int meta_mp) {
  const ModelConfig c = llama2::load_model_config(dir);
  const WeightStore hf = WeightStore::open(kModels + "tiny-bf16");
  for (int tp : {1, 2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      CAPTURE(dir);
      CAPTURE(tp);
      CAPTURE(rank);
      const ShardPlan s = llama2::make_shard_plan(c, tp, rank);
      const WeightStore w = llama2::open_checkpoint(dir, c, s);
      for (const TensorSlice& t : llama2::all_full_tensors(c)) w.expect_shape(t.name, t.full_shape);
      int differ = 0;
      for (const TensorSlice& t : rank_slices(c, s)) {
        CAPTURE(t.name);
        differ += raw(w, t) != raw(hf, t);
      }
      CHECK(differ == 0);
      if (meta_mp == 0) continue;
      // File k holds heads [k H/MP, (k+1) H/MP): the files this rank's heads live in are its own.
      const std::vector<uint64_t> bytes = w.bytes_copied_per_file();
      REQUIRE(static_cast<int>(bytes.size()) == meta_mp);
      const int heads_per_file = c.num_heads / meta_mp;
      const int first = s.head_begin / heads_per_file;
      const int last = (s.head_begin + s.num_heads - 1) / heads_per_file;
      const uint64_t embedding_part =
          static_cast<uint64_t>(s.vocab_size) * (c.hidden_size / meta_mp) * 2;
      for (int k = 0; k < meta_mp; ++k) {
        CAPTURE(k);
        if (k < first || k > last) {
          CHECK(bytes[k] == embedding_part);  // only its embedding rows' columns there
        } else {
          CHECK(bytes[k] > embedding_part);
        }
      }
    }
  }
}

}  // namespace

TEST_SUITE("meta_checkpoint") {
  TEST_CASE("Meta's intermediate size formula on the published models") {
    // params.json of Llama-2 7B, 13B, 70B and CodeLlama-34B; the sizes are those of the Hugging
    // Face config.json files published for them.
    CHECK(llama2::meta_intermediate_size(4096, 256, 0.0) == 11008);
    CHECK(llama2::meta_intermediate_size(5120, 256, 0.0) == 13824);
    CHECK(llama2::meta_intermediate_size(8192, 4096, 1.3) == 28672);
    CHECK(llama2::meta_intermediate_size(8192, 256, 1.0) == 22016);
  }

  TEST_CASE("params.json and tokenizer.model make the Hugging Face config") {
    const llama2::SentencePieceInfo sp =
        llama2::read_sentencepiece_info(kModels + "tiny-bf16/tokenizer.model");
    CHECK(sp.pieces == 512);  // Python SentencePiece's vocab_size() of this file
    CHECK(sp.bos_id == 1);
    CHECK(sp.eos_id == 2);
    const ModelConfig hf = llama2::load_model_config(kModels + "tiny-bf16");
    for (const char* dir : {"tiny-bf16-meta-mp1", "tiny-bf16-meta-mp2"}) {
      CAPTURE(dir);
      const ModelConfig c = llama2::load_model_config(kModels + dir);
      CHECK(c.layout == llama2::CheckpointLayout::kMeta);
      CHECK(c.hidden_size == hf.hidden_size);
      CHECK(c.intermediate_size == hf.intermediate_size);
      CHECK(c.num_layers == hf.num_layers);
      CHECK(c.num_heads == hf.num_heads);
      CHECK(c.num_kv_heads == hf.num_kv_heads);
      CHECK(c.vocab_size == hf.vocab_size);
      CHECK(c.rms_norm_eps == hf.rms_norm_eps);
      CHECK(c.rope_theta == hf.rope_theta);
      CHECK(c.max_position_embeddings == 4096);  // what HF's conversion script writes
    }
    const json seven_b = {{"dim", 4096},    {"multiple_of", 256}, {"n_heads", 32},
                          {"n_layers", 32}, {"norm_eps", 1e-5},   {"vocab_size", -1}};
    const ModelConfig c = llama2::parse_meta_params(seven_b, "p", {32000, 1, 2});
    CHECK(c.vocab_size == 32000);
    CHECK(c.intermediate_size == 11008);
    CHECK(c.num_kv_heads == 32);
    json code = seven_b;
    code["vocab_size"] = 32016;
    code["rope_theta"] = 1000000.0;
    const ModelConfig cl = llama2::parse_meta_params(code, "p", {32000, 1, 2});
    CHECK(cl.vocab_size == 32016);  // CodeLlama's params.json states its vocabulary
    CHECK(cl.rope_theta == 1000000.0);
    CHECK(cl.max_position_embeddings == 16384);
  }

  TEST_CASE("params.json defects name the file and key") {
    const json ok = {{"dim", 64}, {"n_heads", 4}, {"n_layers", 2}, {"vocab_size", -1}};
    auto error = [](json j) {
      return error_of([&] { llama2::parse_meta_params(j, "/m/params.json", {512, 1, 2}); });
    };
    json j = ok;
    j.erase("dim");
    CHECK(contains(error(j), "/m/params.json: missing required key \"dim\""));
    j = ok;
    j["n_heads"] = "4";
    CHECK(contains(error(j), "\"n_heads\" must be a positive integer"));
    j = ok;
    j["use_scaled_rope"] = true;
    CHECK(contains(error(j), "use_scaled_rope"));
    CHECK(contains(error(j), "llama3"));
    j = ok;
    j["n_kv_heads"] = 3;
    CHECK(contains(error(j), "num_attention_heads (4) must be a multiple of num_key_value_heads"));
  }

  TEST_CASE("Meta's shards give Hugging Face's tensors at every TP degree") {
    check_same_slices(kModels + "tiny-bf16-meta-mp1", 1);
    check_same_slices(kModels + "tiny-bf16-meta-mp2", 2);
  }

  TEST_CASE("pytorch_model.bin folders give the safetensors folder's tensors") {
    check_same_slices(kModels + "tiny-bf16-bin", 0);
    check_same_slices(kModels + "tiny-bf16-bin-sharded", 0);
    const WeightStore w = WeightStore::open(kModels + "tiny-bf16-bin-sharded");
    CHECK(w.files() == std::vector<std::string>{"pytorch_model-00001-of-00002.bin",
                                                "pytorch_model-00002-of-00002.bin"});
  }

  TEST_CASE("Meta folder defects name the file") {
    namespace fs = std::filesystem;
    TempDir dir;
    const std::string mp2 = kModels + "tiny-bf16-meta-mp2/";
    for (const char* f : {"params.json", "tokenizer.model"}) fs::copy(mp2 + f, dir.file(f));
    const ModelConfig c = llama2::load_model_config(dir.path);
    const ShardPlan s = llama2::make_shard_plan(c, 1, 0);
    auto error = [&] { return error_of([&] { llama2::open_checkpoint(dir.path, c, s); }); };
    CHECK(contains(error(), "no consolidated.NN.pth"));
    fs::copy(mp2 + "consolidated.01.pth", dir.file("consolidated.01.pth"));
    CHECK(contains(error(), "found consolidated.01.pth where consolidated.00.pth should be"));
    fs::copy(mp2 + "consolidated.00.pth", dir.file("consolidated.00.pth"));
    fs::copy(mp2 + "consolidated.00.pth", dir.file("consolidated.02.pth"));
    CHECK(contains(error(), "3 consolidated files"));
    fs::remove(dir.file("consolidated.02.pth"));
    // MP=1's file where MP=2's second shard belongs: every tensor is open, the sizes add up wrong.
    fs::remove(dir.file("consolidated.01.pth"));
    fs::copy(kModels + "tiny-bf16-meta-mp1/consolidated.00.pth", dir.file("consolidated.01.pth"));
    const WeightStore w = llama2::open_checkpoint(dir.path, c, s);
    const std::string msg = error_of([&] {
      for (const TensorSlice& t : llama2::all_full_tensors(c)) w.expect_shape(t.name, t.full_shape);
    });
    CHECK(contains(msg, dir.file("consolidated.00.pth")));
    CHECK(contains(msg, "has shape [512, 96], expected [512, 64]"));
    CHECK(contains(msg, "'tok_embeddings.weight'"));
  }
}
