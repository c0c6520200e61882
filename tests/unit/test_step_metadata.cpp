// The GPU runner's per-step integer inputs (StepLayout / fill_step_metadata) and the logit-row
// gathering helpers (logits_gather.h). Host code, so these run on every machine; expected values
// are written out by hand from the documented layout.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/shard_plan.h"
#include "coordinator/scheduler/sampler.h"
#include "rank/engine.h"
#include "rank/logits_gather.h"
#include "rank/step_metadata.h"

using llama2::SeqStep;
using llama2::StepLayout;
using llama2::StepPlan;

namespace {

// Two sequences: A prefills 3 tokens at positions 0..2 (blocks {5}), B decodes 1 token at
// position 5 (blocks {2, 7}); block size 4.
StepPlan two_seq_plan() {
  StepPlan p;
  p.seqs = {SeqStep{10, 0, 3, 1, 0, 1, 0}, SeqStep{11, 5, 1, 1, 1, 2, 0}};
  p.tokens = {100, 101, 102, 200};
  p.block_ids = {5, 2, 7};
  return p;
}

std::string error_of(const StepPlan& p, const StepLayout& L, int bucket) {
  std::vector<int32_t> host(L.words(), -99);
  try {
    llama2::fill_step_metadata(p, L, bucket, host.data());
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("step_metadata") {
  TEST_CASE("layout regions are disjoint and in the documented order") {
    const StepLayout L(8, 3, 10, 4, 9);  // max_blocks = ceil(10 / 4) = 3
    CHECK(L.max_blocks == 3);
    CHECK(L.tokens_at() == 0);
    CHECK(L.pos_at() == 8);
    CHECK(L.slot_at() == 16);
    CHECK(L.logit_rows_at() == 24);
    CHECK(L.cu_tokens_at() == 27);
    CHECK(L.pos_begin_at() == 31);
    CHECK(L.context_lens_at() == 34);
    CHECK(L.block_tables_at() == 37);
    CHECK(L.words() == 37 + 3 * 3);
  }

  TEST_CASE("a mixed prefill + decode step") {
    const StepLayout L(8, 3, 12, 4, 9);
    std::vector<int32_t> h(L.words(), -99);
    const llama2::StepShape sh = llama2::fill_step_metadata(two_seq_plan(), L, 0, h.data());
    CHECK_FALSE(sh.decode);
    CHECK(sh.tokens == 4);
    CHECK(sh.seqs == 2);
    CHECK(sh.logit_rows == 2);
    CHECK(sh.max_context == 6);
    CHECK(sh.max_new_tokens == 3);
    CHECK(sh.decode_seqs == 0);  // B's one token comes after A's chunk: both take prefill attention
    CHECK(sh.words_used == L.block_tables_at() + 2 * 3);
    const int32_t* t = h.data();
    CHECK(std::vector<int32_t>(t + L.tokens_at(), t + L.tokens_at() + 4) ==
          std::vector<int32_t>{100, 101, 102, 200});
    CHECK(std::vector<int32_t>(t + L.pos_at(), t + L.pos_at() + 4) ==
          std::vector<int32_t>{0, 1, 2, 5});
    // slot = block * 4 + offset: A in block 5 (20, 21, 22); B's position 5 is block 7 offset 1.
    CHECK(std::vector<int32_t>(t + L.slot_at(), t + L.slot_at() + 4) ==
          std::vector<int32_t>{20, 21, 22, 29});
    CHECK(t[L.logit_rows_at()] == 2);  // A's last token
    CHECK(t[L.logit_rows_at() + 1] == 3);
    CHECK(std::vector<int32_t>(t + L.cu_tokens_at(), t + L.cu_tokens_at() + 3) ==
          std::vector<int32_t>{0, 3, 4});
    CHECK(t[L.pos_begin_at()] == 0);
    CHECK(t[L.pos_begin_at() + 1] == 5);
    CHECK(t[L.context_lens_at()] == 3);
    CHECK(t[L.context_lens_at() + 1] == 6);
    CHECK(t[L.block_tables_at()] == 5);
    CHECK(t[L.block_tables_at() + 3] == 2);
    CHECK(t[L.block_tables_at() + 4] == 7);
  }

  TEST_CASE("one-token sequences at the front of a mixed step are its decode part") {
    const StepLayout L(12, 4, 12, 4, 9);
    std::vector<int32_t> h(L.words(), -99);
    StepPlan p;
    // decode at 5, decode at 9, a 3-token chunk from 0, one more token (a 1-token chunk) at 2.
    p.seqs = {SeqStep{1, 5, 1, 1, 0, 2, 0}, SeqStep{2, 9, 1, 1, 2, 3, 0},
              SeqStep{3, 0, 3, 0, 5, 1, 0}, SeqStep{4, 2, 1, 1, 6, 1, 0}};
    p.tokens = {7, 8, 1, 2, 3, 4};
    p.block_ids = {0, 1, 2, 3, 4, 5, 6};
    const llama2::StepShape sh = llama2::fill_step_metadata(p, L, 0, h.data());
    CHECK_FALSE(sh.decode);
    CHECK(sh.decode_seqs == 2);      // the 1-token sequence after the chunk is not in the prefix
    CHECK(sh.decode_context == 10);  // position 9 attends over 10 tokens
    CHECK(sh.max_context == 10);
    // A decode step: every sequence, eager (bucket 0).
    p.seqs.resize(2);
    p.tokens.resize(2);
    const llama2::StepShape d = llama2::fill_step_metadata(p, L, 0, h.data());
    CHECK(d.decode);
    CHECK(d.decode_seqs == 2);
    CHECK(d.decode_context == 10);
  }

  TEST_CASE("a graph bucket pads decode steps with inert sequences") {
    StepPlan p;
    p.seqs = {SeqStep{1, 4, 1, 1, 0, 2, 0}, SeqStep{2, 0, 1, 1, 2, 1, 0}};
    p.tokens = {7, 8};
    p.block_ids = {3, 1, 6};
    const StepLayout L(8, 4, 8, 4, 9);
    std::vector<int32_t> h(L.words(), -99);
    const llama2::StepShape sh = llama2::fill_step_metadata(p, L, 4, h.data());
    CHECK(sh.decode);
    CHECK(sh.tokens == 4);
    CHECK(sh.seqs == 4);
    CHECK(sh.logit_rows == 4);
    CHECK(sh.max_context == 8);  // the layout's longest sequence, the same for every step
    CHECK(sh.max_new_tokens == 1);
    CHECK(sh.decode_seqs == 4);  // padding included: the graph launches over the bucket
    CHECK(sh.decode_context == 8);
    const int32_t* t = h.data();
    CHECK(t[L.slot_at()] == 1 * 4 + 0);      // position 4 = block table[1] = 1, offset 0
    CHECK(t[L.slot_at() + 1] == 6 * 4 + 0);  // position 0 of block 6
    // A context bound shortens the attention grid for the whole bucket; it must cover the step.
    CHECK(llama2::fill_step_metadata(p, L, 4, h.data(), 5).max_context == 5);
    CHECK_THROWS(llama2::fill_step_metadata(p, L, 4, h.data(), 4));  // position 4 needs 5
    CHECK_THROWS(llama2::fill_step_metadata(p, L, 4, h.data(), 9));  // beyond the layout
    for (int i = 2; i < 4; ++i) {
      CAPTURE(i);
      CHECK(t[L.tokens_at() + i] == 0);
      CHECK(t[L.slot_at() + i] == -1);         // no KV written
      CHECK(t[L.context_lens_at() + i] == 0);  // zero attention rows
      CHECK(t[L.logit_rows_at() + i] == i);
      CHECK(t[L.cu_tokens_at() + i + 1] == i + 1);
    }
  }

  TEST_CASE("graph buckets, context bounds and the fp8 GEMM's tuned row counts") {
    using llama2::graph_batch_bucket;
    // 1 2 4 8, then steps of 8 to 64, then of 32; capped; 0 above the cap (no graph).
    const std::vector<std::pair<int, int>> want = {{1, 1},   {2, 2},   {3, 4},    {5, 8},
                                                   {8, 8},   {9, 16},  {17, 24},  {63, 64},
                                                   {64, 64}, {65, 96}, {97, 128}, {500, 512}};
    for (const auto& [S_, b] : want) {
      const int S = S_;  // CAPTURE's lambda takes a variable, not a structured binding (C++17)
      CAPTURE(S);
      CHECK(graph_batch_bucket(S, 512) == b);
      CHECK(b - S <= std::max(S / 2, 7));  // the padding stays bounded
    }
    CHECK(graph_batch_bucket(100, 100) == 100);  // the cap is a bucket
    CHECK(graph_batch_bucket(101, 100) == 0);
    CHECK(graph_batch_bucket(1, 0) == 0);
    // Context bounds: powers of two from 256, at most the longest possible sequence.
    CHECK(llama2::graph_context_bound(1, 4096) == 256);
    CHECK(llama2::graph_context_bound(257, 4096) == 512);
    CHECK(llama2::graph_context_bound(4000, 4096) == 4096);
    CHECK(llama2::graph_context_bound(300, 200) == 200);
    // Tuned rows: every bucket up to the cap, then doublings to a full step.
    const std::vector<int> rows = llama2::fp8_tuned_row_counts(64, 2048);
    const std::vector<int> expected = {1,  2,  4,  8,   16,  24,  32,   40,
                                       48, 56, 64, 128, 256, 512, 1024, 2048};
    CHECK(rows == expected);
    CHECK(llama2::fp8_tuned_row_counts(0, 8) == std::vector<int>{2, 4, 8});  // no graphs
    CHECK(llama2::fp8_tuned_row_counts(100, 300) ==
          std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 100, 200, 300});
  }

  TEST_CASE("limits are errors that name them") {
    const StepLayout L(4, 2, 8, 4, 9);
    StepPlan p = two_seq_plan();
    p.tokens.push_back(1);
    p.seqs[0].n_tokens = 4;  // 5 tokens > 4
    CHECK(error_of(p, L, 0).find("max-step-tokens") != std::string::npos);

    StepPlan three;
    three.seqs = {SeqStep{1, 0, 1, 1, 0, 1, 0}, SeqStep{2, 0, 1, 1, 0, 1, 0},
                  SeqStep{3, 0, 1, 1, 0, 1, 0}};
    three.tokens = {1, 2, 3};
    three.block_ids = {0};
    CHECK(error_of(three, L, 0).find("max-batch-size") != std::string::npos);

    StepPlan far;  // position 8 needs a third block; the layout holds 2 per sequence
    far.seqs = {SeqStep{4, 8, 1, 1, 0, 3, 0}};
    far.tokens = {1};
    far.block_ids = {0, 1, 2};
    CHECK(error_of(far, L, 0).find("maximum sequence length 8") != std::string::npos);

    StepPlan bad_block;
    bad_block.seqs = {SeqStep{5, 0, 2, 1, 0, 1, 0}};
    bad_block.tokens = {1, 2};
    bad_block.block_ids = {9};
    CHECK(error_of(bad_block, L, 0).find("KV block 9") != std::string::npos);
  }
}

TEST_SUITE("logits_gather") {
  TEST_CASE("local candidates: best first, ties by lower id, NaN first, padding") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> logits = {1.f, 3.f, 3.f, -0.f, 0.f, nan};  // 2 rows of 3
    std::vector<float> v(2 * 4);
    std::vector<int32_t> ids(2 * 4);
    llama2::local_candidates(logits.data(), 2, 3, 100, 4, v.data(), ids.data());
    CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 4) ==
          std::vector<int32_t>{101, 102, 100, -1});
    CHECK(v[3] == -std::numeric_limits<float>::infinity());
    CHECK(ids[4] == 102);  // NaN first
    CHECK(ids[5] == 100);  // -0 == +0: lower id
    CHECK(ids[6] == 101);
    // k = 1 takes a path of its own (one scan): the same order, NaN and ties included.
    std::vector<float> v1(2);
    std::vector<int32_t> ids1(2);
    llama2::local_candidates(logits.data(), 2, 3, 100, 1, v1.data(), ids1.data());
    CHECK(ids1 == std::vector<int32_t>{101, 102});
    CHECK(v1[0] == 3.f);
    CHECK(std::isnan(v1[1]));
    llama2::local_candidates(logits.data(), 1, 0, 100, 1, v1.data(), ids1.data());
    CHECK(ids1[0] == -1);
    CHECK(v1[0] == -std::numeric_limits<float>::infinity());
  }

  TEST_CASE("local candidates: the k = 1 scan picks what the k = 3 sort puts first") {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> coarse(-6, 6);  // many ties, signed zeros
    const int rows = 50, vocab = 41;
    std::vector<float> logits(rows * vocab);
    for (float& x : logits) x = coarse(rng) * 0.5f * (rng() % 2 ? 1.f : -1.f);
    std::vector<float> v1(rows), v3(rows * 3);
    std::vector<int32_t> i1(rows), i3(rows * 3);
    llama2::local_candidates(logits.data(), rows, vocab, 7, 1, v1.data(), i1.data());
    llama2::local_candidates(logits.data(), rows, vocab, 7, 3, v3.data(), i3.data());
    for (int r = 0; r < rows; ++r) {
      CAPTURE(r);
      CHECK(i1[r] == i3[r * 3]);
      CHECK(v1[r] == v3[r * 3]);
    }
  }

  TEST_CASE("merge of per-rank candidates equals the candidates of the whole row") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> coarse(-20, 20);  // coarse values: many ties
    const int vocab = 37, rows = 3, k = 5;
    std::vector<float> full(rows * vocab);
    for (float& x : full) x = coarse(rng) * 0.25f;
    std::vector<float> want_v(rows * k);
    std::vector<int32_t> want_i(rows * k);
    llama2::local_candidates(full.data(), rows, vocab, 0, k, want_v.data(), want_i.data());
    // Split the vocabulary 13 / 12 / 12 over 3 ranks, as split_range does.
    const int begin[3] = {0, 13, 25}, size[3] = {13, 12, 12};
    std::vector<float> gv;
    std::vector<int32_t> gi;
    for (int r = 0; r < 3; ++r) {
      std::vector<float> slice(rows * size[r]);
      for (int row = 0; row < rows; ++row)
        for (int j = 0; j < size[r]; ++j)
          slice[row * size[r] + j] = full[row * vocab + begin[r] + j];
      std::vector<float> v(rows * k);
      std::vector<int32_t> ids(rows * k);
      llama2::local_candidates(slice.data(), rows, size[r], begin[r], k, v.data(), ids.data());
      gv.insert(gv.end(), v.begin(), v.end());
      gi.insert(gi.end(), ids.begin(), ids.end());
    }
    llama2::StepLogits out;
    llama2::merge_candidates(gv.data(), gi.data(), 3, rows, k, &out);
    CHECK(out.rows == rows);
    CHECK(out.width == k);
    CHECK(out.ids == want_i);
    CHECK(out.values == want_v);
  }

  TEST_CASE("stitching vocabulary slices back in order") {
    llama2::ModelConfig c;
    c.hidden_size = 8;
    c.intermediate_size = 8;
    c.num_layers = 1;
    c.num_heads = 2;
    c.num_kv_heads = 2;
    c.vocab_size = 5;
    c.max_position_embeddings = 8;
    const std::vector<llama2::ShardPlan> shards = {llama2::make_shard_plan(c, 2, 0),
                                                   llama2::make_shard_plan(c, 2, 1)};
    REQUIRE(shards[0].vocab_size == 3);
    // rank 0 rows: [0 1 2], [5 6 7]; rank 1 rows: [3 4], [8 9]
    const std::vector<float> gathered = {0, 1, 2, 5, 6, 7, 3, 4, 8, 9};
    llama2::StepLogits out;
    llama2::stitch_vocab_slices(gathered.data(), shards, 2, 5, &out);
    CHECK(out.full());
    CHECK(out.values == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }

  TEST_CASE("the sampler gives the same token from candidates as from full logits") {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.f, 2.f);
    const int vocab = 300;
    for (int trial = 0; trial < 200; ++trial) {
      CAPTURE(trial);
      llama2::SamplingParams p;
      p.temperature = trial % 3 == 0 ? 0.f : 0.7f;
      p.top_k = trial % 3 == 0 ? 0 : 1 + trial % 40;
      p.top_p = trial % 2 ? 0.9f : 1.f;
      const int k = llama2::Sampler::candidates_needed(p);
      REQUIRE(k >= 1);
      std::vector<float> logits(vocab);
      for (float& x : logits) x = std::round(normal(rng) * 8) / 8;  // ties happen
      std::vector<float> v(k);
      std::vector<int32_t> ids(k);
      llama2::local_candidates(logits.data(), 1, vocab, 0, k, v.data(), ids.data());
      llama2::Sampler full(p, 1000 + trial), cand(p, 1000 + trial);
      std::vector<float> copy = logits;
      const int a = full.sample(copy, {});
      const int b = cand.sample_candidates(v.data(), ids.data(), k);
      // Ties at the k-th value included: a group that straddles the cut goes whole, so the
      // survivors are always among the candidates.
      CHECK(a == b);
    }
  }

  TEST_CASE("candidates_needed") {
    llama2::SamplingParams p;
    p.temperature = 0.f;
    CHECK(llama2::Sampler::candidates_needed(p) == 1);
    p.repetition_penalty = 1.1f;
    CHECK(llama2::Sampler::candidates_needed(p) == 0);
    p.repetition_penalty = 1.f;
    p.temperature = 0.8f;
    p.top_k = 0;
    CHECK(llama2::Sampler::candidates_needed(p) == 0);  // top-p / plain sampling reads everything
    p.top_k = 40;  // the cut reads past the k-th value: always the most candidates
    CHECK(llama2::Sampler::candidates_needed(p) == llama2::kMaxCandidates);
    p.top_k = llama2::kMaxCandidates - 1;
    CHECK(llama2::Sampler::candidates_needed(p) == llama2::kMaxCandidates);
    p.top_k = llama2::kMaxCandidates;  // the value after the k-th is not among the candidates
    CHECK(llama2::Sampler::candidates_needed(p) == 0);
    p.top_k = llama2::kMaxCandidates + 1;
    CHECK(llama2::Sampler::candidates_needed(p) == 0);
  }
}

TEST_SUITE("backend_choice") {
  TEST_CASE("auto picks cuda only when built, a device is visible and the head size is supported") {
    using llama2::Backend;
    CHECK(llama2::choose_backend(Backend::kAuto, 0, 128) == Backend::kCpu);
    CHECK(llama2::choose_backend(Backend::kCpu, 2, 128) == Backend::kCpu);
    CHECK(llama2::choose_backend(Backend::kAuto, 1, 128) ==
          (llama2::cuda_backend_built() ? Backend::kCuda : Backend::kCpu));
    std::string note;
    CHECK(llama2::choose_backend(Backend::kAuto, 1, 16, &note) == Backend::kCpu);
    if (llama2::cuda_backend_built()) CHECK(note.find("head_dim 64 and 128") != std::string::npos);
    CHECK_THROWS_WITH_AS(llama2::parse_backend("gpu"), doctest::Contains("cpu, cuda, auto"),
                         llama2::Error);
    CHECK_THROWS_AS(llama2::choose_backend(Backend::kCuda, 0, 128), llama2::Error);
    CHECK_THROWS_AS(llama2::choose_backend(Backend::kCuda, 1, 16), llama2::Error);  // no build/head
  }

  TEST_CASE("dtype: auto follows the checkpoint on cuda, cpu is fp32 only") {
    using llama2::Backend;
    using D = llama2::ComputeDType;
    CHECK(llama2::choose_dtype(D::kAuto, Backend::kCuda, "float16") == D::kFp16);
    CHECK(llama2::choose_dtype(D::kAuto, Backend::kCuda, "bfloat16") == D::kBf16);
    CHECK(llama2::choose_dtype(D::kAuto, Backend::kCuda, "float32") == D::kFp32);
    CHECK(llama2::choose_dtype(D::kBf16, Backend::kCuda, "float16") == D::kBf16);
    CHECK(llama2::choose_dtype(D::kAuto, Backend::kCpu, "float16") == D::kFp32);
    CHECK_THROWS_WITH_AS(llama2::choose_dtype(D::kFp16, Backend::kCpu, "float16"),
                         doctest::Contains("--dtype fp16 needs the cuda backend"), llama2::Error);
    CHECK_THROWS_WITH_AS(llama2::parse_compute_dtype("half"),
                         doctest::Contains("auto, fp16, bf16, fp32"), llama2::Error);
  }
}
