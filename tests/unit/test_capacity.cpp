// Capacity arithmetic (common/capacity.h): weight shards, KV bytes, block counts, TP validity,
// presets and size parsing. Every expected value is written out as the arithmetic a person does by
// hand from the Llama-2 shapes (weights per layer: q/k/v/o, gate/up/down, 2 norms; plus embedding,
// LM head and final norm), never taken from the code under test. A second, independent check
// sums the rank loader's own tensor slices (rank/weight_layout.h) for every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/weight_layout.h"
#include "test_util.h"

using llama2::CapacityPlan;
using llama2::CapacityRequest;
using llama2::kGiB;
using llama2::ModelConfig;

namespace {

constexpr uint64_t kFp16 = 2;

CapacityPlan plan(const std::string& preset, int tp, uint64_t gpu_mem, int max_seq_len = 0,
                  int dtype_bytes = 2) {
  CapacityRequest r;
  r.tp = tp;
  r.gpu_mem_bytes = gpu_mem;
  r.dtype_bytes = dtype_bytes;
  if (max_seq_len) r.max_seq_len = max_seq_len;
  return llama2::plan_capacity(llama2::preset_config(preset), r);
}

// Element count of every slice a rank's loader copies, from the loader's own description.
uint64_t loader_elems(const ModelConfig& c, int tp, int rank) {
  const llama2::ShardPlan s = llama2::make_shard_plan(c, tp, rank);
  uint64_t n = llama2::embedding_slice(c, s).numel() + llama2::final_norm_slice(c).numel();
  if (!c.tie_word_embeddings) n += llama2::lm_head_slice(c, s).numel();
  for (int l = 0; l < c.num_layers; ++l) {
    for (int w = 0; w < static_cast<int>(llama2::LayerTensor::kCount); ++w) {
      n += llama2::layer_slice(c, s, l, static_cast<llama2::LayerTensor>(w)).numel();
    }
  }
  return n;
}

}  // namespace

TEST_SUITE("capacity") {
  TEST_CASE("presets have the official Llama-2 parameter counts") {
    // Published totals of meta-llama/Llama-2-{7b,13b,70b}-hf (safetensors metadata), in elements.
    CHECK(plan("7b", 1, 80 * kGiB).model_weight_bytes == 6738415616ull * kFp16);
    CHECK(plan("13b", 1, 80 * kGiB).model_weight_bytes == 13015864320ull * kFp16);
    CHECK(plan("70b", 1, 80 * kGiB).model_weight_bytes == 68976648192ull * kFp16);
    const ModelConfig c70 = llama2::preset_config("70b");
    CHECK(c70.num_kv_heads == 8);
    CHECK(c70.head_dim() == 128);
    CHECK(c70.max_position_embeddings == 4096);
    CHECK_FALSE(c70.tie_word_embeddings);
  }

  TEST_CASE("CodeLlama presets: the published parameter counts, 34B's GQA shape") {
    // Published totals of codellama/CodeLlama-{7b,34b}-hf (model.safetensors.index.json
    // total_size / 2): 7B's 16 infilling tokens add 2 x 16 x 4096 to Llama-2-7B's count.
    CHECK(plan("codellama-7b", 1, 80 * kGiB).model_weight_bytes == 6738546688ull * kFp16);
    CHECK(plan("codellama-34b", 1, 80 * kGiB).model_weight_bytes == 33743970304ull * kFp16);
    const ModelConfig c34 = llama2::preset_config("codellama-34b");
    CHECK(c34.num_heads == 64);
    CHECK(c34.num_kv_heads == 8);
    CHECK(c34.vocab_size == 32000);
    CHECK(c34.rope_theta == 1000000.0);
    CHECK(c34.max_position_embeddings == 16384);
    CHECK(llama2::preset_config("codellama-13b").vocab_size == 32016);
    // 8 KV heads: TP 16 replicates them; 64 heads allow 1, 2, 4, 8, 16, 32, 64.
    CHECK(llama2::valid_tp_degrees(c34, 64) == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
    CHECK(plan("codellama-34b", 8, 80 * kGiB).kv_heads_per_gpu == 1);
    const std::string msg = llama2::test::error_of([] { llama2::preset_config("codellama-70b"); });
    CHECK(llama2::test::contains(msg, "codellama-34b"));
  }

  // Weight expressions read: fp16 bytes * (embedding + LM head + layers * per-layer + final norm).
  TEST_CASE("7B weights and KV per GPU at TP 1/2/4/8") {
    // Per layer: q,k,v,o are [32/tp heads * 128, 4096]; gate/up/down [11008/tp, 4096]; 2 norms.
    CHECK(plan("7b", 1, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (32000ull * 4096 * 2 + 32ull * (4ull * 4096 * 4096 + 3ull * 4096 * 11008 + 2 * 4096) +
               4096));
    CHECK(plan("7b", 2, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (16000ull * 4096 * 2 + 32ull * (4ull * 2048 * 4096 + 3ull * 4096 * 5504 + 2 * 4096) +
               4096));
    CHECK(plan("7b", 4, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (8000ull * 4096 * 2 + 32ull * (4ull * 1024 * 4096 + 3ull * 4096 * 2752 + 2 * 4096) +
               4096));
    CHECK(plan("7b", 8, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (4000ull * 4096 * 2 + 32ull * (4ull * 512 * 4096 + 3ull * 4096 * 1376 + 2 * 4096) +
               4096));
    CHECK(plan("7b", 1, 80 * kGiB).kv_bytes_per_token == 2 * 32 * 4096 * 2);  // 524288
    CHECK(plan("7b", 1, 80 * kGiB).kv_bytes_per_token == 524288);
    CHECK(plan("7b", 2, 80 * kGiB).kv_bytes_per_token == 2 * 32 * 16 * 128 * 2);
    CHECK(plan("7b", 4, 80 * kGiB).kv_bytes_per_token == 2 * 32 * 8 * 128 * 2);
    CHECK(plan("7b", 8, 80 * kGiB).kv_bytes_per_token == 2 * 32 * 4 * 128 * 2);
    CHECK(plan("7b", 1, 80 * kGiB, 0, 4).kv_bytes_per_token == 2 * 32 * 4096 * 4);  // fp32
  }

  TEST_CASE("7B fp16 on one 80GiB GPU: blocks and full-length sequences") {
    const CapacityPlan p = plan("7b", 1, 80 * kGiB);
    const int64_t weights = 2 * (32000ll * 4096 * 2 +
                                 32ll * (4ll * 4096 * 4096 + 3ll * 4096 * 11008 + 2 * 4096) + 4096);
    const int64_t reserve = 8 * static_cast<int64_t>(kGiB);  // 10% of 80 GiB > 2 GiB
    const int64_t free = 80 * static_cast<int64_t>(kGiB) - reserve - weights;
    const int64_t block = 524288ll * 16;
    CHECK(p.reserve_bytes == 8 * kGiB);
    CHECK(p.reserve_is_default);
    CHECK(p.max_seq_len == 4096);  // defaults to max_position_embeddings
    CHECK(p.kv_bytes_per_block == 524288ull * 16);
    CHECK(p.blocks_per_sequence == 4096 / 16);
    CHECK(p.kv_bytes_per_sequence == 524288ull * 4096);  // 2 GiB per full sequence
    CHECK(p.free_bytes_for_kv == free);
    CHECK(p.kv_blocks == free / block);
    CHECK(p.kv_tokens == free / block * 16);
    CHECK(p.max_sequences == free / block / 256);
    CHECK(p.fits);
    CHECK(p.shortfall_bytes == 0);
  }

  // fp8 (e4m3) KV cache: 1 byte per element instead of 2; the weights stay fp16.
  TEST_CASE("7B fp16 weights with an fp8 KV cache on one 80GiB GPU") {
    CapacityRequest r;  // tp 1, 80 GiB, block 16, max_seq_len 4096
    r.kv_dtype_bytes = 1;
    const CapacityPlan p = llama2::plan_capacity(llama2::preset_config("7b"), r);
    // Same hand arithmetic as the fp16 case above: 13476831232 B of weights, 8 GiB reserve.
    const int64_t weights = 2 * (32000ll * 4096 * 2 +
                                 32ll * (4ll * 4096 * 4096 + 3ll * 4096 * 11008 + 2 * 4096) + 4096);
    const int64_t free = 80 * static_cast<int64_t>(kGiB) - 8 * static_cast<int64_t>(kGiB) - weights;
    CHECK(weights == 13476831232ll);
    CHECK(free == 63832580096ll);
    CHECK(p.dtype_bytes == 2);
    CHECK(p.kv_dtype_bytes == 1);
    CHECK(p.weight_bytes_per_gpu == static_cast<uint64_t>(weights));  // weights unchanged
    CHECK(p.model_weight_bytes == 6738415616ull * kFp16);
    CHECK(p.free_bytes_for_kv == free);
    CHECK(p.kv_bytes_per_token == 2 * 32 * 4096 * 1);  // 262144: half of fp16's 524288
    CHECK(p.kv_bytes_per_block == 262144ull * 16);
    CHECK(p.kv_bytes_per_sequence == 262144ull * 4096);  // 1 GiB per full sequence
    // 63832580096 / 4194304 = 15218.8 blocks (fp16: / 8388608 = 7609.4); / 256 blocks a sequence.
    CHECK(p.kv_blocks == 15218);
    CHECK(p.kv_tokens == 15218 * 16);
    CHECK(p.max_sequences == 59);
    const CapacityPlan p16 = plan("7b", 1, 80 * kGiB);
    CHECK(p16.kv_dtype_bytes == 2);  // kv_dtype_bytes 0 means "as the weights"
    CHECK(p16.kv_blocks == 7609);
    CHECK(p16.max_sequences == 29);
    CHECK(plan("7b", 1, 80 * kGiB, 0, 4).kv_dtype_bytes == 4);
    // GQA: 70B at TP 8 keeps one KV head per GPU; fp8 halves that too.
    r.tp = 8;
    CHECK(llama2::plan_capacity(llama2::preset_config("70b"), r).kv_bytes_per_token ==
          2 * 80 * 1 * 128 * 1);
  }

  TEST_CASE("an fp8 KV cache can make a full sequence fit") {
    // 7B on 16 GiB: free = 16 GiB - 2 GiB reserve - 13476831232 = 1555554304 B, less than an fp16
    // sequence (2 GiB) but more than an fp8 one (1 GiB): 1555554304 / 4194304 = 370 blocks.
    CapacityRequest r;
    r.gpu_mem_bytes = 16 * kGiB;
    const CapacityPlan p16 = llama2::plan_capacity(llama2::preset_config("7b"), r);
    CHECK_FALSE(p16.fits);
    CHECK(p16.shortfall_bytes == 2147483648ll - 1555554304ll);
    r.kv_dtype_bytes = 1;
    const CapacityPlan p8 = llama2::plan_capacity(llama2::preset_config("7b"), r);
    CHECK(p8.fits);
    CHECK(p8.free_bytes_for_kv == 1555554304ll);
    CHECK(p8.kv_blocks == 370);
    CHECK(p8.max_sequences == 1);
    CHECK(p8.smallest_fitting_tp == 1);  // the degree search plans with the fp8 cache too
  }

  TEST_CASE("13B weights and KV per GPU at TP 1/2/4/8, uneven split at TP 5") {
    CHECK(plan("13b", 1, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (32000ull * 5120 * 2 + 40ull * (4ull * 5120 * 5120 + 3ull * 5120 * 13824 + 2 * 5120) +
               5120));
    CHECK(plan("13b", 2, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (16000ull * 5120 * 2 + 40ull * (4ull * 2560 * 5120 + 3ull * 5120 * 6912 + 2 * 5120) +
               5120));
    CHECK(plan("13b", 4, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (8000ull * 5120 * 2 + 40ull * (4ull * 1280 * 5120 + 3ull * 5120 * 3456 + 2 * 5120) +
               5120));
    CHECK(plan("13b", 8, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (4000ull * 5120 * 2 + 40ull * (4ull * 640 * 5120 + 3ull * 5120 * 1728 + 2 * 5120) +
               5120));
    // 13824 / 5 = 2764 rem 4: ranks 0-3 get 2765 FFN columns, rank 4 gets 2764; the largest counts.
    CHECK(plan("13b", 5, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (6400ull * 5120 * 2 + 40ull * (4ull * 1024 * 5120 + 3ull * 5120 * 2765 + 2 * 5120) +
               5120));
    const ModelConfig c13 = llama2::preset_config("13b");
    CHECK(llama2::shard_weight_bytes(c13, llama2::make_shard_plan(c13, 5, 4), 2) ==
          2 * (6400ull * 5120 * 2 + 40ull * (4ull * 1024 * 5120 + 3ull * 5120 * 2764 + 2 * 5120) +
               5120));
    CHECK(plan("13b", 1, 80 * kGiB).kv_bytes_per_token == 2 * 40 * 40 * 128 * 2);  // 819200
    CHECK(plan("13b", 2, 80 * kGiB).kv_bytes_per_token == 2 * 40 * 20 * 128 * 2);
    CHECK(plan("13b", 4, 80 * kGiB).kv_bytes_per_token == 2 * 40 * 10 * 128 * 2);
    CHECK(plan("13b", 8, 80 * kGiB).kv_bytes_per_token == 2 * 40 * 5 * 128 * 2);
  }

  TEST_CASE("13B fp16 does not fit one 24GiB GPU") {
    const CapacityPlan p = plan("13b", 1, 24 * kGiB, 2048);
    CHECK(p.tp_valid);
    CHECK_FALSE(p.fits);
    // 26.0 GB of weights alone exceed 24 GiB - 2.4 GiB reserve: nothing is left for the cache.
    CHECK(p.free_bytes_for_kv < 0);
    CHECK(p.kv_blocks == 0);
    CHECK(p.max_sequences == 0);
    const int64_t weights = 2 * (32000ll * 5120 * 2 +
                                 40ll * (4ll * 5120 * 5120 + 3ll * 5120 * 13824 + 2 * 5120) + 5120);
    const int64_t reserve = 24 * static_cast<int64_t>(kGiB) / 10;
    CHECK(p.shortfall_bytes ==
          weights + reserve + 819200ll * 2048 - 24 * static_cast<int64_t>(kGiB));
    CHECK(p.smallest_fitting_tp == 2);
  }

  TEST_CASE("13B fp16 at TP 2 with 24GiB per GPU fits 2048-token sequences") {
    const CapacityPlan p = plan("13b", 2, 24 * kGiB, 2048);
    const int64_t weights =
        2 * (16000ll * 5120 * 2 + 40ll * (4ll * 2560 * 5120 + 3ll * 5120 * 6912 + 2 * 5120) + 5120);
    const int64_t reserve = 24 * static_cast<int64_t>(kGiB) / 10;  // 2.4 GiB > 2 GiB floor
    const int64_t free = 24 * static_cast<int64_t>(kGiB) - reserve - weights;
    const int64_t block = 409600ll * 16;
    CHECK(p.reserve_bytes == static_cast<uint64_t>(reserve));
    CHECK(p.heads_per_gpu == 20);
    CHECK(p.kv_heads_per_gpu == 20);
    CHECK_FALSE(p.kv_replicated);
    CHECK(p.kv_bytes_per_token == 409600);
    CHECK(p.kv_bytes_per_sequence == 409600ull * 2048);  // 800 MiB
    CHECK(p.free_bytes_for_kv == free);
    CHECK(p.kv_blocks == free / block);
    CHECK(p.max_sequences == free / block / (2048 / 16));
    CHECK(p.max_sequences >= 1);
    CHECK(p.fits);
    CHECK(p.shortfall_bytes == 0);
    CHECK(p.smallest_fitting_tp == 2);
  }

  TEST_CASE("13B cannot use TP 3; the reason names its 40 heads") {
    const CapacityPlan p = plan("13b", 3, 80 * kGiB);
    CHECK_FALSE(p.tp_valid);
    CHECK_FALSE(p.fits);
    CHECK(p.tp_invalid_reason.find("40") != std::string::npos);
    CHECK(p.weight_bytes_per_gpu == 0);
    CHECK(p.valid_tp_degrees == std::vector<int>{1, 2, 4, 5, 8, 10, 20, 40});
    REQUIRE(p.invalid_tp.size() == 3);  // 3, 6, 7 of 1..8
    CHECK(p.invalid_tp[0].tp == 3);
    CHECK(p.invalid_tp[1].tp == 6);
    CHECK(p.invalid_tp[2].tp == 7);
    CHECK(p.invalid_tp[0].reason.find("40") != std::string::npos);
    // The requested degree is explained even beyond 8.
    const CapacityPlan p12 = plan("13b", 12, 80 * kGiB);
    CHECK(p12.invalid_tp.back().tp == 12);
  }

  TEST_CASE("70B weights and KV per GPU at TP 1/2/4/8/16 (GQA, 8 KV heads)") {
    // q/o: [64/tp heads * 128, 8192]; k/v: [8/tp kv heads * 128, 8192] (1 head when tp > 8).
    CHECK(plan("70b", 1, 1024 * kGiB).weight_bytes_per_gpu ==
          2 * (32000ull * 8192 * 2 +
               80ull * (2ull * 8192 * 8192 + 2ull * 1024 * 8192 + 3ull * 8192 * 28672 + 2 * 8192) +
               8192));
    CHECK(plan("70b", 2, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (16000ull * 8192 * 2 +
               80ull * (2ull * 4096 * 8192 + 2ull * 512 * 8192 + 3ull * 8192 * 14336 + 2 * 8192) +
               8192));
    CHECK(plan("70b", 4, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (8000ull * 8192 * 2 +
               80ull * (2ull * 2048 * 8192 + 2ull * 256 * 8192 + 3ull * 8192 * 7168 + 2 * 8192) +
               8192));
    CHECK(plan("70b", 8, 80 * kGiB).weight_bytes_per_gpu ==
          2 * (4000ull * 8192 * 2 +
               80ull * (2ull * 1024 * 8192 + 2ull * 128 * 8192 + 3ull * 8192 * 3584 + 2 * 8192) +
               8192));
    CHECK(plan("70b", 1, 80 * kGiB).kv_bytes_per_token == 2 * 80 * 8 * 128 * 2);  // 327680
    CHECK(plan("70b", 2, 80 * kGiB).kv_bytes_per_token == 2 * 80 * 4 * 128 * 2);
    CHECK(plan("70b", 4, 80 * kGiB).kv_bytes_per_token == 2 * 80 * 2 * 128 * 2);
    CHECK(plan("70b", 8, 80 * kGiB).kv_bytes_per_token == 2 * 80 * 1 * 128 * 2);
    CHECK_FALSE(plan("70b", 1, 80 * kGiB).fits);  // 138 GB of weights
    CHECK(plan("70b", 1, 80 * kGiB).smallest_fitting_tp == 2);
    CHECK(plan("70b", 2, 80 * kGiB).fits);
  }

  TEST_CASE("70B at TP 16 replicates KV heads") {
    const CapacityPlan p = plan("70b", 16, 80 * kGiB);
    CHECK(p.tp_valid);
    CHECK(p.kv_replicated);
    CHECK(p.heads_per_gpu == 4);
    CHECK(p.kv_heads_per_gpu == 1);
    // Replication: the KV bytes per GPU stop shrinking past tp = 8.
    CHECK(p.kv_bytes_per_token == 2 * 80 * 1 * 128 * 2);
    CHECK(p.weight_bytes_per_gpu ==
          2 * (2000ull * 8192 * 2 +
               80ull * (2ull * 512 * 8192 + 2ull * 128 * 8192 + 3ull * 8192 * 1792 + 2 * 8192) +
               8192));
    CHECK_FALSE(plan("70b", 8, 80 * kGiB).kv_replicated);
  }

  TEST_CASE("per-rank weight bytes equal the loader's slices on every rank") {
    for (const char* name : {"7b", "13b", "70b"}) {
      const ModelConfig c = llama2::preset_config(name);
      for (int tp : llama2::valid_tp_degrees(c, 16)) {
        uint64_t most = 0;
        for (int r = 0; r < tp; ++r) {
          const uint64_t elems = loader_elems(c, tp, r);
          CAPTURE(name);
          CAPTURE(tp);
          CAPTURE(r);
          CHECK(llama2::shard_weight_bytes(c, llama2::make_shard_plan(c, tp, r), 2) == elems * 2);
          most = std::max(most, elems * 2);
        }
        CHECK(llama2::max_shard_weight_bytes(c, tp, 2) == most);
      }
    }
  }

  TEST_CASE("quantized projections: 1 byte per weight and a 4-byte scale per output row") {
    using llama2::LayerTensor;
    for (const char* name : {"7b", "70b"}) {
      const ModelConfig c = llama2::preset_config(name);
      for (int tp : {1, 2, 8}) {
        for (int r = 0; r < tp; ++r) {
          const llama2::ShardPlan s = llama2::make_shard_plan(c, tp, r);
          // From the loader's slices: projections at 1 byte plus one fp32 per slice row (o and
          // down are [H, local] slices: H rows), everything else at 2 bytes.
          uint64_t want = 2 * (loader_elems(c, tp, r));
          for (int l = 0; l < c.num_layers; ++l) {
            for (LayerTensor t :
                 {LayerTensor::kWq, LayerTensor::kWk, LayerTensor::kWv, LayerTensor::kWo,
                  LayerTensor::kWgate, LayerTensor::kWup, LayerTensor::kWdown}) {
              const llama2::TensorSlice sl = llama2::layer_slice(c, s, l, t);
              want -= sl.numel();  // 2 bytes counted above, 1 kept
              want += 4 * static_cast<uint64_t>(sl.row_end - sl.row_begin);
            }
          }
          CAPTURE(name);
          CAPTURE(tp);
          CHECK(llama2::shard_weight_bytes(c, s, 2, 1) == want);
        }
      }
    }
  }

  TEST_CASE(
      "4-bit projections: half a byte per weight and a (scale, bias) pair per group and row") {
    using llama2::LayerTensor;
    for (const char* name : {"7b", "70b"}) {
      const ModelConfig c = llama2::preset_config(name);  // --weight-dtype int4: groups of 128
      for (int tp : {1, 2, 8}) {
        for (int r = 0; r < tp; ++r) {
          const llama2::ShardPlan s = llama2::make_shard_plan(c, tp, r);
          uint64_t want = 2 * (loader_elems(c, tp, r));
          for (int l = 0; l < c.num_layers; ++l) {
            for (LayerTensor t :
                 {LayerTensor::kWq, LayerTensor::kWk, LayerTensor::kWv, LayerTensor::kWo,
                  LayerTensor::kWgate, LayerTensor::kWup, LayerTensor::kWdown}) {
              const llama2::TensorSlice sl = llama2::layer_slice(c, s, l, t);
              const uint64_t rows = static_cast<uint64_t>(sl.row_end - sl.row_begin);
              const uint64_t cols = static_cast<uint64_t>(sl.col_end - sl.col_begin);
              want -= 2 * sl.numel();
              want += rows * cols / 2 + (cols + 127) / 128 * rows * 4;
            }
          }
          CAPTURE(name);
          CAPTURE(tp);
          CHECK(llama2::shard_weight_bytes(c, s, 2, llama2::kInt4LinearBytes) == want);
        }
      }
    }
  }

  TEST_CASE("70B with 4-bit projections fits one 48 GiB card and one 80 GiB card") {
    const ModelConfig c = llama2::preset_config("70b");
    llama2::CapacityRequest req;
    req.linear_bytes = llama2::kInt4LinearBytes;
    for (const uint64_t gib : {48, 80}) {
      CAPTURE(gib);
      req.gpu_mem_bytes = gib * kGiB;
      const llama2::CapacityPlan p = llama2::plan_capacity(c, req);
      CHECK(p.fits);
      // At least one full-length (4096-token) sequence; 80 GiB: more than ten.
      CHECK(p.max_sequences >= (gib == 48 ? 1 : 10));
    }
    req.gpu_mem_bytes = 48 * kGiB;
    req.linear_bytes = 1;  // 8-bit projections (~65 GiB) do not fit
    CHECK_FALSE(llama2::plan_capacity(c, req).fits);
  }

  TEST_CASE("13B fits one 24 GiB card with 1-byte projections, not in fp16") {
    const ModelConfig c = llama2::preset_config("13b");
    llama2::CapacityRequest req;
    req.gpu_mem_bytes = 24 * kGiB;
    CHECK_FALSE(llama2::plan_capacity(c, req).fits);
    req.linear_bytes = 1;
    const llama2::CapacityPlan p = llama2::plan_capacity(c, req);
    CHECK(p.fits);
    CHECK(p.max_sequences >= 1);
    req.dtype_bytes = 4;  // quantizing an fp32 model is refused, naming the flag
    CHECK_THROWS_WITH_AS(llama2::plan_capacity(c, req), doctest::Contains("--weight-dtype"),
                         llama2::Error);
  }

  TEST_CASE("tied embeddings count once (tests/models/tiny-tied)") {
    const ModelConfig c = llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-tied");
    REQUIRE(c.tie_word_embeddings);
    // H 48, 4 heads of 12, I 130, vocab 389, 2 layers. TP 4: rank 0 gets 130 = 4*32+2 -> 33 FFN
    // columns and 389 = 4*97+1 -> 98 vocab rows; one [98, 48] table serves embedding and LM head.
    CHECK(llama2::max_shard_weight_bytes(c, 4, 4) ==
          4 * (2 * (4 * 12 * 48 + 3 * 33 * 48 + 2 * 48) + 98 * 48 + 48));
    for (int r = 0; r < 4; ++r) {
      CHECK(llama2::shard_weight_bytes(c, llama2::make_shard_plan(c, 4, r), 4) ==
            loader_elems(c, 4, r) * 4);
    }
  }

  TEST_CASE("default reserve: max(2 GiB, 10% of GPU memory)") {
    CHECK(llama2::default_reserve_bytes(16 * kGiB) == 2 * kGiB);
    CHECK(llama2::default_reserve_bytes(20 * kGiB) == 2 * kGiB);
    CHECK(llama2::default_reserve_bytes(80 * kGiB) == 8 * kGiB);
    CHECK(llama2::default_reserve_bytes(141000000000ull) == 14100000000ull);
    CapacityRequest r;
    r.reserve_bytes = 0;  // an explicit 0 is honoured, not mistaken for "default"
    const CapacityPlan p = llama2::plan_capacity(llama2::preset_config("7b"), r);
    CHECK(p.reserve_bytes == 0);
    CHECK_FALSE(p.reserve_is_default);
  }

  TEST_CASE("kv_blocks_that_fit") {
    CHECK(llama2::kv_blocks_that_fit(-5, 100) == 0);
    CHECK(llama2::kv_blocks_that_fit(0, 100) == 0);
    CHECK(llama2::kv_blocks_that_fit(99, 100) == 0);
    CHECK(llama2::kv_blocks_that_fit(250, 100) == 2);
  }

  TEST_CASE("a partial last block still costs a whole block") {
    CapacityRequest r;
    r.max_seq_len = 100;  // 100 / 16 = 6.25 -> 7 blocks
    const CapacityPlan p = llama2::plan_capacity(llama2::preset_config("7b"), r);
    CHECK(p.blocks_per_sequence == 7);
    CHECK(p.kv_bytes_per_sequence == 7ull * 16 * 524288);
  }

  TEST_CASE("plan_capacity rejects bad values, naming the flag") {
    const ModelConfig c = llama2::preset_config("7b");
    auto message = [&](const CapacityRequest& r) {
      try {
        llama2::plan_capacity(c, r);
      } catch (const llama2::Error& e) {
        return std::string(e.what());
      }
      return std::string("(no error)");
    };
    CapacityRequest r;
    r.tp = 0;
    CHECK(message(r).find("--tp") != std::string::npos);
    CHECK(message(r).find("1, 2, 4, 8") != std::string::npos);
    r = CapacityRequest{};
    r.block_size = 0;
    CHECK(message(r).find("--block-size") != std::string::npos);
    r = CapacityRequest{};
    r.max_seq_len = 0;
    CHECK(message(r).find("--max-seq-len") != std::string::npos);
    r.max_seq_len = 4097;
    CHECK(message(r).find("[1, 4096]") != std::string::npos);
    r = CapacityRequest{};
    r.dtype_bytes = 3;
    CHECK(message(r).find("--dtype") != std::string::npos);
    r = CapacityRequest{};
    r.gpu_mem_bytes = 0;
    CHECK(message(r).find("--gpu-mem") != std::string::npos);
    r = CapacityRequest{};
    r.dtype_bytes = 4;
    r.kv_dtype_bytes = 1;  // fp8 KV cache with fp32 weights
    CHECK(message(r).find("--kv-cache-dtype") != std::string::npos);
    CHECK(message(r).find("fp16/bf16 weights only") != std::string::npos);
    r.kv_dtype_bytes = 2;  // neither the weights' size nor fp8
    CHECK(message(r).find("--kv-cache-dtype") != std::string::npos);
    r = CapacityRequest{};
    r.kv_dtype_bytes = 3;
    CHECK(message(r).find("auto") != std::string::npos);
    // A positive but invalid degree is a planning result, not an error.
    r = CapacityRequest{};
    r.tp = 3;
    CHECK_FALSE(llama2::plan_capacity(c, r).tp_valid);
  }

  TEST_CASE("preset and dtype names") {
    CHECK(llama2::preset_config("13b").hidden_size == 5120);
    CHECK_THROWS_WITH_AS(llama2::preset_config("34b"), doctest::Contains("allowed: 7b, 13b, 70b"),
                         llama2::Error);
    CHECK_THROWS_AS(llama2::preset_config("7B"), llama2::Error);  // names are exact
    CHECK_THROWS_AS(llama2::preset_config(""), llama2::Error);
    CHECK(llama2::dtype_bytes_of("fp16") == 2);
    CHECK(llama2::dtype_bytes_of("bf16") == 2);
    CHECK(llama2::dtype_bytes_of("bfloat16") == 2);
    CHECK(llama2::dtype_bytes_of("fp32") == 4);
    CHECK_THROWS_WITH_AS(llama2::dtype_bytes_of("int8"),
                         doctest::Contains("allowed: fp16, bf16, fp32"), llama2::Error);
  }

  TEST_CASE("KV-cache dtype names") {
    using llama2::kv_dtype_bytes_of;
    CHECK(kv_dtype_bytes_of("auto", 2) == 2);
    CHECK(kv_dtype_bytes_of("auto", 4) == 4);
    CHECK(kv_dtype_bytes_of("fp8", 2) == 1);
    CHECK(kv_dtype_bytes_of("fp8_e4m3", 2) == 1);
    CHECK_THROWS_WITH_AS(kv_dtype_bytes_of("fp8", 4), doctest::Contains("fp16 or bf16 weights"),
                         llama2::Error);
    CHECK_THROWS_WITH_AS(kv_dtype_bytes_of("fp8_e4m3", 4), doctest::Contains("--kv-cache-dtype"),
                         llama2::Error);
    for (const char* bad : {"int8", "FP8", "fp8_e5m2", "fp16", "", "auto "}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(kv_dtype_bytes_of(bad, 2),
                           doctest::Contains("allowed: auto, fp8, fp8_e4m3"), llama2::Error);
    }
  }

  TEST_CASE("parse_bytes") {
    using llama2::parse_bytes;
    CHECK(parse_bytes("24GiB") == 24ull * 1024 * 1024 * 1024);
    CHECK(parse_bytes("80GiB") == 80ull * 1024 * 1024 * 1024);
    CHECK(parse_bytes("141GB") == 141ull * 1000 * 1000 * 1000);
    CHECK(parse_bytes("512MiB") == 512ull * 1024 * 1024);
    CHECK(parse_bytes("1.5TiB") == 1536ull * 1024 * 1024 * 1024);
    CHECK(parse_bytes("4096") == 4096);
    CHECK(parse_bytes("4096B") == 4096);
    CHECK(parse_bytes("0") == 0);
    CHECK(parse_bytes("2kB") == 2000);
    CHECK(parse_bytes("2KiB") == 2048);
    CHECK(parse_bytes("24gib") == 24ull * 1024 * 1024 * 1024);  // suffixes are case-insensitive
    CHECK(parse_bytes("0.5GiB") == 512ull * 1024 * 1024);
    CHECK(parse_bytes("1.50GB") == 1500000000ull);  // trailing zeros are not places
    CHECK(parse_bytes("0.1KiB") == 102);            // 102.4 bytes: fraction dropped
    CHECK(parse_bytes("18446744073709551615") == 18446744073709551615ull);
    for (const char* bad :
         {"", "GiB", "24 GiB", "-1GiB", "24G", "24GiBs", "1.5", "1.5B", "1.GiB", ".5GiB",
          "1.2345678GiB", "18446744073709551616", "16777216TiB", "abc", "24GiB "}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(parse_bytes(bad), llama2::Error);
    }
    CHECK_THROWS_WITH_AS(parse_bytes("24G"), doctest::Contains("GiB"), llama2::Error);
    CHECK_THROWS_WITH_AS(parse_bytes("24G"), doctest::Contains("GB"), llama2::Error);
  }

  TEST_CASE("format_bytes") {
    CHECK(llama2::format_bytes(0) == "0 B");
    CHECK(llama2::format_bytes(1023) == "1023 B");
    CHECK(llama2::format_bytes(1024) == "1.00 KiB");
    CHECK(llama2::format_bytes(3 * static_cast<int64_t>(kGiB) / 2) == "1.50 GiB");
    CHECK(llama2::format_bytes(-7 * static_cast<int64_t>(kGiB) / 2) == "-3.50 GiB");
    CHECK(llama2::format_bytes(2 * static_cast<int64_t>(llama2::kTiB)) == "2.00 TiB");
  }
}
