// The CPU backend's whole forward pass on the committed tiny model: however a step is spread over
// threads (CpuSplit) and whatever else is in the batch, a sequence's logits keep the same bits;
// tensor parallelism (two shards in this process, summed by a real two-party all-reduce) matches
// one shard within fp32 rounding and is itself split-invariant.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/comm.h"
#include "rank/model_runner.h"
#include "rank/weight_store.h"
#include "test_util.h"

using llama2::CpuSplit;
using llama2::StepLogits;
using llama2::StepPlan;

namespace {

const std::string kModel = LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa";
constexpr int kBlockSize = 4, kBlocksPerSeq = 16;  // 64 positions per sequence

// Ranks of one tensor-parallel group as threads of this process. The collectives meet at a
// barrier, read every rank's buffer in rank order, and meet again before anyone writes.
struct ThreadGroup {
  explicit ThreadGroup(int n) : n_(n), bufs_(n), barrier_(n) {}
  void barrier() { barrier_.wait(); }
  int n_;
  std::vector<const void*> bufs_;
  llama2::test::Barrier barrier_;
};

class ThreadComm final : public llama2::Comm {
 public:
  ThreadComm(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.n_; }
  // Host buffers, fp32 and int32 only (the CPU backend's types), like MpiComm: another type is a
  // runner bug, and the check ends the run rather than summing garbage.
  void all_reduce_sum(void* data, size_t n, llama2::CommType type) override {
    LLAMA2_CHECK(type == llama2::CommType::kF32);
    g_.bufs_[rank_] = data;
    g_.barrier();
    std::vector<float> sum(n, 0.f);
    for (int r = 0; r < g_.n_; ++r) {
      const float* b = static_cast<const float*>(g_.bufs_[r]);
      for (size_t i = 0; i < n; ++i) sum[i] += b[i];
    }
    g_.barrier();
    std::memcpy(data, sum.data(), n * sizeof(float));
  }
  void gather_to_root(const void* send, const std::vector<size_t>& counts, llama2::CommType type,
                      void* recv) override {
    LLAMA2_CHECK(type == llama2::CommType::kF32 || type == llama2::CommType::kI32);
    const size_t bytes = llama2::comm_type_bytes(type);
    g_.bufs_[rank_] = send;
    g_.barrier();
    if (rank_ == 0) {
      char* out = static_cast<char*>(recv);
      for (int r = 0; r < g_.n_; ++r) {
        out = std::copy_n(static_cast<const char*>(g_.bufs_[r]), counts[r] * bytes, out);
      }
    }
    g_.barrier();
  }
  void synchronize() override {}

 private:
  ThreadGroup& g_;
  int rank_;
};

// The steps a serving loop makes: three prompts of different lengths prefill together, then all
// decode, a fourth prompt joining in step 2. Sequence s owns blocks [16 s, 16 s + 16).
struct Script {
  std::vector<StepPlan> plans;
  std::vector<std::vector<int>> seq_of_row;  // per step: the sequence of each logit row
};

Script make_script(const std::vector<int>& only = {}) {
  const std::vector<int> prompt_len = {11, 3, 7, 13};
  std::vector<std::vector<int32_t>> tables(4), tokens(4);
  for (int s = 0; s < 4; ++s) {
    for (int b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(s * kBlocksPerSeq + b);
    for (int i = 0; i < 40; ++i) tokens[s].push_back(3 + (s * 131 + i * 17) % 500);
  }
  Script sc;
  std::vector<int> cached(4, 0);
  for (int step = 0; step < 7; ++step) {
    StepPlan plan;
    std::vector<int> rows;
    for (int s = 0; s < 4; ++s) {
      const int start = s == 3 ? 2 : 0;
      if (step < start) continue;
      if (!only.empty() && only[0] != s) continue;
      const int n = step == start ? prompt_len[s] : 1;
      llama2::append_seq(&plan, s, cached[s], tokens[s].data() + cached[s], n, true,
                         tables[s].data(), kBlocksPerSeq);
      cached[s] += n;
      rows.push_back(s);
    }
    if (plan.seqs.empty()) continue;  // a sequence alone, before it starts
    sc.plans.push_back(plan);
    sc.seq_of_row.push_back(rows);
  }
  return sc;
}

// Full logits of every step of `sc` on `tp` in-process ranks, each with `threads` threads.
std::vector<StepLogits> run(const Script& sc, int tp, int threads, CpuSplit split) {
  const llama2::ModelConfig c = llama2::load_model_config(kModel);
  const llama2::WeightStore w = llama2::WeightStore::open(kModel);
  ThreadGroup group(tp);
  std::vector<StepLogits> out(sc.plans.size());
  auto rank_main = [&](int rank) {
    ThreadComm comm(group, rank);
    auto runner =
        llama2::make_cpu_runner(c, llama2::make_shard_plan(c, tp, rank), w, comm, threads, split);
    runner->allocate_kv({kBlockSize, 4 * kBlocksPerSeq});
    for (size_t i = 0; i < sc.plans.size(); ++i) {
      runner->forward(sc.plans[i], rank == 0 ? &out[i] : nullptr);
    }
  };
  std::vector<std::thread> others;
  for (int r = 1; r < tp; ++r) others.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : others) t.join();
  return out;
}

bool same_bits(const std::vector<StepLogits>& a, const std::vector<StepLogits>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].values.size() != b[i].values.size() ||
        std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

// A kScore step's log-probabilities on `tp` in-process ranks (rank 0's result).
std::vector<double> run_score(const StepPlan& plan, int tp, int threads, CpuSplit split) {
  const llama2::ModelConfig c = llama2::load_model_config(kModel);
  const llama2::WeightStore w = llama2::WeightStore::open(kModel);
  ThreadGroup group(tp);
  std::vector<double> out;
  auto rank_main = [&](int rank) {
    ThreadComm comm(group, rank);
    auto runner =
        llama2::make_cpu_runner(c, llama2::make_shard_plan(c, tp, rank), w, comm, threads, split);
    runner->allocate_kv({kBlockSize, 4 * kBlocksPerSeq});
    runner->score(plan, rank == 0 ? &out : nullptr);
  };
  std::vector<std::thread> others;
  for (int r = 1; r < tp; ++r) others.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : others) t.join();
  return out;
}

}  // namespace

TEST_SUITE("cpu_model") {
  TEST_CASE("score steps: each row's log p(target) is the log-softmax of that row's full logits") {
    // Three sequences in one kScore step; rows with target -1 are skipped.
    const std::vector<int> lens = {9, 1, 6};
    StepPlan plan;
    plan.kind = llama2::StepKind::kScore;
    std::vector<std::vector<int32_t>> tokens(3), tables(3);
    for (int s = 0; s < 3; ++s) {
      for (int b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(s * kBlocksPerSeq + b);
      for (int i = 0; i < lens[s] + 1; ++i) tokens[s].push_back(3 + (s * 71 + i * 29) % 500);
      llama2::append_seq(&plan, s, 0, tokens[s].data(), lens[s], false, tables[s].data(),
                         kBlocksPerSeq);
      for (int i = 0; i < lens[s]; ++i) plan.targets.push_back(i % 4 == 2 ? -1 : tokens[s][i + 1]);
    }
    // The reference: each prefix as its own prefill step with full logits of its last row.
    std::vector<double> want;
    for (int s = 0; s < 3; ++s) {
      Script sc;
      for (int i = 0; i < lens[s]; ++i) {
        if (i % 4 == 2) continue;
        StepPlan p;
        llama2::append_seq(&p, s, 0, tokens[s].data(), i + 1, true, tables[s].data(),
                           kBlocksPerSeq);
        sc.plans.push_back(p);
      }
      const auto logits = run(sc, 1, 1, CpuSplit::kAuto);
      for (size_t k = 0, i = 0; k < logits.size(); ++k, ++i) {
        if (i % 4 == 2) ++i;
        const std::vector<float>& row = logits[k].values;
        double m = -INFINITY, sum = 0;
        for (float x : row) m = std::max(m, double(x));
        for (float x : row) sum += std::exp(double(x) - m);
        want.push_back(row[tokens[s][i + 1]] - (m + std::log(sum)));
      }
    }
    REQUIRE(plan.score_rows() == static_cast<int>(want.size()));
    for (int tp : {1, 2}) {
      for (CpuSplit split : {CpuSplit::kColumns, CpuSplit::kRows}) {
        CAPTURE(tp);
        const std::vector<double> got = run_score(plan, tp, 2, split);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
        }
      }
    }
    // A target outside the vocabulary is refused, naming it.
    plan.targets[0] = 100000;
    std::string msg;
    try {
      run_score(plan, 1, 1, CpuSplit::kAuto);
    } catch (const llama2::Error& e) {
      msg = e.what();
    }
    CHECK(msg.find("target id 100000 is outside the vocabulary [0, 512)") != std::string::npos);
  }

  TEST_CASE("a step's logits have the same bits however its sequences are spread over threads") {
    const Script sc = make_script();
    const auto one = run(sc, 1, 1, CpuSplit::kAuto);
    REQUIRE(one.size() == 7);
    CHECK(one[0].rows == 3);
    CHECK(one[3].rows == 4);
    CHECK(one[3].values.size() == 4u * 512);
    CHECK(same_bits(one, run(sc, 1, 2, CpuSplit::kColumns)));
    CHECK(same_bits(one, run(sc, 1, 2, CpuSplit::kRows)));
    CHECK(same_bits(one, run(sc, 1, 3, CpuSplit::kRows)));  // 3 or 4 sequences over 3 threads
    CHECK(same_bits(one, run(sc, 1, 2, CpuSplit::kAuto)));
  }

  TEST_CASE("a sequence's logits in a split batch equal its logits alone") {
    const Script batch = make_script();
    const auto together = run(batch, 1, 2, CpuSplit::kRows);
    for (int s : {0, 3}) {
      CAPTURE(s);
      const Script alone_sc = make_script({s});
      const auto alone = run(alone_sc, 1, 1, CpuSplit::kAuto);
      int checked = 0;
      for (size_t step = 0, a = 0; step < batch.plans.size(); ++step) {
        const auto& rows = batch.seq_of_row[step];
        for (size_t r = 0; r < rows.size(); ++r) {
          if (rows[r] != s) continue;
          const float* got = together[step].values.data() + r * 512;
          // Bit identity is the claim (not closeness), so bytes are compared.
          // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
          CHECK(std::memcmp(got, alone[a].values.data(), 512 * 4) == 0);
          ++a;
          ++checked;
        }
      }
      CHECK(checked == (s == 3 ? 5 : 7));
    }
  }

  TEST_CASE("two tensor-parallel shards: split-invariant, and within fp32 rounding of one shard") {
    const Script sc = make_script();
    const auto tp1 = run(sc, 1, 1, CpuSplit::kAuto);
    const auto cols = run(sc, 2, 2, CpuSplit::kColumns);
    CHECK(same_bits(cols, run(sc, 2, 2, CpuSplit::kRows)));
    CHECK(same_bits(cols, run(sc, 2, 1, CpuSplit::kAuto)));
    double worst = 0;
    for (size_t i = 0; i < tp1.size(); ++i) {
      REQUIRE(cols[i].values.size() == tp1[i].values.size());
      for (size_t j = 0; j < tp1[i].values.size(); ++j) {
        worst = std::max(worst, double(std::abs(cols[i].values[j] - tp1[i].values[j])));
      }
    }
    CHECK(worst < 1e-4);
    CHECK(worst > 0);  // the shards really summed partial products in another order
  }

  TEST_CASE("LLAMA2_CPU_SPLIT names its allowed values") {
    ::setenv("LLAMA2_CPU_SPLIT", "diagonal", 1);
    std::string msg;
    try {
      llama2::tuning_knobs_from_env();
    } catch (const llama2::Error& e) {
      msg = e.what();
    }
    CHECK(msg == "LLAMA2_CPU_SPLIT=diagonal: expected auto, columns or rows");
    ::setenv("LLAMA2_CPU_SPLIT", "rows", 1);
    CHECK(llama2::tuning_knobs_from_env().cpu_split == CpuSplit::kRows);
    ::unsetenv("LLAMA2_CPU_SPLIT");
    CHECK(llama2::tuning_knobs_from_env().cpu_split == CpuSplit::kAuto);
  }

  TEST_CASE("a bad block id in a split step is an error, not a crash on a worker thread") {
    Script sc = make_script();
    sc.plans.resize(1);
    sc.plans[0].block_ids[sc.plans[0].seqs[2].table_begin] = 9999;
    CHECK_THROWS_AS(run(sc, 1, 2, CpuSplit::kRows), llama2::Error);
  }
}
