// The typed engine configuration (common/engine_config.h): flag names to enums and back, the
// command-line EngineConfig with each command's step defaults, resolve_config's defaults, and the
// LLAMA2_* tuning knobs parsed once (common/tuning_knobs.h) with one error per bad value.
#include <doctest/doctest.h>

#include <cxxopts.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/checkpoint_quant.h"
#include "common/engine_config.h"
#include "common/model_config.h"
#include "common/tuning_knobs.h"
#include "coordinator/cli/cli_common.h"
#include "rank/engine.h"

namespace {

using llama2::Backend;
using llama2::ComputeDType;
using llama2::KvCacheDType;
using llama2::WeightDType;

// A fake environment: only the given variables are set.
llama2::TuningKnobs knobs(const std::map<std::string, std::string>& env) {
  return llama2::parse_tuning_knobs([&](const char* var) -> const char* {
    const auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string knob_error(const std::string& var, const std::string& value) {
  try {
    knobs({{var, value}});
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

// An engine command's flags as batch and serve have them.
cxxopts::ParseResult parse(std::vector<std::string> args) {
  static cxxopts::Options opts = [] {
    cxxopts::Options o("test");
    o.add_options()("max-batch-size", "", cxxopts::value<int>())(
        "prefill-chunk", "", cxxopts::value<int>())("kv-cache-blocks", "", cxxopts::value<int>());
    llama2::add_engine_options(o);
    llama2::add_prefix_caching_options(o);
    llama2::add_deterministic_option(o);
    return o;
  }();
  args.insert(args.begin(), "llama2");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return opts.parse(static_cast<int>(argv.size()), argv.data());
}

std::string config_error(const std::vector<std::string>& args) {
  try {
    llama2::engine_config_from(parse(args), llama2::kServeSteps);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_SUITE("engine_config") {
  TEST_CASE("flag names map to enums and back; bad names list the allowed values") {
    for (Backend b : {Backend::kAuto, Backend::kCpu, Backend::kCuda}) {
      CHECK(llama2::parse_backend(llama2::to_string(b)) == b);
    }
    for (ComputeDType d :
         {ComputeDType::kAuto, ComputeDType::kFp16, ComputeDType::kBf16, ComputeDType::kFp32}) {
      CHECK(llama2::parse_compute_dtype(llama2::to_string(d)) == d);
    }
    CHECK(llama2::parse_kv_cache_dtype("auto") == KvCacheDType::kAuto);
    CHECK(llama2::parse_kv_cache_dtype("fp8") == KvCacheDType::kFp8E4m3);  // both spellings
    CHECK(llama2::parse_kv_cache_dtype("fp8_e4m3") == KvCacheDType::kFp8E4m3);
    CHECK(std::string(llama2::kv_dtype_name(KvCacheDType::kAuto, ComputeDType::kBf16)) == "bf16");
    CHECK(std::string(llama2::kv_dtype_name(KvCacheDType::kFp8E4m3, ComputeDType::kBf16)) ==
          "fp8_e4m3");
    CHECK_THROWS_WITH_AS(llama2::parse_backend("gpu"),
                         "--backend must be one of cpu, cuda, auto (got \"gpu\")", llama2::Error);
    CHECK_THROWS_WITH_AS(llama2::parse_compute_dtype("FP16"),
                         "--dtype must be one of auto, fp16, bf16, fp32 (got \"FP16\")",
                         llama2::Error);
    CHECK_THROWS_WITH_AS(llama2::parse_kv_cache_dtype("int8"),
                         "--kv-cache-dtype must be one of auto, fp8, fp8_e4m3 (got \"int8\")",
                         llama2::Error);
  }

  TEST_CASE("the KV dtype: fp8 only on cuda with fp16/bf16") {
    CHECK(llama2::choose_kv_dtype(KvCacheDType::kAuto, Backend::kCpu, ComputeDType::kFp32) ==
          KvCacheDType::kAuto);
    CHECK(llama2::choose_kv_dtype(KvCacheDType::kFp8E4m3, Backend::kCuda, ComputeDType::kBf16) ==
          KvCacheDType::kFp8E4m3);
    CHECK_THROWS_WITH_AS(
        llama2::choose_kv_dtype(KvCacheDType::kFp8E4m3, Backend::kCpu, ComputeDType::kFp32),
        doctest::Contains("--kv-cache-dtype fp8 needs the cuda backend"), llama2::Error);
    CHECK_THROWS_WITH_AS(
        llama2::choose_kv_dtype(KvCacheDType::kFp8E4m3, Backend::kCuda, ComputeDType::kFp32),
        "--kv-cache-dtype fp8 needs --dtype fp16 or bf16 (this run: fp32)", llama2::Error);
  }

  TEST_CASE("the weight dtype: names, and fp8/int8 only on cuda with fp16/bf16") {
    ComputeDType named = ComputeDType::kFp32;
    CHECK(llama2::parse_weight_dtype("auto", &named) == WeightDType::kAuto);
    CHECK(named == ComputeDType::kAuto);
    CHECK(llama2::parse_weight_dtype("bf16", &named) == WeightDType::kAuto);
    CHECK(named == ComputeDType::kBf16);
    CHECK(llama2::parse_weight_dtype("fp8", &named) == WeightDType::kFp8);
    CHECK(llama2::parse_weight_dtype("fp8_e4m3", &named) == WeightDType::kFp8);
    CHECK(llama2::parse_weight_dtype("int8", &named) == WeightDType::kInt8);
    CHECK(llama2::parse_weight_dtype("int4", &named) == WeightDType::kInt4);
    CHECK_THROWS_WITH_AS(
        llama2::parse_weight_dtype("int3", &named),
        "--weight-dtype must be one of auto, fp16, bf16, fp8, fp8_e4m3, int8, int4 (got \"int3\")",
        llama2::Error);
    CHECK(std::string(llama2::weight_dtype_name(WeightDType::kInt4, ComputeDType::kFp16)) ==
          "int4");
    CHECK(llama2::weight_dtype_bytes(WeightDType::kInt4, ComputeDType::kBf16) ==
          llama2::kInt4LinearBytes);
    CHECK(std::string(llama2::weight_dtype_name(WeightDType::kInt8, ComputeDType::kFp16)) ==
          "int8");
    CHECK(std::string(llama2::weight_dtype_name(WeightDType::kAuto, ComputeDType::kBf16)) ==
          "bf16");
    CHECK(llama2::weight_dtype_bytes(WeightDType::kFp8, ComputeDType::kFp16) == 1);
    CHECK(llama2::weight_dtype_bytes(WeightDType::kAuto, ComputeDType::kFp32) == 4);

    llama2::EngineConfig cfg;
    cfg.weight_dtype = WeightDType::kFp8;
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kBf16) ==
          WeightDType::kFp8);
    CHECK_THROWS_WITH_AS(llama2::choose_weight_dtype(cfg, Backend::kCpu, ComputeDType::kFp32),
                         doctest::Contains("--weight-dtype fp8_e4m3 needs the cuda backend"),
                         llama2::Error);
    cfg.weight_dtype = WeightDType::kInt8;
    CHECK_THROWS_WITH_AS(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp32),
                         "--weight-dtype int8 needs --dtype fp16 or bf16 (this run: fp32)",
                         llama2::Error);
    cfg.weight_dtype = WeightDType::kAuto;
    cfg.weight_dtype_named = ComputeDType::kFp16;
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16) ==
          WeightDType::kAuto);
    CHECK_THROWS_WITH_AS(
        llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kBf16),
        doctest::Contains("--weight-dtype fp16 differs from this run's --dtype bf16"),
        llama2::Error);
  }

  TEST_CASE("int4: a 4-bit checkpoint's packing on cuda where the kernels take it") {
    const auto q = [](const nlohmann::json& j) {
      return llama2::parse_checkpoint_quant(nlohmann::json{{"quantization_config", j}}, "c.json");
    };
    const llama2::CheckpointQuant awq = q({{"quant_method", "awq"}, {"group_size", 128}});
    const llama2::CheckpointQuant act =
        q({{"quant_method", "gptq"}, {"group_size", 128}, {"desc_act", true}});
    const llama2::CheckpointQuant g32 = q({{"quant_method", "gptq"}, {"group_size", 32}});
    llama2::EngineConfig cfg;
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, awq) ==
          WeightDType::kInt4);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kBf16, awq) ==
          WeightDType::kInt4);
    // Dequantized at load: the cpu backend, fp32, act order, groups the kernels do not take.
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCpu, ComputeDType::kFp32, awq) ==
          WeightDType::kAuto);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp32, awq) ==
          WeightDType::kAuto);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, act) ==
          WeightDType::kAuto);
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, g32) ==
          WeightDType::kAuto);
    cfg.weight_dtype = WeightDType::kInt4;
    CHECK_THROWS_WITH_AS(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16, act),
                         doctest::Contains("contiguous groups of a multiple of 64 columns"),
                         llama2::Error);
    // An fp16 checkpoint quantized at load; only on cuda.
    CHECK(llama2::choose_weight_dtype(cfg, Backend::kCuda, ComputeDType::kFp16) ==
          WeightDType::kInt4);
    CHECK_THROWS_WITH_AS(llama2::choose_weight_dtype(cfg, Backend::kCpu, ComputeDType::kFp32),
                         doctest::Contains("--weight-dtype int4 needs the cuda backend"),
                         llama2::Error);
  }

  TEST_CASE("resolve_config fills every default from the model") {
    llama2::ModelConfig model;
    model.hidden_size = 64;
    model.num_heads = 4;
    model.num_kv_heads = 4;
    model.max_position_embeddings = 300;
    model.torch_dtype = "bfloat16";
    llama2::EngineConfig cfg;  // the struct's defaults: cpu on a machine without GPUs
    cfg.knobs.gemv_rows = 3;
    const llama2::ResolvedConfig r = llama2::resolve_config(cfg, model, 0);
    CHECK(r.backend == Backend::kCpu);
    CHECK(r.dtype == ComputeDType::kFp32);
    CHECK(r.kv_cache_dtype == KvCacheDType::kAuto);
    CHECK(r.max_batch == 1);
    CHECK(r.max_step_tokens == 1 + 512);
    CHECK(r.max_seq_len == 300);    // 0: max_position_embeddings
    CHECK(r.max_graph_batch == 1);  // graphs on: up to max_batch
    CHECK(r.knobs.gemv_rows == 3);  // the knobs travel with the config
    cfg.cuda_graphs = false;
    cfg.max_seq_len = 100;
    CHECK(llama2::resolve_config(cfg, model, 0).max_graph_batch == 0);
    CHECK(llama2::resolve_config(cfg, model, 0).max_seq_len == 100);
  }

  TEST_CASE("the command line's EngineConfig: the command's step defaults, flags over them") {
    const llama2::EngineConfig d =
        llama2::engine_config_from(parse({"-m", "M"}), llama2::kServeSteps);
    CHECK(d.model_dir == "M");
    CHECK(d.backend == Backend::kAuto);
    CHECK(d.dtype == ComputeDType::kAuto);
    CHECK(d.kv_cache_dtype == KvCacheDType::kAuto);
    CHECK(d.block_size == 16);
    CHECK(d.kv_cache_blocks == 0);
    CHECK(d.max_batch == 32);
    CHECK(d.prefill_chunk == 256);
    CHECK(d.max_step_tokens() == 32 + 256);
    CHECK(d.cuda_graphs);
    const llama2::EngineConfig g =
        llama2::engine_config_from(parse({"-m", "M"}), llama2::kGenerateSteps);
    CHECK((g.max_batch == 1 && g.prefill_chunk == 512));
    CHECK((llama2::kBatchSteps.max_batch == 32 && llama2::kBatchSteps.prefill_chunk == 512));
    const llama2::EngineConfig f = llama2::engine_config_from(
        parse({"-m", "M", "--backend", "cpu", "--kv-cache-dtype", "fp8", "--max-batch-size", "3",
               "--prefill-chunk", "7", "--kv-cache-blocks", "9", "--no-cuda-graphs"}),
        llama2::kServeSteps);
    CHECK(f.backend == Backend::kCpu);
    CHECK(f.kv_cache_dtype == KvCacheDType::kFp8E4m3);
    CHECK((f.max_batch == 3 && f.prefill_chunk == 7 && f.kv_cache_blocks == 9));
    CHECK(!f.cuda_graphs);
  }

  TEST_CASE("bad engine flag values are one Error naming the flag (not clamped first)") {
    CHECK(config_error({"-m", "M", "--max-batch-size", "0"}) ==
          "--max-batch-size must be >= 1 (got 0)");
    CHECK(config_error({"-m", "M", "--prefill-chunk", "-4"}) ==
          "--prefill-chunk must be >= 1 (got -4)");
    CHECK(config_error({"-m", "M", "--kv-cache-blocks", "0"}) ==
          "--kv-cache-blocks must be >= 1 (got 0)");
    CHECK(config_error({"-m", "M", "--block-size", "2000"}) ==
          "--block-size must be in [1, 1024] (got 2000)");
    CHECK(config_error({"-m", "M", "--dtype", "half"}) ==
          "--dtype must be one of auto, fp16, bf16, fp32 (got \"half\")");
    CHECK(config_error({"-m", "M", "--prefix-caching", "yes"}) ==
          "--prefix-caching must be one of on, off (got \"yes\")");
    CHECK(config_error({"-m", "M", "--prefix-caching", "on", "--no-prefix-caching"}) ==
          "--no-prefix-caching and --prefix-caching on contradict each other; give one");
  }

  TEST_CASE("prefix caching: on by default, off by either flag, into the scheduler's options") {
    auto caching = [](const std::vector<std::string>& args) {
      const llama2::EngineConfig c = llama2::engine_config_from(parse(args), llama2::kBatchSteps);
      CHECK(llama2::scheduler_options(c).prefix_caching == c.prefix_caching);
      return c.prefix_caching;
    };
    CHECK(caching({"-m", "M"}));
    CHECK(caching({"-m", "M", "--prefix-caching", "on"}));
    CHECK_FALSE(caching({"-m", "M", "--prefix-caching", "off"}));
    CHECK_FALSE(caching({"-m", "M", "--no-prefix-caching"}));
    CHECK_FALSE(caching({"-m", "M", "--prefix-caching", "off", "--no-prefix-caching"}));
  }

  TEST_CASE(
      "--deterministic: off by default, a typed field, on cpu, and on cuda for 16-bit types") {
    CHECK_FALSE(llama2::engine_config_from(parse({"-m", "M"}), llama2::kBatchSteps).deterministic);
    const llama2::EngineConfig c =
        llama2::engine_config_from(parse({"-m", "M", "--deterministic"}), llama2::kBatchSteps);
    CHECK(c.deterministic);
    llama2::ModelConfig model;
    model.hidden_size = 64;
    model.num_heads = 4;
    model.num_kv_heads = 4;
    CHECK(llama2::resolve_config(c, model, 0).deterministic);  // cpu
    llama2::ResolvedConfig r;
    r.backend = Backend::kCuda;
    r.dtype = llama2::ComputeDType::kFp16;
    CHECK_FALSE(llama2::choose_deterministic(false, r));
    CHECK(llama2::choose_deterministic(true, r));
    r.dtype = llama2::ComputeDType::kBf16;
    CHECK(llama2::choose_deterministic(true, r));
    // One message naming every choice the batch-invariant kernels do not take, and the way out.
    r.dtype = llama2::ComputeDType::kFp32;
    r.kv_cache_dtype = llama2::KvCacheDType::kFp8E4m3;
    r.weight_dtype = llama2::WeightDType::kInt8;
    std::string msg;
    try {
      llama2::choose_deterministic(true, r);
    } catch (const llama2::Error& e) {
      msg = e.what();
    }
    for (const char* part :
         {"--deterministic on the cuda backend needs", "--dtype fp16 or bf16 (this run: fp32)",
          "--weight-dtype auto", "--kv-cache-dtype auto", "use --backend cpu"}) {
      CHECK_MESSAGE(msg.find(part) != std::string::npos, part);
    }
    r.dtype = llama2::ComputeDType::kFp16;
    r.weight_dtype = llama2::WeightDType::kAuto;
    msg.clear();
    try {
      llama2::choose_deterministic(true, r);
    } catch (const llama2::Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("--kv-cache-dtype auto, the KV cache in the model dtype (this run: fp8") !=
          std::string::npos);
    CHECK(msg.find("--dtype") == std::string::npos);
  }
}

TEST_SUITE("tuning_knobs") {
  TEST_CASE("nothing set: the engine's normal behaviour") {
    const llama2::TuningKnobs k = knobs({});
    CHECK(k.gemv_rows == 1);
    CHECK(k.pdl);
    CHECK(!k.fuse_norm);
    CHECK(k.gemv_prefetch_kb == 0);
    CHECK(k.decode_kernel == llama2::DecodeKernelChoice::kAuto);
    CHECK(k.prefill_kernel == llama2::PrefillKernelChoice::kAuto);
    CHECK(k.qgemv == llama2::QgemvChoice::kAuto);
    CHECK(k.warmup);
    CHECK(k.mixed_decode);
    CHECK(k.prefill_split);
    CHECK(!k.op_profile);
    CHECK(k.custom_allreduce);
    CHECK(!k.fuse_allreduce_norm);
    CHECK(k.cpu_split == llama2::CpuSplit::kAuto);
    CHECK(!k.full_logits);
    CHECK(k.step_log.empty());
    CHECK(k.test_stall.step == 0);
    // An empty value is the same as unset.
    CHECK(knobs({{"LLAMA2_PDL", ""}, {"LLAMA2_GEMV", ""}, {"LLAMA2_TEST_STALL", ""}}).pdl);
  }

  TEST_CASE("every documented value") {
    const llama2::TuningKnobs k = knobs({{"LLAMA2_GEMV", "0"},
                                         {"LLAMA2_PDL", "0"},
                                         {"LLAMA2_FUSE_NORM", "1"},
                                         {"LLAMA2_DECODE_KERNEL", "warp"},
                                         {"LLAMA2_PREFILL_KERNEL", "wmma"},
                                         {"LLAMA2_QGEMV", "old"},
                                         {"LLAMA2_WARMUP", "0"},
                                         {"LLAMA2_MIXED_DECODE", "0"},
                                         {"LLAMA2_PREFILL_SPLIT", "0"},
                                         {"LLAMA2_OP_PROFILE", "1"},
                                         {"LLAMA2_CUSTOM_ALLREDUCE", "0"},
                                         {"LLAMA2_FUSE_ALLREDUCE_NORM", "1"},
                                         {"LLAMA2_CPU_SPLIT", "columns"},
                                         {"LLAMA2_FULL_LOGITS", "1"},
                                         {"LLAMA2_STEP_LOG", "/tmp/steps"},
                                         {"LLAMA2_TEST_STALL", "5:1:3000"}});
    CHECK(k.gemv_rows == 0);
    CHECK(!k.pdl);
    CHECK(k.fuse_norm);
    CHECK(k.decode_kernel == llama2::DecodeKernelChoice::kWarp);
    CHECK(k.prefill_kernel == llama2::PrefillKernelChoice::kWmma);
    CHECK(k.qgemv == llama2::QgemvChoice::kOld);
    CHECK(knobs({{"LLAMA2_QGEMV", "half2"}}).qgemv == llama2::QgemvChoice::kHalf2);
    CHECK(!k.warmup);
    CHECK(!k.mixed_decode);
    CHECK(!k.prefill_split);
    CHECK(k.op_profile);
    CHECK(!k.custom_allreduce);
    CHECK(k.fuse_allreduce_norm);
    CHECK(k.cpu_split == llama2::CpuSplit::kColumns);
    CHECK(k.full_logits);
    CHECK(k.step_log == "/tmp/steps");
    CHECK((k.test_stall.step == 5 && k.test_stall.rank == 1 && k.test_stall.ms == 3000));
    CHECK(knobs({{"LLAMA2_GEMV", "8"}}).gemv_rows == 8);
    CHECK(knobs({{"LLAMA2_GEMV_PREFETCH_KB", "2048"}}).gemv_prefetch_kb == 2048);
    CHECK(knobs({}).fuse_rope);
    CHECK(!knobs({{"LLAMA2_FUSE_ROPE", "0"}}).fuse_rope);
    CHECK(knobs({}).w8a16_rows == 64);
    CHECK(knobs({{"LLAMA2_W8A16_ROWS", "0"}}).w8a16_rows == 0);
    CHECK(knobs({{"LLAMA2_W8A16_ROWS", "4096"}}).w8a16_rows == 4096);
    CHECK(knobs({}).skinny_rows == 16);
    CHECK(knobs({{"LLAMA2_SKINNY_ROWS", "64"}}).skinny_rows == 64);
    CHECK(!knobs({}).fp8_w8a16);
    CHECK(knobs({{"LLAMA2_W8A16_FP8", "1"}}).fp8_w8a16);
    CHECK(!knobs({}).fp8_tune);
    CHECK(knobs({{"LLAMA2_FP8_TUNE", "1"}}).fp8_tune);
    CHECK(knobs({}).fp8_fuse);
    CHECK(!knobs({{"LLAMA2_FP8_FUSE", "0"}}).fp8_fuse);
    CHECK(knobs({{"LLAMA2_DECODE_KERNEL", "block"}}).decode_kernel ==
          llama2::DecodeKernelChoice::kBlock);
    CHECK(knobs({}).decode_min_partition == 0);
    CHECK(knobs({{"LLAMA2_DECODE_MIN_PARTITION", "256"}}).decode_min_partition == 256);
    CHECK(knob_error("LLAMA2_DECODE_MIN_PARTITION", "100") ==
          "LLAMA2_DECODE_MIN_PARTITION=100: expected 0, 32, 64, 128, 256 or 512");
    CHECK(knobs({{"LLAMA2_CPU_SPLIT", "rows"}}).cpu_split == llama2::CpuSplit::kRows);
    // "0" is off: before, any value of LLAMA2_FULL_LOGITS (even 0) forced full rows.
    CHECK(!knobs({{"LLAMA2_FULL_LOGITS", "0"}}).full_logits);
  }

  TEST_CASE("a bad value names the variable and the allowed values") {
    // Before they were parsed once, these were silently taken as "on" (or clamped).
    for (const char* var : {"LLAMA2_PDL", "LLAMA2_FUSE_NORM", "LLAMA2_FUSE_ROPE", "LLAMA2_FP8_TUNE",
                            "LLAMA2_FP8_FUSE", "LLAMA2_WARMUP", "LLAMA2_MIXED_DECODE",
                            "LLAMA2_PREFILL_SPLIT", "LLAMA2_OP_PROFILE", "LLAMA2_CUSTOM_ALLREDUCE",
                            "LLAMA2_FUSE_ALLREDUCE_NORM", "LLAMA2_FULL_LOGITS"}) {
      CAPTURE(var);
      CHECK(knob_error(var, "yes") == std::string(var) + "=yes: expected 0 or 1");
      CHECK(knob_error(var, "00") == std::string(var) + "=00: expected 0 or 1");
    }
    for (const char* v : {"9", "16", "-1", "x", "1 ", "01"}) {
      CAPTURE(v);
      CHECK(knob_error("LLAMA2_GEMV", v) ==
            std::string("LLAMA2_GEMV=") + v + ": expected an integer from 0 (cuBLAS only) to 8");
    }
    for (const char* v : {"-1", "x", "2000000", "12 "}) {
      CAPTURE(v);
      CHECK(knob_error("LLAMA2_W8A16_ROWS", v) ==
            std::string("LLAMA2_W8A16_ROWS=") + v +
                ": expected an integer from 0 (always dequantize + cuBLAS) to 1048576 (the most "
                "rows of an int8 product that the W8A16 GEMM takes)");
    }
    for (const char* v : {"65", "-1", "x"}) {
      CAPTURE(v);
      CHECK(knob_error("LLAMA2_SKINNY_ROWS", v) ==
            std::string("LLAMA2_SKINNY_ROWS=") + v +
                ": expected an integer from 0 (cuBLAS) to 64 (the most rows of a 16-bit-weight "
                "product that the skinny GEMM takes)");
    }
    CHECK(knob_error("LLAMA2_GEMV_PREFETCH_KB", "-1") ==
          "LLAMA2_GEMV_PREFETCH_KB=-1: expected an integer from 0 (no prefetch) to 1048576 (KiB "
          "of weights a GEMV launch prefetches into L2)");
    CHECK(knob_error("LLAMA2_W8A16_FP8", "on") == "LLAMA2_W8A16_FP8=on: expected 0 or 1");
    CHECK(knob_error("LLAMA2_DECODE_KERNEL", "fast") ==
          "LLAMA2_DECODE_KERNEL=fast: expected auto, block or warp");
    CHECK(knob_error("LLAMA2_QGEMV", "fp8") == "LLAMA2_QGEMV=fp8: expected auto, half2 or old");
    CHECK(knob_error("LLAMA2_PREFILL_KERNEL", "fa2") ==
          "LLAMA2_PREFILL_KERNEL=fa2: expected auto, wmma or mma");
    CHECK(knobs({{"LLAMA2_PREFILL_KERNEL", "mma"}}).prefill_kernel ==
          llama2::PrefillKernelChoice::kMma);
    CHECK(knob_error("LLAMA2_CPU_SPLIT", "diagonal") ==
          "LLAMA2_CPU_SPLIT=diagonal: expected auto, columns or rows");
    CHECK(knob_error("LLAMA2_TEST_STALL", "0").find("LLAMA2_TEST_STALL must be STEP[:RANK[:MS]]") !=
          std::string::npos);
    CHECK(knobs({{"LLAMA2_HTTP_THREAD_NICE", "5"}}).http_thread_nice == 5);
    CHECK(knobs({{"LLAMA2_TEST_HTTP_START_DELAY_MS", "1500"}}).test_http_start_delay_ms == 1500);
    CHECK(knob_error("LLAMA2_HTTP_THREAD_NICE", "20") ==
          "LLAMA2_HTTP_THREAD_NICE=20: expected an integer from 1 to 19 (niceness of the HTTP "
          "connection threads)");
    CHECK(knob_error("LLAMA2_TEST_HTTP_START_DELAY_MS", "-3")
              .find("LLAMA2_TEST_HTTP_START_DELAY_MS=-3: expected an integer from 1") == 0);
  }
}
