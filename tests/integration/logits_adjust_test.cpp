// Per-row vocabulary adjustments (StepPlan::adjust) and several logit rows per sequence, end to
// end through the engine under any rank count:
//
//   mpirun -np N llama2_logits_adjust_test --model tests/models/tiny-gqa [--backend cpu|cuda]
//
// (On a GPU node: --model tests/models/small-d64 --backend cuda, a head size the CUDA kernels
// have; the CUDA runner converts adjusted rows to fp32 before its reductions, so rows and
// candidates are equal bit for bit there too, the log-sum-exp within fp32 summation error.)
//
// One step of three sequences asks for 3 + 1 + 2 logit rows (several consecutive positions of a
// sequence, as speculative verification does), with allowed-token masks (a random third of the
// vocabulary, tokens of the last rank's slice only, three tokens only), additive biases (one that
// makes a token the best, one that sinks the best) and both together. Rank 0 sends each rank only
// its slice's mask words and biases; every rank applies them before its reductions. The same step
// without adjustments, gathered as full rows and adjusted here on rank 0 (the reference), must give
// for every row: the same full rows (bit for bit), the same best candidates (ids and values, for
// k = 1, 8 and 64), and the same log-sum-exp (logprobs) within 1e-6 (each rank's slice sum travels
// as fp32).
#include "rank/logits_adjust.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "common/step_plan.h"
#include "coordinator/cli/mpi_program.h"
#include "rank/engine.h"
#include "rank/logits_gather.h"

namespace {

using llama2::StepLogits;
using llama2::StepPlan;
using llama2::VocabAdjust;

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("FAIL: %s\n", what.c_str());
}

// Three sequences prefilled from position 0, logits at their last 3, 1 and 2 tokens, logprobs on.
StepPlan base_plan(int candidates) {
  StepPlan p;
  p.candidates = candidates;
  const std::vector<int32_t> a = {1, 15, 27, 99, 120, 7}, b = {1, 300, 41, 5},
                             c = {1, 8, 77, 9, 65};
  const int32_t ta[1] = {0}, tb[1] = {1}, tc[1] = {2};
  llama2::append_seq(&p, 1, 0, a.data(), 6, 3, ta, 1, true);
  llama2::append_seq(&p, 2, 0, b.data(), 4, 1, tb, 1, true);
  llama2::append_seq(&p, 3, 0, c.data(), 5, 2, tc, 1, true);
  return p;
}

VocabAdjust mask_of(int vocab, const std::vector<int>& allowed) {
  VocabAdjust a;
  a.allowed.assign(static_cast<size_t>((vocab + 31) / 32), 0u);
  for (int id : allowed) a.allowed[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  return a;
}

// The adjustments of rows 0..5: each kind, alone and together; one row left alone.
void add_adjustments(StepPlan* p, int vocab, const std::vector<float>& plain) {
  std::mt19937 rng(7);
  std::vector<int> third;
  for (int id = 0; id < vocab; ++id)
    if (rng() % 3 == 0) third.push_back(id);
  llama2::add_row_adjust(p, 0, mask_of(vocab, third), vocab);
  // Row 1: raise a mid-ranked token above the best, sink the best.
  const float* r1 = plain.data() + vocab;
  const int best = static_cast<int>(std::max_element(r1, r1 + vocab) - r1);
  VocabAdjust bias;
  bias.bias_ids = {(best + 17) % vocab, best};
  bias.bias_values = {50.f, -50.f};
  llama2::add_row_adjust(p, 1, bias, vocab);
  // Row 2: nothing. Row 3: tokens of the last quarter of the vocabulary only, plus biases.
  std::vector<int> last;
  for (int id = vocab - vocab / 4; id < vocab; ++id) last.push_back(id);
  VocabAdjust both = mask_of(vocab, last);
  both.bias_ids = {vocab - 1, 3};  // 3 is masked: its bias changes nothing
  both.bias_values = {2.5f, 100.f};
  llama2::add_row_adjust(p, 3, both, vocab);
  // Row 4: three tokens in three different places: fewer than the candidates asked for.
  llama2::add_row_adjust(p, 4, mask_of(vocab, {2, vocab / 2, vocab - 3}), vocab);
  VocabAdjust small;
  small.bias_ids = {0, vocab / 3};
  small.bias_values = {-1.f, 0.125f};
  llama2::add_row_adjust(p, 5, small, vocab);
}

// The reference: full rows adjusted on rank 0, their top k in StepLogits' order and lse.
struct Reference {
  std::vector<float> rows;  // [6, vocab]
  std::vector<double> lse;  // [6]
};

Reference reference(const StepPlan& adjusted, const StepLogits& plain) {
  Reference r;
  r.rows = plain.values;
  llama2::apply_adjustments(adjusted, r.rows.data(), 0, plain.width);
  StepLogits full;
  full.rows = plain.rows;
  full.width = plain.width;
  full.values = r.rows;
  llama2::lse_from_full_rows(std::vector<int32_t>(static_cast<size_t>(plain.rows), 1), &full);
  r.lse = full.lse;
  return r;
}

std::vector<int> ranked(const float* row, int vocab) {
  std::vector<int> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  // Larger first, equal values by lower id (std::sort: libstdc++ 12's stable_sort uses the
  // deprecated get_temporary_buffer, which clang reports).
  std::sort(ids.begin(), ids.end(),
            [row](int a, int b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  return ids;
}

void compare(const Reference& want, const StepLogits& got, int k, int vocab, double lse_tol) {
  const std::string at = " (k=" + std::to_string(k) + ")";
  expect(got.rows == 6, "6 logit rows" + at);
  if (got.rows != 6) return;
  for (int r = 0; r < 6; ++r) {
    const std::string row = " row " + std::to_string(r) + at;
    const float* w = want.rows.data() + static_cast<size_t>(r) * vocab;
    // Each rank's sum of exponentials travels as fp32: last bits of the log-sum-exp may differ.
    expect(std::fabs(got.lse[r] - want.lse[r]) <= lse_tol, "log-sum-exp" + row);
    if (k == 0) {
      expect(std::equal(w, w + vocab, got.values.begin() + static_cast<size_t>(r) * vocab),
             "full row bit for bit" + row);
      continue;
    }
    const std::vector<int> order = ranked(w, vocab);
    for (int j = 0; j < k; ++j) {
      const size_t o = static_cast<size_t>(r) * k + j;
      const float v = w[order[j]];
      if (std::isinf(v)) {  // past the allowed tokens: only -inf may follow
        expect(std::isinf(got.values[o]) && got.values[o] < 0, "masked tail" + row);
        continue;
      }
      expect(got.ids[o] == order[j] && got.values[o] == v,
             "candidate " + std::to_string(j) + row + ": got " + std::to_string(got.ids[o]) +
                 ", want " + std::to_string(order[j]));
    }
  }
}

int run(int argc, char** argv, int rank, int) {
  const bool backend_given = argc == 5 && std::string(argv[3]) == "--backend";
  if ((argc != 3 && !backend_given) || std::string(argv[1]) != "--model") {
    throw llama2::Error("usage: llama2_logits_adjust_test --model DIR [--backend cpu|cuda]");
  }
  const llama2::ModelConfig config = llama2::load_model_config(argv[2]);
  llama2::EngineConfig cfg;
  cfg.model_dir = argv[2];
  cfg.backend = backend_given ? llama2::parse_backend(argv[4]) : llama2::Backend::kCpu;
  cfg.max_batch = 8;
  cfg.prefill_chunk = 64;
  cfg.block_size = 16;
  cfg.kv_cache_blocks = 4;
  cfg.knobs = llama2::tuning_knobs_from_env();
  llama2::RankEngine engine(cfg, config, MPI_COMM_WORLD);
  if (rank != 0) return engine.worker_loop();

  const int vocab = config.vocab_size;
  // The CPU sums each slice in double; the CUDA kernel in fp32 over the slice.
  const double lse_tol = engine.settings().backend == llama2::Backend::kCuda ? 1e-4 : 1e-6;
  StepLogits plain;
  engine.execute(base_plan(0), &plain);
  StepPlan adjusted = base_plan(0);
  add_adjustments(&adjusted, vocab, plain.values);
  const Reference want = reference(adjusted, plain);
  for (const int k : {0, 1, 8, 64}) {
    StepPlan p = base_plan(k);
    add_adjustments(&p, vocab, plain.values);
    StepLogits got;
    engine.execute(p, &got);
    compare(want, got, k, vocab, lse_tol);
  }
  // The rows really changed: an adjustment that did nothing would pass every check above.
  const float* r1 = plain.values.data() + vocab;
  const float* a1 = want.rows.data() + vocab;
  expect(std::max_element(r1, r1 + vocab) - r1 != std::max_element(a1, a1 + vocab) - a1,
         "row 1's bias changes its best token");
  int np = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  std::printf("RESULT logits_adjust backend=%s np=%d failures=%d status=%s\n",
              engine.backend_name(), np, failures, failures == 0 ? "PASS" : "FAIL");
  std::fflush(stdout);
  engine.shutdown(failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_logits_adjust_test", argc, argv, run);
}
