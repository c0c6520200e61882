// Step plan wire format (src/common/step_plan.{h,cpp}). The expected wire of a small plan is
// written out by hand from the documented layout (header of 7 ints, 7 ints per sequence, tokens,
// block ids); each malformed buffer is derived from a valid one by changing one field.
#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/step_plan.h"
#include "rank/logits_adjust.h"
#include "test_util.h"

using llama2::SeqStep;
using llama2::StepKind;
using llama2::StepPlan;

namespace {
using llama2::test::contains;

constexpr int32_t kMagic = 0x4c325350;  // "L2SP"

// Three sequences: a prefill chunk, a decode step without logits, and a continued prefill.
StepPlan forward_plan() {
  StepPlan p;
  p.kind = StepKind::kForward;
  p.seqs = {SeqStep{11, 0, 3, 1, 0, 1, 0}, SeqStep{12, 40, 1, 0, 1, 3, 0},
            SeqStep{13, 16, 2, 1, 4, 2, 1}};
  p.tokens = {101, 102, 103, 201, 301, 302};
  p.block_ids = {7, 2, 9, 0, 5, 3};
  return p;
}

void check_same(const StepPlan& a, const StepPlan& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.exit_code == b.exit_code);
  CHECK(a.candidates == b.candidates);
  REQUIRE(a.seqs.size() == b.seqs.size());
  for (size_t i = 0; i < a.seqs.size(); ++i) {
    CAPTURE(i);
    CHECK(a.seqs[i].seq_id == b.seqs[i].seq_id);
    CHECK(a.seqs[i].pos_begin == b.seqs[i].pos_begin);
    CHECK(a.seqs[i].n_tokens == b.seqs[i].n_tokens);
    CHECK(a.seqs[i].n_logits == b.seqs[i].n_logits);
    CHECK(a.seqs[i].table_begin == b.seqs[i].table_begin);
    CHECK(a.seqs[i].table_len == b.seqs[i].table_len);
    CHECK(a.seqs[i].want_logprobs == b.seqs[i].want_logprobs);
  }
  CHECK(a.tokens == b.tokens);
  CHECK(a.block_ids == b.block_ids);
}

std::string decode_error(const std::vector<int32_t>& wire) {
  try {
    llama2::decode_step_plan(wire);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

// Wire offsets of the fields of sequence `s` (header is 7 ints).
size_t seq_field(int s, int field) {
  return 7 + 7 * size_t(s) + field;
}
enum Field { kSeqId, kPosBegin, kNTokens, kWantLogits, kTableBegin, kTableLen, kWantLogprobs };

}  // namespace

TEST_SUITE("step_plan") {
  TEST_CASE("encode writes the documented layout") {
    StepPlan p;
    p.seqs = {SeqStep{4, 5, 2, 1, 0, 2, 1}};
    p.tokens = {9, 8};
    p.block_ids = {3, 1};
    p.candidates = 5;
    // magic kind exit candidates seqs toks blocks
    const std::vector<int32_t> expected = {kMagic, 1, 0, 5, 1, 2, 2,
                                           4,      5, 2, 1, 0, 2, 1,  // the sequence
                                           9,      8,                 // tokens
                                           3,      1};                // block ids
    CHECK(llama2::encode_step_plan(p) == expected);
  }

  TEST_CASE("forward plan round trip") {
    const StepPlan p = forward_plan();
    const auto wire = llama2::encode_step_plan(p);
    CHECK(wire.size() == 7 + 3 * 7 + 6 + 6);
    check_same(llama2::decode_step_plan(wire), p);
  }

  TEST_CASE("shutdown plan round trip keeps the exit code") {
    StepPlan p;
    p.kind = StepKind::kShutdown;
    p.exit_code = 3;
    const auto wire = llama2::encode_step_plan(p);
    CHECK(wire.size() == 7);
    const StepPlan d = llama2::decode_step_plan(wire);
    check_same(d, p);
    CHECK(d.kind == StepKind::kShutdown);
    CHECK(d.exit_code == 3);
  }

  TEST_CASE("empty forward plan and negative exit code round trip") {
    StepPlan p;
    p.exit_code = -7;
    check_same(llama2::decode_step_plan(llama2::encode_step_plan(p)), p);
  }

  TEST_CASE("sequences may share and over-cover block ranges; zero-length tables are allowed") {
    StepPlan p;
    p.seqs = {SeqStep{1, 0, 1, 1, 0, 0}, SeqStep{2, 0, 2, 1, 0, 2}, SeqStep{3, 0, 1, 0, 1, 1}};
    p.tokens = {1, 2, 3, 4};
    p.block_ids = {6, 4};
    check_same(llama2::decode_step_plan(llama2::encode_step_plan(p)), p);
  }

  TEST_CASE("logprob_flags: one per logit row, set only where asked") {
    const StepPlan p = forward_plan();
    CHECK(p.logprob_flags() == std::vector<int32_t>{0, 1});
    CHECK(p.any_logprobs());
    StepPlan q;
    const int32_t tok[2] = {5, 6}, table[1] = {0};
    llama2::append_seq(&q, 1, 0, tok, 2, true, table, 1);
    llama2::append_seq(&q, 2, 0, tok, 1, false, table, 1, /*want_logprobs=*/true);
    CHECK(q.seqs[1].want_logprobs == 0);  // no logit row: nothing to score
    CHECK_FALSE(q.any_logprobs());
    CHECK(q.logprob_flags() == std::vector<int32_t>{0});
  }

  TEST_CASE("logit_rows and total_tokens") {
    const StepPlan p = forward_plan();
    CHECK(p.logit_rows() == 2);
    CHECK(p.total_tokens() == 6);
    StepPlan none;
    CHECK(none.logit_rows() == 0);
    CHECK(none.total_tokens() == 0);
    StepPlan all = forward_plan();
    for (auto& s : all.seqs) s.n_logits = 1;
    CHECK(all.logit_rows() == 3);
  }

  TEST_CASE("malformed wires throw Error") {
    const auto good = llama2::encode_step_plan(forward_plan());
    REQUIRE(decode_error(good).empty());
    auto bad = [&](auto mutate) {
      auto w = good;
      mutate(w);
      return decode_error(w);
    };

    SUBCASE("bad magic or short header") {
      CHECK(contains(bad([](auto& w) { w[0] ^= 1; }), "malformed step plan"));
      CHECK(contains(bad([](auto& w) { w[0] = 0; }), "header"));
      CHECK(contains(decode_error({}), "header"));
      CHECK(contains(decode_error({kMagic, 2, 0, 0, 0, 0}), "header"));
    }
    SUBCASE("unknown kind") {
      CHECK(contains(bad([](auto& w) { w[1] = 0; }), "unknown kind"));
      CHECK(contains(bad([](auto& w) { w[1] = 4; }), "unknown kind"));
      CHECK(contains(bad([](auto& w) { w[1] = -1; }), "unknown kind"));
    }
    SUBCASE("length mismatch") {
      CHECK(contains(bad([](auto& w) { w.push_back(0); }), "length mismatch"));
      CHECK(contains(bad([](auto& w) { w.pop_back(); }), "length mismatch"));
      CHECK(contains(bad([](auto& w) { w[4] += 1; }), "length mismatch"));  // seq count
      CHECK(contains(bad([](auto& w) { w[5] += 1; }), "length mismatch"));  // token count
      CHECK(contains(bad([](auto& w) { w[6] -= 1; }), "length mismatch"));  // block count
      CHECK(contains(bad([](auto& w) { w[4] = -1; }), "length mismatch"));
      CHECK(contains(bad([](auto& w) {
                       // Counts that add up to the real length (7 - 7 + 34 + 6 = 40) but with
                       // a negative sequence count.
                       w[4] = -1;
                       w[5] = 34;
                     }),
                     "length mismatch"));
      CHECK(contains(decode_error({kMagic, 1, 0, 0, 0, 0, 0, 42}), "length mismatch"));
    }
    SUBCASE("candidates outside [0, kMaxCandidates]") {
      CHECK(contains(bad([](auto& w) { w[3] = -1; }), "candidates"));
      CHECK(contains(bad([](auto& w) { w[3] = llama2::kMaxCandidates + 1; }), "candidates"));
      CHECK(bad([](auto& w) { w[3] = llama2::kMaxCandidates; }).empty());
    }
    SUBCASE("n_tokens < 1") {
      CHECK(contains(bad([](auto& w) { w[seq_field(1, kNTokens)] = 0; }), "sequence 12"));
      CHECK(contains(bad([](auto& w) { w[seq_field(0, kNTokens)] = -3; }), "sequence 11"));
    }
    SUBCASE("negative position") {
      CHECK(contains(bad([](auto& w) { w[seq_field(2, kPosBegin)] = -1; }), "sequence 13"));
    }
    SUBCASE("table out of range") {
      // 6 block ids: [4, 4+3) runs past the end, as does a negative start or length.
      CHECK(contains(bad([](auto& w) { w[seq_field(2, kTableLen)] = 3; }), "sequence 13"));
      CHECK(contains(bad([](auto& w) { w[seq_field(0, kTableBegin)] = 6; }), "sequence 11"));
      CHECK(contains(bad([](auto& w) { w[seq_field(0, kTableBegin)] = -1; }), "sequence 11"));
      CHECK(contains(bad([](auto& w) { w[seq_field(1, kTableLen)] = -1; }), "sequence 12"));
      // begin + len overflowing int32 must not wrap into range.
      CHECK(contains(bad([](auto& w) {
                       w[seq_field(1, kTableBegin)] = 5;
                       w[seq_field(1, kTableLen)] = 0x7fffffff;
                     }),
                     "sequence 12"));
      // Exactly reaching the end is fine.
      CHECK(bad([](auto& w) { w[seq_field(1, kTableLen)] = 5; }).empty());
    }
    SUBCASE("want_logprobs other than 0/1, or without want_logits") {
      CHECK(contains(bad([](auto& w) { w[seq_field(2, kWantLogprobs)] = 2; }), "sequence 13"));
      CHECK(contains(bad([](auto& w) { w[seq_field(1, kWantLogprobs)] = 1; }), "sequence 12"));
      CHECK(bad([](auto& w) { w[seq_field(0, kWantLogprobs)] = 1; }).empty());
    }
    SUBCASE("token count mismatch") {
      // Per-sequence counts no longer add up to the header's token count (same total length).
      CHECK(contains(bad([](auto& w) { w[seq_field(0, kNTokens)] = 2; }), "token count"));
      CHECK(contains(bad([](auto& w) { w[seq_field(2, kNTokens)] = 5; }), "token count"));
    }
  }

  TEST_CASE("score plan round trip carries one target per token after the block ids") {
    StepPlan p = forward_plan();
    p.kind = StepKind::kScore;
    p.targets = {102, 103, -1, -1, 302, 7};
    const std::vector<int32_t> w = llama2::encode_step_plan(p);
    REQUIRE(w.size() == 7 + 3 * 7 + 6 + 6 + 6);
    CHECK(std::vector<int32_t>(w.end() - 6, w.end()) == p.targets);
    const StepPlan q = llama2::decode_step_plan(w);
    check_same(p, q);
    CHECK(q.targets == p.targets);
    CHECK(q.score_rows() == 4);
    // A forward plan has no targets on the wire; a score wire without them is malformed.
    CHECK(llama2::decode_step_plan(llama2::encode_step_plan(forward_plan())).targets.empty());
    std::vector<int32_t> short_wire(w.begin(), w.end() - 1);
    CHECK(contains(decode_error(short_wire), "length mismatch"));
  }

  TEST_CASE("the error type is llama2::Error") {
    CHECK_THROWS_AS(llama2::decode_step_plan({1, 2, 3}), llama2::Error);
  }
}

namespace {

// A plan of two sequences with 2 and 1 logit rows over a vocabulary of `vocab` tokens, row 0
// masked, row 1 biased, row 2 both.
StepPlan adjusted_plan(int vocab, uint32_t seed) {
  StepPlan p;
  const int32_t tok[3] = {5, 6, 7}, table[1] = {0};
  llama2::append_seq(&p, 1, 0, tok, 3, 2, table, 1, true);
  llama2::append_seq(&p, 2, 0, tok, 1, 1, table, 1);
  uint32_t x = seed;
  const auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  for (int row = 0; row < 3; ++row) {
    llama2::VocabAdjust a;
    if (row != 1) {
      a.allowed.assign(static_cast<size_t>((vocab + 31) / 32), 0u);
      for (uint32_t& w : a.allowed) w = next();
    }
    if (row != 0) {
      for (int id = row; id < vocab; id += 7) {
        a.bias_ids.push_back(id);
        a.bias_values.push_back(static_cast<float>(next() % 1000) / 100.f - 5.f);
      }
    }
    llama2::add_row_adjust(&p, row, a, vocab);
  }
  return p;
}

}  // namespace

TEST_SUITE("step_plan") {
  TEST_CASE("several logit rows per sequence: counted, flagged and checked") {
    const StepPlan p = adjusted_plan(64, 1);
    CHECK(p.logit_rows() == 3);
    CHECK(p.logprob_flags() == std::vector<int32_t>{1, 1, 0});
    auto w = llama2::encode_step_plan(p);
    w[seq_field(1, kWantLogits)] = 2;  // 2 rows of a 1-token chunk
    CHECK(contains(decode_error(w), "sequence 2"));
  }

  TEST_CASE("vocabulary adjustments round trip; a plan without them keeps its old wire") {
    const StepPlan p = adjusted_plan(100, 2);
    const StepPlan q = llama2::decode_step_plan(llama2::encode_step_plan(p));
    check_same(p, q);
    REQUIRE(q.adjust.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(q.adjust[i].row == p.adjust[i].row);
      CHECK(q.adjust[i].mask_begin == p.adjust[i].mask_begin);
      CHECK(q.adjust[i].bias_begin == p.adjust[i].bias_begin);
      CHECK(q.adjust[i].bias_count == p.adjust[i].bias_count);
    }
    CHECK(q.mask_words == p.mask_words);
    CHECK(q.mask_words_per_row == 4);
    CHECK(q.bias_ids == p.bias_ids);
    CHECK(q.bias_values == p.bias_values);
    StepPlan plain = p;
    plain.adjust.clear();
    CHECK(llama2::encode_step_plan(plain).size() == 7 + 2 * 7 + 4 + 2);
  }

  TEST_CASE("each rank's slice of the adjustments, applied to its columns, equals the full row's") {
    for (const int vocab : {200, 512, 33}) {
      for (const int tp : {1, 2, 3, 4}) {
        CAPTURE(vocab);
        CAPTURE(tp);
        const StepPlan full = adjusted_plan(vocab, static_cast<uint32_t>(vocab + tp));
        std::vector<float> rows(3 * static_cast<size_t>(vocab));
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 37) % 101) / 7.f;
        std::vector<float> want = rows;
        llama2::apply_adjustments(full, want.data(), 0, vocab);
        for (int r = 0; r < tp; ++r) {
          const int begin = r * vocab / tp, local = (r + 1) * vocab / tp - begin;
          const StepPlan mine = llama2::slice_adjustments(full, begin, local);
          // Only its words and biases travel; the wire holds them.
          const StepPlan wire = llama2::decode_step_plan(llama2::encode_step_plan(mine));
          CHECK(wire.mask_words.size() <= 2 * static_cast<size_t>((local + 31) / 32 + 1));
          for (int32_t id : wire.bias_ids) CHECK((id >= begin && id < begin + local));
          std::vector<float> part(3 * static_cast<size_t>(local));
          for (int row = 0; row < 3; ++row)
            std::copy_n(rows.begin() + row * vocab + begin, local, part.begin() + row * local);
          llama2::apply_adjustments(wire, part.data(), begin, local);
          for (int row = 0; row < 3; ++row) {
            CHECK(std::equal(part.begin() + row * local, part.begin() + (row + 1) * local,
                             want.begin() + row * vocab + begin));
          }
        }
        // The adjustments did something: some token masked, some biased.
        CHECK(std::count(want.begin(), want.end(), -std::numeric_limits<float>::infinity()) > 0);
        CHECK_FALSE(
            std::equal(want.begin() + vocab, want.begin() + 2 * vocab, rows.begin() + vocab));
      }
    }
  }

  TEST_CASE("bad adjustments are refused where they are made and on the wire") {
    StepPlan p = adjusted_plan(64, 3);
    llama2::VocabAdjust a;
    CHECK_THROWS_WITH_AS(llama2::add_row_adjust(&p, 1, a, 64), doctest::Contains("ascending"),
                         llama2::Error);
    StepPlan q;
    const int32_t tok[1] = {5}, table[1] = {0};
    llama2::append_seq(&q, 1, 0, tok, 1, 1, table, 1);
    a.allowed.assign(3, 0u);  // 64 tokens need 2 words
    CHECK_THROWS_WITH_AS(llama2::add_row_adjust(&q, 0, a, 64), doctest::Contains("2 words"),
                         llama2::Error);
    a.allowed.clear();
    a.bias_ids = {64};
    a.bias_values = {1.f};
    CHECK_THROWS_WITH_AS(llama2::add_row_adjust(&q, 0, a, 64), doctest::Contains("outside"),
                         llama2::Error);
    a.bias_ids = {3, 3};
    a.bias_values = {1.f, 2.f};
    CHECK_THROWS_WITH_AS(llama2::add_row_adjust(&q, 0, a, 64), doctest::Contains("twice"),
                         llama2::Error);
    // On the wire: the section starts after the block ids (7 + 2 * 7 + 4 + 2 = 27 words).
    const auto good = llama2::encode_step_plan(adjusted_plan(64, 4));
    auto bad = [&](size_t at, int32_t value) {
      auto w = good;
      w[at] = value;
      return decode_error(w);
    };
    constexpr size_t kSection = 27, kRows = kSection + 6;
    CHECK(decode_error(good).empty());
    CHECK(contains(bad(kSection, 0), "length mismatch"));       // no section magic
    CHECK(contains(bad(kRows, 3), "logit row 3"));              // past the step's 3 rows
    CHECK(contains(bad(kRows + 4, 0), "logit row 0"));          // rows out of order
    CHECK(contains(bad(kRows + 5, 7), "invalid fields"));       // mask past the words
    CHECK(contains(bad(kSection + 2, 16), "length mismatch"));  // mask base off a word
    auto score = good;
    score[1] = static_cast<int32_t>(StepKind::kScore);
    CHECK_FALSE(decode_error(score).empty());
    // A rank's slice whose mask does not cover its columns is refused before any write.
    const StepPlan sliced = llama2::slice_adjustments(adjusted_plan(64, 5), 32, 32);
    std::vector<float> cols(3 * 32, 0.f);
    CHECK_THROWS_AS(llama2::apply_adjustments(sliced, cols.data(), 0, 32), llama2::Error);
  }
}
