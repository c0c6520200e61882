// config.json parsing and validation (src/common/model_config.{h,cpp}).
// Expected values are the literals written in the JSON below; every error case checks that the
// message names the offending key (and the source / file path), so a generic "bad config" fails.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/check.h"
#include "common/model_config.h"
#include "common/rope_frequencies.h"
#include "test_util.h"

using llama2::ModelConfig;
using nlohmann::json;

namespace {
using llama2::test::contains;

// The config.json of meta-llama/Llama-2-7b-hf, as published.
json llama2_7b_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": null,
    "tie_word_embeddings": false,
    "torch_dtype": "float16",
    "transformers_version": "4.31.0.dev0",
    "use_cache": true,
    "vocab_size": 32000
  })");
}

// Only the required keys, with odd values (hidden 120 = 6 heads x 20).
json minimal_json() {
  return json{{"hidden_size", 120},
              {"intermediate_size", 389},
              {"num_hidden_layers", 3},
              {"num_attention_heads", 6},
              {"vocab_size", 1001}};
}

const char* kSrc = "/models/x/config.json";

// The Error message of parse_model_config, or "" when it does not throw.
std::string parse_error(const json& j) {
  try {
    llama2::parse_model_config(j, kSrc);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

// The message must exist, start with the source, and name every key in `keys`.
void check_error_names(const json& j, std::initializer_list<const char*> keys) {
  const std::string msg = parse_error(j);
  CAPTURE(msg);
  REQUIRE_FALSE(msg.empty());
  CHECK(msg.rfind(kSrc, 0) == 0);
  for (const char* k : keys) {
    CAPTURE(k);
    CHECK(contains(msg, k));
  }
}

json with(json j, const char* key, json value) {
  j[key] = std::move(value);
  return j;
}

json without(json j, const char* key) {
  j.erase(key);
  return j;
}

using llama2::test::TempDir;

}  // namespace

TEST_SUITE("model_config") {
  TEST_CASE("Llama-2-7B config.json parses with every field") {
    const ModelConfig c = llama2::parse_model_config(llama2_7b_json(), kSrc);
    CHECK(c.hidden_size == 4096);
    CHECK(c.intermediate_size == 11008);
    CHECK(c.num_layers == 32);
    CHECK(c.num_heads == 32);
    CHECK(c.num_kv_heads == 32);
    CHECK(c.vocab_size == 32000);
    CHECK(c.rms_norm_eps == doctest::Approx(1e-5).epsilon(1e-12));
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.max_position_embeddings == 4096);
    CHECK(c.tie_word_embeddings == false);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_id == 2);
    CHECK(c.torch_dtype == "float16");
    CHECK(c.head_dim() == 128);
  }

  TEST_CASE("every field is read from the file, not from a default") {
    // All values differ from ModelConfig's defaults, so a field that is ignored shows up.
    json j = minimal_json();
    j["num_key_value_heads"] = 2;
    j["max_position_embeddings"] = 777;
    j["rms_norm_eps"] = 3e-6;
    j["rope_theta"] = 500000.0;
    j["tie_word_embeddings"] = true;
    j["bos_token_id"] = 5;
    j["eos_token_id"] = 1000;
    j["torch_dtype"] = "bfloat16";
    j["hidden_act"] = "silu";
    const ModelConfig c = llama2::parse_model_config(j, kSrc);
    CHECK(c.hidden_size == 120);
    CHECK(c.intermediate_size == 389);
    CHECK(c.num_layers == 3);
    CHECK(c.num_heads == 6);
    CHECK(c.num_kv_heads == 2);
    CHECK(c.vocab_size == 1001);
    CHECK(c.max_position_embeddings == 777);
    CHECK(c.rms_norm_eps == 3e-6);
    CHECK(c.rope_theta == 500000.0);
    CHECK(c.tie_word_embeddings == true);
    CHECK(c.bos_token_id == 5);
    CHECK(c.eos_token_id == 1000);
    CHECK(c.torch_dtype == "bfloat16");
    CHECK(c.head_dim() == 20);
  }

  TEST_CASE("defaults when optional keys are absent") {
    const ModelConfig c = llama2::parse_model_config(minimal_json(), kSrc);
    CHECK(c.num_kv_heads == 6);  // = num_attention_heads (MHA)
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.max_position_embeddings == 4096);
    CHECK(c.tie_word_embeddings == false);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_id == 2);
    CHECK(c.torch_dtype == "float32");
  }

  TEST_CASE("null optional keys behave like absent ones") {
    json j = minimal_json();
    for (const char* k : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "bos_token_id",
                          "eos_token_id", "tie_word_embeddings", "max_position_embeddings"}) {
      j[k] = nullptr;
    }
    const ModelConfig c = llama2::parse_model_config(j, kSrc);
    CHECK(c.num_kv_heads == 6);
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.rms_norm_eps == 1e-5);
    CHECK(c.bos_token_id == 1);
    CHECK(c.eos_token_id == 2);
    CHECK(c.max_position_embeddings == 4096);
    CHECK(c.tie_word_embeddings == false);
  }

  TEST_CASE("dtype is accepted when torch_dtype is absent; torch_dtype wins when both exist") {
    CHECK(llama2::parse_model_config(with(minimal_json(), "dtype", "float16"), kSrc).torch_dtype ==
          "float16");
    json j = with(minimal_json(), "dtype", "float16");
    j["torch_dtype"] = "bfloat16";
    CHECK(llama2::parse_model_config(j, kSrc).torch_dtype == "bfloat16");
  }

  TEST_CASE("rope_parameters.rope_theta form") {
    SUBCASE("nested only") {
      json j = with(minimal_json(), "rope_parameters",
                    json{{"rope_type", "default"}, {"rope_theta", 500000.0}});
      CHECK(llama2::parse_model_config(j, kSrc).rope_theta == 500000.0);
    }
    SUBCASE("nested wins over top level") {
      json j = with(minimal_json(), "rope_theta", 10000.0);
      j["rope_parameters"] = json{{"rope_theta", 1000000.0}};
      CHECK(llama2::parse_model_config(j, kSrc).rope_theta == 1000000.0);
    }
    SUBCASE("nested without rope_theta keeps the top-level value") {
      json j = with(minimal_json(), "rope_theta", 250000.0);
      j["rope_parameters"] = json{{"rope_type", "default"}};
      CHECK(llama2::parse_model_config(j, kSrc).rope_theta == 250000.0);
    }
    SUBCASE("nested wrong type names rope_parameters and rope_theta") {
      check_error_names(with(minimal_json(), "rope_parameters", json{{"rope_theta", "big"}}),
                        {"rope_parameters", "rope_theta"});
    }
    SUBCASE("nested non-positive theta") {
      check_error_names(with(minimal_json(), "rope_parameters", json{{"rope_theta", 0.0}}),
                        {"rope_theta"});
    }
  }

  TEST_CASE("bos/eos as a list use the first id") {
    json j = with(minimal_json(), "bos_token_id", json::array({7, 8}));
    j["eos_token_id"] = json::array({999});
    const ModelConfig c = llama2::parse_model_config(j, kSrc);
    CHECK(c.bos_token_id == 7);
    CHECK(c.eos_token_id == 999);
    // A list whose first id is outside the vocabulary is still rejected.
    check_error_names(with(minimal_json(), "eos_token_id", json::array({1001})), {"eos_token_id"});
  }

  TEST_CASE("rope_scaling: null and the default type are accepted") {
    CHECK_NOTHROW(llama2::parse_model_config(with(minimal_json(), "rope_scaling", nullptr), kSrc));
    CHECK_NOTHROW(llama2::parse_model_config(
        with(minimal_json(), "rope_scaling", json{{"rope_type", "default"}}), kSrc));
    CHECK_NOTHROW(llama2::parse_model_config(
        with(minimal_json(), "rope_scaling", json{{"type", "default"}}), kSrc));
  }

  TEST_CASE("missing required key names the key and the source") {
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size"}) {
      CAPTURE(key);
      const std::string msg = parse_error(without(minimal_json(), key));
      CHECK(contains(msg, kSrc));
      CHECK(contains(msg, std::string("missing required key \"") + key + "\""));
    }
  }

  TEST_CASE("wrong types name the key") {
    for (const char* key :
         {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "max_position_embeddings"}) {
      CAPTURE(key);
      check_error_names(with(minimal_json(), key, "6"), {key, "must be an integer"});
      check_error_names(with(minimal_json(), key, 6.0), {key, "must be an integer"});
      check_error_names(with(minimal_json(), key, true), {key, "must be an integer"});
      check_error_names(with(minimal_json(), key, json::array({6})), {key, "must be an integer"});
    }
    check_error_names(with(minimal_json(), "rms_norm_eps", "1e-5"), {"rms_norm_eps", "number"});
    check_error_names(with(minimal_json(), "rope_theta", json::array({1.0})), {"rope_theta"});
    check_error_names(with(minimal_json(), "tie_word_embeddings", "false"),
                      {"tie_word_embeddings"});
    check_error_names(with(minimal_json(), "tie_word_embeddings", 0), {"tie_word_embeddings"});
    check_error_names(with(minimal_json(), "bos_token_id", "1"), {"bos_token_id"});
    check_error_names(with(minimal_json(), "eos_token_id", 2.5), {"eos_token_id"});
    check_error_names(with(minimal_json(), "eos_token_id", json::array()), {"eos_token_id"});
    check_error_names(with(minimal_json(), "bos_token_id", json::array({"1"})), {"bos_token_id"});
  }

  TEST_CASE("non-positive and out-of-range values name the key") {
    for (const char* key :
         {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "max_position_embeddings"}) {
      CAPTURE(key);
      check_error_names(with(minimal_json(), key, 0), {key, "> 0"});
      check_error_names(with(minimal_json(), key, -6), {key});
      check_error_names(with(minimal_json(), key, int64_t{1} << 31), {key, "out of range"});
    }
    check_error_names(with(minimal_json(), "rms_norm_eps", 0.0), {"rms_norm_eps"});
    check_error_names(with(minimal_json(), "rms_norm_eps", -1e-6), {"rms_norm_eps"});
    check_error_names(with(minimal_json(), "rope_theta", 0), {"rope_theta"});
    check_error_names(with(minimal_json(), "rope_theta", -10000.0), {"rope_theta"});
  }

  TEST_CASE("shape consistency errors name both keys") {
    SUBCASE("hidden not divisible by heads") {
      check_error_names(with(minimal_json(), "hidden_size", 121),
                        {"hidden_size", "121", "num_attention_heads", "6"});
    }
    SUBCASE("odd head dimension") {
      // 126 / 6 = 21: divisible but odd, so rotate-half cannot pair the dimensions.
      check_error_names(with(minimal_json(), "hidden_size", 126), {"head dimension", "21", "even"});
    }
    SUBCASE("heads not a multiple of kv heads") {
      check_error_names(with(minimal_json(), "num_key_value_heads", 4),
                        {"num_attention_heads", "num_key_value_heads", "(4)", "(6)"});
    }
    SUBCASE("kv heads greater than heads") {
      check_error_names(with(minimal_json(), "num_key_value_heads", 12),
                        {"num_attention_heads", "num_key_value_heads"});
    }
  }

  TEST_CASE("unsupported rope_scaling and hidden_act") {
    check_error_names(
        with(minimal_json(), "rope_scaling",
             json{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}}),
        {"rope_scaling", "llama3", "Llama 3.1", "not supported"});
    check_error_names(
        with(minimal_json(), "rope_scaling",
             json{{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4096}}),
        {"rope_scaling", "\"yarn\" (YaRN)", "not supported"});
    check_error_names(with(minimal_json(), "rope_scaling", json{{"type", "longrope"}}),
                      {"rope_scaling", "longrope"});
    check_error_names(with(minimal_json(), "rope_scaling", json{{"factor", 2.0}}),
                      {"rope_scaling"});
    check_error_names(with(minimal_json(), "rope_scaling", "dynamic"), {"rope_scaling"});
    for (const json& factor : {json(0.5), json("2"), json(nullptr), json(2000.0)}) {
      check_error_names(
          with(minimal_json(), "rope_scaling", json{{"type", "linear"}, {"factor", factor}}),
          {"rope_scaling", "factor"});
    }
    check_error_names(with(minimal_json(), "hidden_act", "gelu"), {"hidden_act", "gelu", "silu"});
    check_error_names(with(minimal_json(), "hidden_act", "relu"), {"hidden_act"});
  }

  // transformers >= 5 writes the scaling type into rope_parameters ({"rope_type": "llama3", ...});
  // accepting it would run a scaled-RoPE model with plain RoPE (silently wrong logits).
  TEST_CASE("scaled RoPE given in rope_parameters") {
    check_error_names(
        with(minimal_json(), "rope_parameters",
             json{{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}}),
        {"rope_parameters", "llama3"});
    const ModelConfig c = llama2::parse_model_config(
        with(minimal_json(), "rope_parameters",
             json{{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", 2.0}}),
        kSrc);
    CHECK(c.rope_scaling.type == llama2::RopeScalingType::kLinear);
    CHECK(c.rope_scaling.factor == 2.0);
    json both = with(minimal_json(), "rope_parameters",
                     json{{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", 2.0}});
    both["rope_scaling"] = json{{"type", "dynamic"}, {"factor", 2.0}};
    check_error_names(both, {"rope_scaling", "rope_parameters", "disagree"});
  }

  TEST_CASE("rope_scaling linear and dynamic") {
    const ModelConfig lin = llama2::parse_model_config(
        with(llama2_7b_json(), "rope_scaling", json{{"type", "linear"}, {"factor", 4.0}}), kSrc);
    CHECK(lin.rope_scaling.type == llama2::RopeScalingType::kLinear);
    CHECK(lin.rope_scaling.factor == 4.0);
    CHECK(lin.max_position_embeddings == 4096);  // linear configs state the stretched context
    const ModelConfig dyn = llama2::parse_model_config(
        with(llama2_7b_json(), "rope_scaling", json{{"rope_type", "dynamic"}, {"factor", 2.5}}),
        kSrc);
    CHECK(dyn.rope_scaling.type == llama2::RopeScalingType::kDynamic);
    CHECK(dyn.rope_scaling.original_max_position_embeddings == 4096);
    CHECK(dyn.max_position_embeddings == 10240);  // the context NTK scaling reaches: 4096 x 2.5
    // Back to config.json: the original length and both spellings of the type.
    const json j = llama2::model_config_to_json(dyn);
    CHECK(j.at("max_position_embeddings") == 4096);
    CHECK(j.at("rope_scaling").at("type") == "dynamic");
    CHECK(j.at("rope_scaling").at("rope_type") == "dynamic");
    CHECK(j.at("rope_scaling").at("factor") == 2.5);
    const ModelConfig back = llama2::parse_model_config(json::parse(j.dump()), "roundtrip");
    CHECK(back.max_position_embeddings == 10240);
  }

  // transformers' own values (modeling_rope_utils, torch 2.15 / transformers 5.25, fp32):
  // ROPE_INIT_FUNCTIONS[type](LlamaConfig(hidden_size=64, num_attention_heads=8 or 4, ...), "cpu",
  // seq_len=torch.tensor(L)).
  TEST_CASE("RoPE frequencies equal transformers'") {
    json j = with(minimal_json(), "hidden_size", 64);
    j["num_attention_heads"] = 8;
    j["rope_theta"] = 500000.0;
    j["max_position_embeddings"] = 42;
    j["rope_scaling"] = json{{"type", "dynamic"}, {"factor", 2.0}};
    const ModelConfig dyn = llama2::parse_model_config(j, kSrc);
    const std::vector<std::pair<int, std::vector<float>>> hf = {
        {43, {1.0f, 0.03702738136053085f, 0.0013710270868614316f, 5.076554953120649e-05f}},
        {60, {1.0f, 0.030594434589147568f, 0.0009360193507745862f, 2.8636979550356045e-05f}},
        {84, {1.0f, 0.026074564084410667f, 0.0006798829417675734f, 1.7727652448229492e-05f}}};
    for (const auto& point : hf) {
      const int len = point.first;
      const std::vector<float>& want = point.second;
      CAPTURE(len);
      CHECK(llama2::rope_rescaled(dyn, len));
      const std::vector<float> got = llama2::rope_inv_freq(dyn, len);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i)
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(3e-7));
    }
    // Up to the original length (and with seq_len 0) the frequencies are plain RoPE's.
    CHECK_FALSE(llama2::rope_rescaled(dyn, 42));
    CHECK(llama2::rope_inv_freq(dyn, 42) == llama2::rope_inv_freq(dyn));
    j.erase("rope_scaling");
    CHECK(llama2::rope_inv_freq(dyn, 42) ==
          llama2::rope_inv_freq(llama2::parse_model_config(j, kSrc)));
    CHECK_FALSE(llama2::rope_allows_prefix_caching(dyn));

    j = with(minimal_json(), "hidden_size", 64);
    j["num_attention_heads"] = 4;
    j["rope_scaling"] = json{{"type", "linear"}, {"factor", 4.0}};
    const ModelConfig lin = llama2::parse_model_config(j, kSrc);
    const std::vector<float> want = {0.25f,
                                     0.07905694097280502f,
                                     0.02500000037252903f,
                                     0.007905694656074047f,
                                     0.0024999999441206455f,
                                     0.0007905694656074047f,
                                     0.0002500000118743628f,
                                     7.905694656074047e-05f};
    const std::vector<float> got = llama2::rope_inv_freq(lin, 100000);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(3e-7));
    CHECK_FALSE(llama2::rope_rescaled(lin, 100000));
    CHECK(llama2::rope_allows_prefix_caching(lin));
  }

  TEST_CASE("bos/eos outside the vocabulary name the key") {
    check_error_names(with(minimal_json(), "bos_token_id", 1001), {"bos_token_id", "1001"});
    check_error_names(with(minimal_json(), "eos_token_id", -1), {"eos_token_id", "-1"});
    CHECK_NOTHROW(llama2::parse_model_config(with(minimal_json(), "eos_token_id", 1000), kSrc));
    CHECK_NOTHROW(llama2::parse_model_config(with(minimal_json(), "bos_token_id", 0), kSrc));
  }

  // Narrowing before the range check would turn 2^32 + 1 into the valid id 1.
  TEST_CASE("a token id beyond int32 is rejected, not wrapped") {
    const int64_t wraps_to_one = (int64_t{1} << 32) + 1;
    check_error_names(with(minimal_json(), "bos_token_id", wraps_to_one), {"bos_token_id"});
    check_error_names(with(minimal_json(), "eos_token_id", json::array({wraps_to_one})),
                      {"eos_token_id"});
  }

  TEST_CASE("a non-object document is rejected") {
    CHECK(contains(parse_error(json::array({1, 2})), kSrc));
    CHECK_FALSE(parse_error(json(42)).empty());
    CHECK_FALSE(parse_error(json()).empty());
  }

  TEST_CASE("load_model_config reads DIR/config.json") {
    TempDir dir;
    json j = llama2_7b_json();
    j["num_key_value_heads"] = 8;
    j["rope_theta"] = 500000.0;
    dir.write("config.json", j.dump(2));
    const ModelConfig c = llama2::load_model_config(dir.path);
    CHECK(c.hidden_size == 4096);
    CHECK(c.num_kv_heads == 8);
    CHECK(c.rope_theta == 500000.0);
  }

  TEST_CASE("load_model_config errors name the file path") {
    TempDir dir;
    const std::string path = dir.path + "/config.json";
    auto load_error = [&]() -> std::string {
      try {
        llama2::load_model_config(dir.path);
      } catch (const llama2::Error& e) {
        return e.what();
      }
      return "";
    };
    SUBCASE("missing file") {
      const std::string msg = load_error();
      CAPTURE(msg);
      CHECK(contains(msg, path));
      CHECK(contains(msg, "cannot open"));
    }
    SUBCASE("invalid JSON") {
      dir.write("config.json", "{\"hidden_size\": 4096,");
      const std::string msg = load_error();
      CAPTURE(msg);
      CHECK(contains(msg, path));
      CHECK(contains(msg, "not valid JSON"));
    }
    SUBCASE("empty file") {
      dir.write("config.json", "");
      const std::string msg = load_error();
      CHECK(contains(msg, path));
    }
    SUBCASE("a semantic error names the path and the key") {
      dir.write("config.json", without(llama2_7b_json(), "vocab_size").dump());
      const std::string msg = load_error();
      CAPTURE(msg);
      CHECK(contains(msg, path));
      CHECK(contains(msg, "vocab_size"));
    }
    SUBCASE("config.json is a directory") {
      std::filesystem::create_directory(path);
      CHECK(contains(load_error(), path));
    }
  }

  TEST_CASE("model_config_to_json round trip") {
    ModelConfig c;
    c.hidden_size = 120;
    c.intermediate_size = 389;
    c.num_layers = 5;
    c.num_heads = 6;
    c.num_kv_heads = 3;
    c.vocab_size = 1001;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 500000.0;
    c.max_position_embeddings = 333;
    c.tie_word_embeddings = true;
    c.bos_token_id = 17;
    c.eos_token_id = 999;
    c.torch_dtype = "bfloat16";

    const json j = llama2::model_config_to_json(c);
    // The HF key names, checked against the literals above (not against the parser).
    CHECK(j.at("hidden_size") == 120);
    CHECK(j.at("intermediate_size") == 389);
    CHECK(j.at("num_hidden_layers") == 5);
    CHECK(j.at("num_attention_heads") == 6);
    CHECK(j.at("num_key_value_heads") == 3);
    CHECK(j.at("vocab_size") == 1001);
    CHECK(j.at("max_position_embeddings") == 333);
    CHECK(j.at("tie_word_embeddings") == true);
    CHECK(j.at("bos_token_id") == 17);
    CHECK(j.at("eos_token_id") == 999);
    CHECK(j.at("torch_dtype") == "bfloat16");
    CHECK(j.at("hidden_act") == "silu");
    CHECK(j.at("rope_scaling").is_null());

    // Through text, as a file would be.
    const ModelConfig r = llama2::parse_model_config(json::parse(j.dump()), "roundtrip");
    CHECK(r.hidden_size == c.hidden_size);
    CHECK(r.intermediate_size == c.intermediate_size);
    CHECK(r.num_layers == c.num_layers);
    CHECK(r.num_heads == c.num_heads);
    CHECK(r.num_kv_heads == c.num_kv_heads);
    CHECK(r.vocab_size == c.vocab_size);
    CHECK(r.rms_norm_eps == c.rms_norm_eps);
    CHECK(r.rope_theta == c.rope_theta);
    CHECK(r.max_position_embeddings == c.max_position_embeddings);
    CHECK(r.tie_word_embeddings == c.tie_word_embeddings);
    CHECK(r.bos_token_id == c.bos_token_id);
    CHECK(r.eos_token_id == c.eos_token_id);
    CHECK(r.torch_dtype == c.torch_dtype);
  }
}
