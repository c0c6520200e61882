// Tensor-parallel shard plans (src/common/shard_plan.{h,cpp}).
// Valid degrees are the hand-listed divisors for the published Llama-2 shapes; the GQA mapping
// is recomputed here from its definition (KV head of query head g = g / (heads / kv_heads)), and
// partition properties (each head / column / row owned exactly once) are checked by counting.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "test_util.h"

using llama2::ModelConfig;
using llama2::ShardPlan;

namespace {
using llama2::test::contains;

ModelConfig config(int heads, int kv_heads, int head_dim, int intermediate, int vocab) {
  ModelConfig c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.hidden_size = heads * head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.num_layers = 2;
  c.max_position_embeddings = 4096;
  return c;
}

ModelConfig llama2_7b() {
  return config(32, 32, 128, 11008, 32000);
}
ModelConfig llama2_13b() {
  return config(40, 40, 128, 13824, 32000);
}
ModelConfig llama2_70b() {
  return config(64, 8, 128, 28672, 32000);
}
ModelConfig tiny() {
  return config(8, 2, 6, 389, 1001);
}

std::string shard_error(const ModelConfig& c, int tp) {
  try {
    llama2::make_shard_plan(c, tp, 0);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

// [begin, begin+size) over every rank covers [0, n) exactly once, ranks in order, sizes within 1.
void check_partition(const std::vector<std::pair<int, int>>& ranges, int n) {
  std::vector<int> owners(n, 0);
  int expected_begin = 0, min_size = n, max_size = 0, out_of_range = 0;
  for (const auto& [begin, size] : ranges) {
    CHECK(begin == expected_begin);
    CHECK(size >= 0);
    for (int i = begin; i < begin + size; ++i) {
      if (i < 0 || i >= n) {
        ++out_of_range;
      } else {
        ++owners[i];
      }
    }
    expected_begin = begin + size;
    min_size = std::min(min_size, size);
    max_size = std::max(max_size, size);
  }
  CHECK(out_of_range == 0);
  CHECK(expected_begin == n);
  CHECK(std::count(owners.begin(), owners.end(), 1) == n);
  CHECK(max_size - min_size <= 1);
}

}  // namespace

TEST_SUITE("shard_plan") {
  TEST_CASE("valid_tp_degrees for the Llama-2 family") {
    CHECK(llama2::valid_tp_degrees(llama2_7b()) == std::vector<int>{1, 2, 4, 8, 16, 32});
    CHECK(llama2::valid_tp_degrees(llama2_13b()) == std::vector<int>{1, 2, 4, 5, 8, 10, 20, 40});
    CHECK(llama2::valid_tp_degrees(llama2_70b()) == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
    CHECK(llama2::valid_tp_degrees(tiny()) == std::vector<int>{1, 2, 4, 8});
    // max_tp caps the list.
    CHECK(llama2::valid_tp_degrees(llama2_70b(), 8) == std::vector<int>{1, 2, 4, 8});
    // 12 heads, 4 kv: 3 and 6 divide the heads but neither divide nor are multiples of 4.
    CHECK(llama2::valid_tp_degrees(config(12, 4, 10, 100, 100)) == std::vector<int>{1, 2, 4, 12});
    // MQA: every divisor of the heads is valid.
    CHECK(llama2::valid_tp_degrees(config(6, 1, 10, 100, 100)) == std::vector<int>{1, 2, 3, 6});
  }

  TEST_CASE("valid degrees are limited by intermediate and vocab sizes") {
    CHECK(llama2::valid_tp_degrees(config(8, 8, 4, 3, 1000)) == std::vector<int>{1, 2});
    CHECK(llama2::valid_tp_degrees(config(8, 8, 4, 1000, 4)) == std::vector<int>{1, 2, 4});
  }

  TEST_CASE("make_shard_plan errors name the reason and list the valid degrees") {
    SUBCASE("heads not divisible") {
      const std::string msg = shard_error(llama2_7b(), 3);
      CAPTURE(msg);
      CHECK(contains(msg, "3 ranks"));
      CHECK(contains(msg, "num_attention_heads (32)"));
      CHECK(contains(msg, "1, 2, 4, 8, 16, 32"));
    }
    SUBCASE("13B with 16 ranks") {
      const std::string msg = shard_error(llama2_13b(), 16);
      CAPTURE(msg);
      CHECK(contains(msg, "num_attention_heads (40)"));
      CHECK(contains(msg, "1, 2, 4, 5, 8, 10, 20, 40"));
    }
    SUBCASE("kv heads neither divide nor are divisible") {
      const std::string msg = shard_error(config(12, 4, 10, 100, 100), 6);
      CAPTURE(msg);
      CHECK(contains(msg, "num_key_value_heads (4)"));
      CHECK(contains(msg, "1, 2, 4, 12"));
    }
    SUBCASE("intermediate too small") {
      const std::string msg = shard_error(config(8, 8, 4, 3, 1000), 4);
      CHECK(contains(msg, "intermediate_size"));
      CHECK(contains(msg, "1, 2"));
    }
    SUBCASE("vocab too small") {
      CHECK(contains(shard_error(config(8, 8, 4, 100, 3), 4), "vocab_size"));
    }
    SUBCASE("zero and negative degrees") {
      CHECK(contains(shard_error(tiny(), 0), ">= 1"));
      CHECK(contains(shard_error(tiny(), -2), ">= 1"));
      CHECK(contains(shard_error(tiny(), 0), "1, 2, 4, 8"));
    }
    SUBCASE("more ranks than heads") {
      CHECK(contains(shard_error(tiny(), 16), "1, 2, 4, 8"));
    }
  }

  TEST_CASE("rank outside the group is an Error") {
    CHECK_THROWS_AS(llama2::make_shard_plan(tiny(), 4, 4), llama2::Error);
    CHECK_THROWS_AS(llama2::make_shard_plan(tiny(), 4, -1), llama2::Error);
  }

  TEST_CASE("hand-worked plans") {
    SUBCASE("70B, tp 16, rank 5: heads [20,24), kv head 2") {
      const ShardPlan s = llama2::make_shard_plan(llama2_70b(), 16, 5);
      CHECK(s.tp == 16);
      CHECK(s.rank == 5);
      CHECK(s.head_begin == 20);
      CHECK(s.num_heads == 4);
      CHECK(s.kv_head_begin == 2);  // 20 / (64/8)
      CHECK(s.num_kv_heads == 1);
      CHECK(s.head_dim == 128);
      CHECK(s.total_kv_heads == 8);
      CHECK(s.num_kv_heads_total() == 8);
      for (int h = 0; h < 4; ++h) CHECK(s.kv_head_for(h) == 0);
      CHECK(s.ffn_begin == 5 * 1792);
      CHECK(s.ffn_size == 1792);
      CHECK(s.vocab_begin == 5 * 2000);
      CHECK(s.vocab_size == 2000);
    }
    SUBCASE("70B, tp 4, rank 1: heads [16,32), kv heads [2,4)") {
      const ShardPlan s = llama2::make_shard_plan(llama2_70b(), 4, 1);
      CHECK(s.head_begin == 16);
      CHECK(s.num_heads == 16);
      CHECK(s.kv_head_begin == 2);
      CHECK(s.num_kv_heads == 2);
      CHECK(s.kv_head_for(0) == 0);  // global head 16 -> kv 2 -> local 0
      CHECK(s.kv_head_for(7) == 0);  // 23 -> 2
      CHECK(s.kv_head_for(8) == 1);  // 24 -> 3
      CHECK(s.kv_head_for(15) == 1);
    }
    SUBCASE("tiny (8 heads, 2 kv), tp 8, rank 5: kv head 1 replicated") {
      const ShardPlan s = llama2::make_shard_plan(tiny(), 8, 5);
      CHECK(s.head_begin == 5);
      CHECK(s.num_heads == 1);
      CHECK(s.kv_head_begin == 1);
      CHECK(s.num_kv_heads == 1);
      CHECK(s.kv_head_for(0) == 0);
      CHECK(s.head_dim == 6);
    }
    SUBCASE("ffn 389 over 4: 98, 97, 97, 97") {
      const int begins[] = {0, 98, 195, 292};
      const int sizes[] = {98, 97, 97, 97};
      for (int r = 0; r < 4; ++r) {
        const ShardPlan s = llama2::make_shard_plan(tiny(), 4, r);
        CHECK(s.ffn_begin == begins[r]);
        CHECK(s.ffn_size == sizes[r]);
      }
    }
    SUBCASE("vocab 1001 over 8: one rank gets 126, seven get 125") {
      const ShardPlan s0 = llama2::make_shard_plan(tiny(), 8, 0);
      const ShardPlan s1 = llama2::make_shard_plan(tiny(), 8, 1);
      const ShardPlan s7 = llama2::make_shard_plan(tiny(), 8, 7);
      CHECK(s0.vocab_begin == 0);
      CHECK(s0.vocab_size == 126);
      CHECK(s1.vocab_begin == 126);
      CHECK(s1.vocab_size == 125);
      CHECK(s7.vocab_begin == 876);
      CHECK(s7.vocab_size == 125);
    }
  }

  TEST_CASE("partition and GQA properties over many shapes") {
    struct Case {
      int heads, kv, tp, head_dim, intermediate, vocab;
    };
    const Case cases[] = {
        {32, 32, 4, 128, 11008, 32000},  // 7B
        {40, 40, 5, 128, 13824, 32000},  // 13B, odd degree
        {40, 40, 40, 4, 389, 1001},
        {64, 8, 2, 8, 389, 1001},   // 70B-like GQA, kv > tp
        {64, 8, 8, 8, 389, 1001},   // kv == tp
        {64, 8, 32, 8, 389, 1001},  // kv < tp: each KV head replicated 4x
        {8, 2, 4, 6, 389, 1001},    // tiny, replicated 2x
        {8, 2, 8, 6, 389, 1001},
        {12, 4, 12, 10, 37, 19},    // 12 heads on 12 ranks, KV 3x replicated, tiny vocab
        {24, 4, 8, 6, 389, 1001},   // 3 heads per rank, groups of 6 span ranks
        {16, 1, 4, 10, 389, 1001},  // MQA
        {6, 1, 3, 10, 100, 7},      // MQA, odd degree
        {6, 1, 1, 10, 100, 7},      // single rank
        {6, 6, 6, 10, 7, 6},        // one head and one vocab row per rank
    };
    for (const Case& k : cases) {
      CAPTURE(k.heads);
      CAPTURE(k.kv);
      CAPTURE(k.tp);
      const ModelConfig c = config(k.heads, k.kv, k.head_dim, k.intermediate, k.vocab);
      const int group = k.heads / k.kv;  // query heads per KV head
      std::vector<int> head_owners(k.heads, 0), kv_holders(k.kv, 0);
      std::vector<std::pair<int, int>> heads, ffn, vocab;
      for (int r = 0; r < k.tp; ++r) {
        CAPTURE(r);
        const ShardPlan s = llama2::make_shard_plan(c, k.tp, r);
        CHECK(s.tp == k.tp);
        CHECK(s.rank == r);
        CHECK(s.head_dim == k.head_dim);
        CHECK(s.total_kv_heads == k.kv);
        CHECK(s.num_heads >= 1);
        CHECK(s.num_kv_heads >= 1);
        REQUIRE(s.kv_head_begin >= 0);
        REQUIRE(s.kv_head_begin + s.num_kv_heads <= k.kv);
        heads.push_back({s.head_begin, s.num_heads});
        ffn.push_back({s.ffn_begin, s.ffn_size});
        vocab.push_back({s.vocab_begin, s.vocab_size});
        for (int h = 0; h < s.num_heads; ++h) ++head_owners[s.head_begin + h];
        for (int g = 0; g < s.num_kv_heads; ++g) ++kv_holders[s.kv_head_begin + g];
        std::vector<int> used(s.num_kv_heads, 0);
        for (int l = 0; l < s.num_heads; ++l) {
          const int global_head = s.head_begin + l;
          const int global_kv = global_head / group;
          CAPTURE(l);
          CHECK(s.kv_head_for(l) == global_kv - s.kv_head_begin);
          // The KV head each query head reads is one this rank stores.
          REQUIRE(global_kv >= s.kv_head_begin);
          REQUIRE(global_kv < s.kv_head_begin + s.num_kv_heads);
          ++used[global_kv - s.kv_head_begin];
        }
        // Every stored KV head is read by some local query head (nothing stored in vain).
        CHECK(std::count(used.begin(), used.end(), 0) == 0);
      }
      CHECK(std::count(head_owners.begin(), head_owners.end(), 1) == k.heads);
      // KV heads: split when kv >= tp, otherwise each stored by exactly tp / kv ranks.
      const int copies = k.kv >= k.tp ? 1 : k.tp / k.kv;
      CHECK(std::count(kv_holders.begin(), kv_holders.end(), copies) == k.kv);
      check_partition(heads, k.heads);
      check_partition(ffn, k.intermediate);
      check_partition(vocab, k.vocab);
    }
  }

  TEST_CASE("split_range") {
    int b = -1, s = -1;
    llama2::split_range(389, 4, 3, &b, &s);
    CHECK(b == 292);
    CHECK(s == 97);
    llama2::split_range(10, 1, 0, &b, &s);
    CHECK(b == 0);
    CHECK(s == 10);
    // More parts than items: the tail parts are empty and start at n.
    llama2::split_range(3, 5, 2, &b, &s);
    CHECK(b == 2);
    CHECK(s == 1);
    llama2::split_range(3, 5, 4, &b, &s);
    CHECK(b == 3);
    CHECK(s == 0);
    for (int n : {0, 1, 7, 389, 1001, 32000}) {
      for (int parts : {1, 2, 3, 4, 7, 13}) {
        CAPTURE(n);
        CAPTURE(parts);
        std::vector<std::pair<int, int>> ranges;
        for (int i = 0; i < parts; ++i) {
          llama2::split_range(n, parts, i, &b, &s);
          ranges.push_back({b, s});
        }
        check_partition(ranges, n);
      }
    }
  }
}
