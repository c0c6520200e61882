// KV block bookkeeping (src/coordinator/scheduler/block_allocator.{h,cpp}). Expected table sizes
// are ceil(positions / block_size) worked out by hand; the random test keeps its own model of who
// owns which block and checks the allocator against it after every operation.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/check.h"
#include "coordinator/scheduler/block_allocator.h"

using llama2::BlockAllocator;

TEST_SUITE("block_allocator") {
  TEST_CASE("blocks_for rounds up") {
    CHECK(BlockAllocator::blocks_for(0, 16) == 0);
    CHECK(BlockAllocator::blocks_for(1, 16) == 1);
    CHECK(BlockAllocator::blocks_for(16, 16) == 1);
    CHECK(BlockAllocator::blocks_for(17, 16) == 2);
    CHECK(BlockAllocator::blocks_for(33, 4) == 9);
    CHECK(BlockAllocator::blocks_for(5, 1) == 5);
    CHECK(BlockAllocator::blocks_for(1000, 7) == 143);  // 7 * 142 = 994 < 1000 <= 1001
  }

  TEST_CASE("a fresh allocator has every block free") {
    BlockAllocator a(13, 4);
    CHECK(a.num_blocks() == 13);
    CHECK(a.free_blocks() == 13);
    CHECK(a.used_blocks() == 0);
    CHECK(a.block_size() == 4);
  }

  TEST_CASE("invalid sizes are an Error") {
    CHECK_THROWS_AS(BlockAllocator(0, 4), llama2::Error);
    CHECK_THROWS_AS(BlockAllocator(4, 0), llama2::Error);
    CHECK_THROWS_AS(BlockAllocator(-1, 4), llama2::Error);
  }

  TEST_CASE("ensure grows the table by whole blocks and never shrinks it") {
    BlockAllocator a(10, 4);
    std::vector<int> t;
    CHECK(a.ensure(&t, 0));
    CHECK(t.empty());
    CHECK(a.ensure(&t, 1));
    CHECK(t.size() == 1);
    CHECK(a.ensure(&t, 4));
    CHECK(t.size() == 1);
    CHECK(a.ensure(&t, 5));
    CHECK(t.size() == 2);
    CHECK(a.ensure(&t, 13));  // 4 blocks
    CHECK(t.size() == 4);
    const std::vector<int> before = t;
    CHECK(a.ensure(&t, 2));  // smaller: unchanged
    CHECK(t == before);
    CHECK(a.used_blocks() == 4);
    CHECK(a.free_blocks() == 6);
    // Existing entries keep their ids when the table grows.
    CHECK(a.ensure(&t, 20));
    CHECK(t.size() == 5);
    CHECK(std::equal(before.begin(), before.end(), t.begin()));
    // All ids are distinct and in range.
    std::set<int> ids(t.begin(), t.end());
    CHECK(ids.size() == t.size());
    CHECK(*ids.begin() >= 0);
    CHECK(*ids.rbegin() < 10);
  }

  TEST_CASE("ensure fails without side effects when blocks run out") {
    BlockAllocator a(5, 16);
    std::vector<int> t1, t2;
    REQUIRE(a.ensure(&t1, 48));  // 3 blocks
    REQUIRE(a.ensure(&t2, 1));   // 1 block
    const std::vector<int> t2_before = t2;
    CHECK_FALSE(a.ensure(&t2, 16 * 3 + 1));  // would need 3 more, only 1 free
    CHECK(t2 == t2_before);
    CHECK(a.free_blocks() == 1);
    CHECK(a.used_blocks() == 4);
    std::vector<int> t3;
    CHECK_FALSE(a.ensure(&t3, 33));  // 3 blocks from empty
    CHECK(t3.empty());
    CHECK(a.free_blocks() == 1);
    // The one remaining block is still available afterwards.
    CHECK(a.ensure(&t2, 32));
    CHECK(t2.size() == 2);
    CHECK(a.free_blocks() == 0);
    CHECK_FALSE(a.ensure(&t3, 1));
    CHECK(t3.empty());
  }

  TEST_CASE("release returns blocks and clears the table") {
    BlockAllocator a(6, 2);
    std::vector<int> t1, t2;
    REQUIRE(a.ensure(&t1, 7));  // 4 blocks
    REQUIRE(a.ensure(&t2, 3));  // 2 blocks
    CHECK(a.free_blocks() == 0);
    const std::set<int> freed(t1.begin(), t1.end());
    a.release(&t1);
    CHECK(t1.empty());
    CHECK(a.free_blocks() == 4);
    CHECK(a.used_blocks() == 2);
    CHECK(a.num_blocks() == 6);
    // The released blocks are exactly the ones handed out next.
    std::vector<int> t3;
    REQUIRE(a.ensure(&t3, 8));
    CHECK(std::set<int>(t3.begin(), t3.end()) == freed);
    // Releasing an empty table is a no-op.
    std::vector<int> empty;
    a.release(&empty);
    CHECK(a.used_blocks() == 6);
  }

  TEST_CASE("no block is handed out twice across random ensure/release") {
    const int num_blocks = 37, block_size = 3, n_tables = 9;
    BlockAllocator a(num_blocks, block_size);
    std::vector<std::vector<int>> tables(n_tables);
    std::vector<int> positions(n_tables, 0);
    std::mt19937 rng(2024);
    int failures = 0, successes = 0, releases = 0;
    for (int step = 0; step < 20000; ++step) {
      const int i = int(rng() % n_tables);
      if (rng() % 5 == 0) {
        a.release(&tables[i]);
        positions[i] = 0;
        ++releases;
      } else {
        const int want = positions[i] + int(rng() % 8);
        const int used_before = a.used_blocks();
        const int need = std::max(0, (want + block_size - 1) / block_size - int(tables[i].size()));
        const std::vector<int> before = tables[i];
        const bool ok = a.ensure(&tables[i], want);
        CAPTURE(step);
        REQUIRE(ok == (need <= num_blocks - used_before));
        if (ok) {
          positions[i] = std::max(positions[i], want);
          REQUIRE(int(tables[i].size()) == (positions[i] + block_size - 1) / block_size);
          ++successes;
        } else {
          REQUIRE(tables[i] == before);
          REQUIRE(a.used_blocks() == used_before);
          ++failures;
        }
      }
      // Invariants: each id in range, owned by at most one table, counts agree.
      std::vector<int> owner(num_blocks, 0);
      int total = 0, out_of_range = 0;
      for (const auto& t : tables) {
        for (int b : t) {
          if (b < 0 || b >= num_blocks) {
            ++out_of_range;
          } else {
            ++owner[b];
          }
        }
        total += int(t.size());
      }
      REQUIRE(out_of_range == 0);
      REQUIRE(std::count_if(owner.begin(), owner.end(), [](int c) { return c > 1; }) == 0);
      REQUIRE(a.used_blocks() == total);
      REQUIRE(a.free_blocks() == num_blocks - total);
    }
    // The run exercised both outcomes and releases.
    CHECK(failures > 100);
    CHECK(successes > 100);
    CHECK(releases > 100);
  }
}
