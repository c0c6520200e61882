// The CPU backend's thread pool (src/rank/cpu_threads.h) and the promise the operators make on top
// of it: a row's result is bit-identical whatever the batch it is in and however many threads split
// the work (what keeps greedy output independent of batch composition on the CPU backend).
#include <doctest/doctest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <ostream>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/step_plan.h"
#include "rank/cpu_ops.h"
#include "rank/cpu_threads.h"

namespace cpu = llama2::cpu;
using llama2::ThreadPool;

namespace {

std::vector<float> randoms(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace

TEST_SUITE("cpu_threads") {
  TEST_CASE("run() calls every part exactly once, thousands of times, with any part count") {
    ThreadPool pool(3);
    REQUIRE(pool.size() == 3);
    std::vector<std::atomic<int>> calls(12);
    std::set<std::thread::id> threads_seen;
    std::mutex mu;
    for (int round = 0; round < 6000; ++round) {
      const int parts = 1 + round % 12;  // fewer, as many and more parts than threads
      pool.run(parts, [&](int p) {
        calls[p].fetch_add(1);
        if (round % 100 == 0) {
          std::lock_guard<std::mutex> lock(mu);
          threads_seen.insert(std::this_thread::get_id());
        }
      });
    }
    // Part p runs in the rounds whose part count exceeds p: 500 rounds per count.
    for (int p = 0; p < 12; ++p) {
      CAPTURE(p);
      CHECK(calls[p].load() == 500 * (12 - p));
    }
    CHECK(threads_seen.size() <= 3);
  }

  TEST_CASE("workers that fell asleep wake up for the next run; a one-thread pool runs inline") {
    ThreadPool pool(2);
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window
      std::atomic<int> sum{0};
      pool.run(2, [&](int p) { sum += p + 1; });
      CHECK(sum.load() == 3);
    }
    ThreadPool inline_pool(1);
    CHECK(inline_pool.size() == 1);
    int seen = 0;
    const std::thread::id caller = std::this_thread::get_id();
    inline_pool.run(3, [&](int p) {
      CHECK(std::this_thread::get_id() == caller);
      seen += 1 << p;
    });
    CHECK(seen == 7);
  }

  TEST_CASE("parallel_parts: inline without a pool or below the work threshold") {
    ThreadPool pool(4), single(1);
    CHECK(llama2::parallel_parts(nullptr, int64_t{1} << 30, 100) == 1);
    CHECK(llama2::parallel_parts(&single, int64_t{1} << 30, 100) == 1);
    CHECK(llama2::parallel_parts(&pool, llama2::kMinParallelWork - 1, 100) == 1);
    CHECK(llama2::parallel_parts(&pool, int64_t{1} << 30, 100) == 16);  // 4 per thread
    CHECK(llama2::parallel_parts(&pool, int64_t{1} << 30, 3) == 3);     // fewer items
    CHECK(llama2::parallel_parts(&pool, llama2::kMinParallelWork, 100) == 2);
  }

  TEST_CASE("cpu_threads_for_rank: an explicit count up to the CPUs; automatic shares them") {
    cpu_set_t set;
    REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
    const int cpus = CPU_COUNT(&set);
    CHECK(llama2::cpu_threads_for_rank(1, 2) == 1);
    CHECK(llama2::cpu_threads_for_rank(cpus, 1) == cpus);
    CHECK(llama2::cpu_threads_for_rank(cpus + 7, 1) == cpus);  // never more than the CPUs
    CHECK(llama2::cpu_threads_for_rank(0, 1) == cpus);
    CHECK(llama2::cpu_threads_for_rank(0, cpus) == 1);
    CHECK(llama2::cpu_threads_for_rank(0, 4 * cpus) == 1);  // oversubscribed: never 0
  }

  TEST_CASE("linear: each row bit-identical alone, in any batch, on any number of threads") {
    ThreadPool pool(3);
    for (int in : {5, 8, 64, 67, 172}) {
      for (int out : {1, 7, 8, 23, 344}) {
        CAPTURE(in);
        CAPTURE(out);
        const int rows = 13;  // 3 blocks of 4 rows and a single row
        const auto x = randoms(size_t(rows) * in, 1 + in), w = randoms(size_t(out) * in, 2 + out);
        std::vector<float> batch(size_t(rows) * out), threaded(batch.size()), alone(out);
        cpu::linear(x.data(), w.data(), rows, in, out, batch.data());
        cpu::linear(x.data(), w.data(), rows, in, out, threaded.data(), &pool);
        CHECK(same_bits(batch.data(), threaded.data(), batch.size()));
        for (int r = 0; r < rows; ++r) {
          cpu::linear(x.data() + size_t(r) * in, w.data(), 1, in, out, alone.data());
          CHECK(same_bits(alone.data(), batch.data() + size_t(r) * out, out));
        }
        // A large call (above the threshold) split over the pool, against the same call inline.
        const int big_rows = int(llama2::kMinParallelWork / (in * out)) + 5;
        const auto xb = randoms(size_t(big_rows) * in, 3);
        std::vector<float> one(size_t(big_rows) * out), split(one.size());
        cpu::linear(xb.data(), w.data(), big_rows, in, out, one.data());
        cpu::linear(xb.data(), w.data(), big_rows, in, out, split.data(), &pool);
        CHECK(same_bits(one.data(), split.data(), one.size()));
      }
    }
  }

  TEST_CASE("paged_attention: the same bits with and without the pool (GQA, d 8 and 16)") {
    ThreadPool pool(2);
    for (int d : {8, 16}) {
      CAPTURE(d);
      const int kv_heads = 2, n_heads = 8, bs = 16, blocks = 40;
      const std::vector<int> kv_head_of = {0, 0, 0, 0, 1, 1, 1, 1};
      auto kc = randoms(size_t(blocks) * kv_heads * bs * d, 10 + d);
      auto vc = randoms(kc.size(), 11 + d);
      const cpu::KvLayerView view{kc.data(), vc.data(), kv_heads, bs, d, blocks};
      // Three sequences: a 3-token chunk at position 200, decode tokens at 90 and 130.
      llama2::StepPlan plan;
      const int pos[] = {200, 90, 130}, n_tok[] = {3, 1, 1};
      int next_block = 0;
      for (int s = 0; s < 3; ++s) {
        llama2::SeqStep st;
        st.seq_id = s;
        st.pos_begin = pos[s];
        st.n_tokens = n_tok[s];
        st.n_logits = 1;
        st.table_begin = int(plan.block_ids.size());
        st.table_len = (pos[s] + n_tok[s] + bs - 1) / bs;
        for (int b = 0; b < st.table_len; ++b)
          plan.block_ids.push_back((next_block++ * 7) % blocks);
        for (int t = 0; t < n_tok[s]; ++t) plan.tokens.push_back(5);
        plan.seqs.push_back(st);
      }
      const auto q = randoms(size_t(plan.total_tokens()) * n_heads * d, 12);
      std::vector<float> one(q.size()), split(q.size());
      cpu::paged_attention(view, plan, q.data(), n_heads, kv_head_of, one.data());
      cpu::paged_attention(view, plan, q.data(), n_heads, kv_head_of, split.data(), &pool);
      CHECK(same_bits(one.data(), split.data(), one.size()));
      // Each probability row sums to 1, so every output lies within the V values' range.
      for (float o : one) CHECK(std::abs(o) <= 1.0f + 1e-5f);
    }
  }
}
