// Checks the engine against fixtures computed by Hugging Face transformers
// (tests/reference/make_fixtures.py), under any rank count:
//
//   mpirun -np 2 llama2_reference_test --model tests/models/tiny-gqa
//       --fixture tests/reference/fixtures/tiny-gqa.json [--tolerance 1e-4] [--near-tie 0]
//       [--backend cpu|cuda] [--dtype auto|fp16|bf16|fp32] [--kv-cache-dtype auto|fp8]
//
// Per prompt it runs six KV-cache paths and compares their logits with the fixture:
//   token-by-token decode (logits at every position), one full prefill (last position), a
//   chunked prefill (chunks of 5, logits at each chunk end), twice mixed steps that decode one
//   sequence while another prefills in chunks of 3 (decoding row first, as the BatchScheduler
//   orders them, and last), and a prefix-cache hit (the prompt's full blocks computed by another
//   sequence, the rest token by token); only positions the fixture stores are compared (its
//   "logit_positions", or every position when absent). Then a 32-step greedy continuation through
//   the request owner and BatchScheduler, without and with prefix caching (a hit on the blocks of
//   the path before), each of which must equal HF's greedy ids. A divergence at a step where HF's
//   own top-2 margin is below --near-tie is a near-tie (HF in another rounding could pick either
//   token): it is reported, forgiven, and the rest of that continuation is not compared (the two
//   sequences no longer share a prefix).
//
// A fixture with "config_overrides" (tests/reference/make_rope_fixtures.py: rope_scaling) runs the
// model with those config.json keys changed. Under dynamic NTK scaling a position's logits depend
// on how its sequence was run, so the fixture holds transformers' prefills of each prefix
// ("logits": the full-prefill path and the logprobs requests), its token-by-token decode
// ("decode_logits") and its chunks of 5 ("chunk5_logits"); the mixed and prefix-hit paths, whose
// rows come from other lengths, are not run, and the greedy run with prefix caching has none.
//
// The last line is machine-readable (tests/reference/gpu_check.sh collects it):
//   RESULT model=.. backend=.. dtype=.. np=.. max_abs_diff=.. tolerance=.. compared=..
//   (dtype is e.g. "fp16", or "fp16+kv-fp8_e4m3" when the KV cache has its own element type)
//          greedy_identical=a/b near_tie=c mismatches=m prefix_hit_max_abs_diff=..
//          prefix_hit_compared=.. logprob_max_diff=.. logprobs_compared=.. logprob_failures=f
//          status=PASS|FAIL
//   (max_abs_diff covers every path, the prefix hit's included; prefix_hit_* is that path alone)
// Per prompt it also checks the logprobs requests report (reference_logprobs.h) against HF's
// log-softmax of the same rows, within 2x --tolerance.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/mpi_program.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"
#include "rank/engine.h"
#include "reference_logprobs.h"

namespace {

using llama2::StepPlan;
using nlohmann::json;

constexpr const char* kUsage =
    "usage: llama2_reference_test --model DIR --fixture FILE [--tolerance T] [--near-tie M] "
    "[--backend cpu|cuda] [--dtype auto|fp16|bf16|fp32] [--kv-cache-dtype auto|fp8] "
    "[--weight-dtype auto|fp8|int8|int4]";

struct Options {
  std::string model_dir, fixture_path, backend = "cpu", dtype = "auto", kv_cache_dtype = "auto",
                                       weight_dtype = "auto";
  double tolerance = 1e-4;
  double near_tie = 0.0;  // greedy divergences where HF's top-2 margin < near_tie are forgiven
};

double parse_number(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = NAN;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) throw llama2::Error(flag + ": not a number: '" + v + "'");
  return x;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw llama2::Error(a + ": missing value\n" + kUsage);
    const std::string v = argv[i + 1];
    if (a == "--model")
      o.model_dir = v;
    else if (a == "--fixture")
      o.fixture_path = v;
    else if (a == "--tolerance")
      o.tolerance = parse_number(a, v);
    else if (a == "--near-tie")
      o.near_tie = parse_number(a, v);
    else if (a == "--backend")
      o.backend = v;
    else if (a == "--dtype")
      o.dtype = v;
    else if (a == "--kv-cache-dtype")
      o.kv_cache_dtype = v;
    else if (a == "--weight-dtype")
      o.weight_dtype = v;
    // A misspelt flag must not silently leave a default (e.g. a stricter or looser tolerance).
    else
      throw llama2::Error("unknown flag " + a + "\n" + kUsage);
  }
  if (o.model_dir.empty() || o.fixture_path.empty()) throw llama2::Error(kUsage);
  if (!(o.tolerance >= 0.0) || !(o.near_tie >= 0.0)) {
    throw llama2::Error("--tolerance and --near-tie must be >= 0");
  }
  return o;
}

struct Stats {
  double max_diff = 0.0;
  long compared = 0;
};

// The fixture's logit rows of one prompt, by position: row i is position logit_positions[i]
// (large-vocabulary fixtures store only some positions), or position i when the key is absent.
struct ExpectedLogits {
  const json* rows = nullptr;
  std::map<int, size_t> row_of;  // position -> row index
};

// The rows under `key` with their positions under `positions_key` (absent: every position).
ExpectedLogits expected_logits(const json& prompt, int n_ids, const char* key = "logits",
                               const char* positions_key = "logit_positions") {
  ExpectedLogits e;
  e.rows = &prompt.at(key);
  const std::string where =
      "fixture prompt " + prompt.value("name", std::string("?")) + " \"" + key + "\"";
  if (prompt.contains(positions_key)) {
    const auto positions = prompt[positions_key].get<std::vector<int>>();
    if (positions.size() != e.rows->size()) {
      throw llama2::Error(where + ": " + std::to_string(positions.size()) +
                          " logit_positions but " + std::to_string(e.rows->size()) + " logit rows");
    }
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] < 0 || positions[i] >= n_ids) {
        throw llama2::Error(where + ": logit position " + std::to_string(positions[i]) +
                            " outside the prompt [0, " + std::to_string(n_ids) + ")");
      }
      e.row_of[positions[i]] = i;
    }
  } else {
    if (static_cast<int>(e.rows->size()) != n_ids) {
      throw llama2::Error(where + ": " + std::to_string(e.rows->size()) + " logit rows for " +
                          std::to_string(n_ids) + " prompt ids (and no logit_positions)");
    }
    for (int i = 0; i < n_ids; ++i) e.row_of[i] = static_cast<size_t>(i);
  }
  if (e.row_of.empty()) throw llama2::Error(where + ": no logits stored");
  return e;
}

// Runs `ids` through the engine in chunks of `chunk` tokens on fresh blocks; returns the logits
// [chunks, V] of each chunk's last token and the position of that token.
std::vector<std::pair<int, std::vector<float>>> run_chunks(llama2::RankEngine& engine,
                                                           llama2::BlockAllocator& blocks,
                                                           const std::vector<int>& ids, int chunk) {
  std::vector<int> table;
  LLAMA2_CHECK(blocks.ensure(&table, static_cast<int>(ids.size())));
  std::vector<std::pair<int, std::vector<float>>> out;
  for (int pos = 0; pos < static_cast<int>(ids.size()); pos += chunk) {
    const int n = std::min(chunk, static_cast<int>(ids.size()) - pos);
    StepPlan plan;
    llama2::append_seq(&plan, 0, pos, ids.data() + pos, n, true, table.data(),
                       llama2::BlockAllocator::blocks_for(pos + n, blocks.block_size()));
    std::vector<float> logits;
    engine.execute(plan, &logits);
    out.emplace_back(pos + n - 1, std::move(logits));
  }
  blocks.release(&table);
  return out;
}

// Mixed steps, as the BatchScheduler builds them while serving: sequence A decodes `ids` one token
// per step while sequence B, on its own blocks, prefills the same ids in chunks of 3 in the same
// steps (B first when `decode_first` is false, so A's one-token row is not in the leading decode
// part). Returns A's logits at every position and B's at each chunk end.
std::vector<std::pair<int, std::vector<float>>> run_mixed(llama2::RankEngine& engine,
                                                          llama2::BlockAllocator& blocks,
                                                          const std::vector<int>& ids,
                                                          bool decode_first) {
  const int n = static_cast<int>(ids.size()), V = engine.vocab_size();
  std::vector<int> table_a, table_b;
  LLAMA2_CHECK(blocks.ensure(&table_a, n) && blocks.ensure(&table_b, n));
  std::vector<std::pair<int, std::vector<float>>> out;
  for (int pos_a = 0, pos_b = 0; pos_a < n; ++pos_a) {
    StepPlan plan;
    std::vector<int> positions;  // of each logit row
    auto add = [&](const std::vector<int>& table, int pos, int count) {
      llama2::append_seq(&plan, static_cast<int>(plan.seqs.size()), pos, ids.data() + pos, count,
                         true, table.data(),
                         llama2::BlockAllocator::blocks_for(pos + count, blocks.block_size()));
      positions.push_back(pos + count - 1);
    };
    const int chunk = std::min(3, n - pos_b);
    if (decode_first) add(table_a, pos_a, 1);
    if (chunk > 0) add(table_b, pos_b, chunk);
    if (!decode_first) add(table_a, pos_a, 1);
    pos_b += chunk;
    std::vector<float> logits;
    engine.execute(plan, &logits);
    for (size_t r = 0; r < positions.size(); ++r) {
      out.emplace_back(positions[r],
                       std::vector<float>(logits.begin() + r * V, logits.begin() + (r + 1) * V));
    }
  }
  blocks.release(&table_a);
  blocks.release(&table_b);
  return out;
}

// The prefix cache's path: a donor sequence computes the prompt's full blocks before its last
// token followed by other tokens (as an earlier request sharing the prefix would) and registers
// them; the prompt then finds them through BlockAllocator::allocate and computes only the rest,
// token by token. Returns the logits at every position it computes (none when the prompt has no
// full block before its last token).
std::vector<std::pair<int, std::vector<float>>> run_prefix_hit(llama2::RankEngine& engine,
                                                               llama2::BlockAllocator& blocks,
                                                               const std::vector<int>& ids) {
  const int n = static_cast<int>(ids.size()), bs = blocks.block_size();
  const int shared = (n - 1) / bs * bs;
  if (shared == 0) return {};
  std::vector<int> donor(ids.begin(), ids.begin() + shared);
  donor.insert(donor.end(), ids.rbegin(), ids.rbegin() + std::min(n, 3));  // a different tail
  std::vector<int> table;
  llama2::PrefixChain chain;
  const std::optional<int> donor_hit =
      blocks.allocate(donor, static_cast<int>(donor.size()), true, &table, &chain);
  LLAMA2_CHECK(donor_hit.has_value());
  StepPlan plan;
  llama2::append_seq(&plan, 0, *donor_hit, donor.data() + *donor_hit,
                     static_cast<int>(donor.size()) - *donor_hit, true, table.data(),
                     static_cast<int>(table.size()));
  std::vector<float> logits;
  engine.execute(plan, &logits);
  blocks.cache_full_blocks(donor, static_cast<int>(donor.size()), table, &chain);
  blocks.release(&table);

  const std::optional<int> hit = blocks.allocate(ids, n, true, &table, &chain);
  LLAMA2_CHECK(hit.has_value() && *hit == shared);
  std::vector<std::pair<int, std::vector<float>>> out;
  for (int pos = shared; pos < n; ++pos) {
    StepPlan step;
    llama2::append_seq(&step, 0, pos, ids.data() + pos, 1, true, table.data(),
                       llama2::BlockAllocator::blocks_for(pos + 1, bs));
    engine.execute(step, &logits);
    out.emplace_back(pos, std::move(logits));
  }
  blocks.release(&table);
  return out;
}

// The model's config.json with the fixture's "config_overrides" merged in (the rope_scaling
// fixtures of make_rope_fixtures.py, made from the same merge), through the engine's parser.
llama2::ModelConfig fixture_config(const std::string& model_dir, const json& fixture) {
  if (!fixture.contains("config_overrides")) return llama2::load_model_config(model_dir);
  std::ifstream in(model_dir + "/config.json");
  json j = json::parse(in);
  for (const auto& [key, value] : fixture["config_overrides"].items()) j[key] = value;
  return llama2::parse_model_config(j, model_dir + "/config.json + the fixture's overrides");
}

// Compares the rows the fixture has; positions it does not store are skipped.
void compare(const ExpectedLogits& expected,
             const std::vector<std::pair<int, std::vector<float>>>& got, Stats* stats) {
  for (const auto& [pos, logits] : got) {
    const auto it = expected.row_of.find(pos);
    if (it == expected.row_of.end()) continue;
    const json& row = expected.rows->at(it->second);
    LLAMA2_CHECK(row.size() == logits.size());
    for (size_t v = 0; v < logits.size(); ++v) {
      const double d = std::fabs(row[v].get<double>() - logits[v]);
      stats->max_diff = std::max(stats->max_diff, std::isnan(d) ? INFINITY : d);
      ++stats->compared;
    }
  }
}

enum class GreedyKind { kIdentical, kNearTie, kMismatch };

struct GreedyVerdict {
  GreedyKind kind = GreedyKind::kIdentical;
  int step = -1;        // first differing step
  double margin = NAN;  // HF's top-2 margin there (NaN: not in the fixture)
};

// A near-tie is judged on HF's margin: the engine's own margin says nothing about which token a
// correctly rounded computation would pick.
GreedyVerdict judge_greedy(const std::vector<int>& want, const std::vector<int>& got,
                           const json& prompt, double near_tie) {
  GreedyVerdict r;
  for (size_t i = 0; i < want.size(); ++i) {
    if (i < got.size() && got[i] == want[i]) continue;
    r.step = static_cast<int>(i);
    const json* margins =
        prompt.contains("greedy_top2_margin") ? &prompt["greedy_top2_margin"] : nullptr;
    if (margins != nullptr && i < margins->size()) r.margin = (*margins)[i].get<double>();
    // A continuation that ended early is never a near-tie (NaN < x is false as well).
    r.kind = i < got.size() && r.margin < near_tie ? GreedyKind::kNearTie : GreedyKind::kMismatch;
    return r;
  }
  return r;
}

std::string describe(const GreedyVerdict& g, size_t n_steps, double near_tie) {
  char buf[160];
  switch (g.kind) {
    case GreedyKind::kIdentical:
      std::snprintf(buf, sizeof buf, "greedy identical (%zu tokens)", n_steps);
      break;
    case GreedyKind::kNearTie:
      std::snprintf(buf, sizeof buf,
                    "greedy near-tie at step %d (HF top-2 margin %.3g < %g): forgiven, first %d "
                    "tokens identical",
                    g.step, g.margin, near_tie, g.step);
      break;
    case GreedyKind::kMismatch:
      std::snprintf(buf, sizeof buf, "greedy differs at step %d (HF top-2 margin %.3g)", g.step,
                    g.margin);
      break;
  }
  return buf;
}

int run(int argc, char** argv, int rank, int size) {
  const Options opt = parse_options(argc, argv);
  std::ifstream in(opt.fixture_path);
  if (!in) throw llama2::Error("cannot open fixture " + opt.fixture_path);
  const json fixture = json::parse(in);
  const llama2::ModelConfig config = fixture_config(opt.model_dir, fixture);
  // Dynamic NTK RoPE: a position's logits depend on how its sequence was run (the fixture holds
  // transformers' runs that the engine's paths repeat; make_rope_fixtures.py).
  const bool dynamic = config.rope_scaling.type == llama2::RopeScalingType::kDynamic;
  const std::string model = fixture["model"].get<std::string>();

  int max_len = 0;
  for (const auto& p : fixture["prompts"]) {
    max_len = std::max<int>(max_len, static_cast<int>(p["prompt_ids"].size() + p["greedy"].size()));
  }
  llama2::EngineConfig cfg;
  cfg.model_dir = opt.model_dir;
  cfg.backend = llama2::parse_backend(opt.backend);
  cfg.dtype = llama2::parse_compute_dtype(opt.dtype);
  cfg.kv_cache_dtype = llama2::parse_kv_cache_dtype(opt.kv_cache_dtype);
  cfg.weight_dtype = llama2::parse_weight_dtype(opt.weight_dtype, &cfg.weight_dtype_named);
  cfg.max_batch = 4;
  cfg.prefill_chunk = 2048 - cfg.max_batch;  // a step of up to 2048 tokens
  cfg.block_size = 16;
  cfg.kv_cache_blocks = 4 * llama2::BlockAllocator::blocks_for(max_len, cfg.block_size);
  cfg.knobs = llama2::tuning_knobs_from_env();
  llama2::RankEngine engine(cfg, config, MPI_COMM_WORLD);
  if (rank != 0) return engine.worker_loop();

  llama2::Tokenizer tok(opt.model_dir + "/tokenizer.model");
  llama2::BlockAllocator blocks(cfg.kv_cache_blocks, cfg.block_size);
  Stats stats, hit_stats;
  int greedy_identical = 0, near_ties = 0, greedy_mismatches = 0, greedy_total = 0;
  int tokenizer_mismatches = 0;
  reference::LogprobStats logprobs;
  for (const auto& p : fixture["prompts"]) {
    const std::string name = p["name"].get<std::string>();
    const std::vector<int> ids = p["prompt_ids"].get<std::vector<int>>();
    // The fixture's ids came from the official SentencePiece (Python, possibly another version):
    // our tokenizer must produce the same ids for the same text.
    if (p.contains("text") && p["text"].is_string()) {
      const bool same = tok.encode(p["text"].get<std::string>(), true) == ids;
      if (!same) ++tokenizer_mismatches;
      std::printf("%s/%s: tokenizer ids %s the reference\n", model.c_str(), name.c_str(),
                  same ? "match" : "DIFFER from");
    }
    const int n = static_cast<int>(ids.size());
    const ExpectedLogits expected = expected_logits(p, n);
    Stats one;
    if (dynamic) {
      // "logits" are prefills of each prefix; token by token and chunks of 5 have rows of their
      // own. No mixed steps or prefix hit: their rows were computed at other lengths.
      compare(expected_logits(p, n, "decode_logits", ""), run_chunks(engine, blocks, ids, 1), &one);
      compare(expected, run_chunks(engine, blocks, ids, n), &one);
      compare(expected_logits(p, n, "chunk5_logits", "chunk5_positions"),
              run_chunks(engine, blocks, ids, 5), &one);
    } else {
      compare(expected, run_chunks(engine, blocks, ids, 1), &one);
      compare(expected, run_chunks(engine, blocks, ids, n), &one);
      compare(expected, run_chunks(engine, blocks, ids, 5), &one);
      compare(expected, run_mixed(engine, blocks, ids, true), &one);
      compare(expected, run_mixed(engine, blocks, ids, false), &one);
    }
    Stats hit;  // the prefix-hit path alone, also reported on its own
    if (!dynamic) compare(expected, run_prefix_hit(engine, blocks, ids), &hit);
    one.max_diff = std::max(one.max_diff, hit.max_diff);
    one.compared += hit.compared;
    hit_stats.max_diff = std::max(hit_stats.max_diff, hit.max_diff);
    hit_stats.compared += hit.compared;

    llama2::SamplingParams params;
    params.temperature = 0.0f;
    params.ignore_eos = true;
    params.max_new_tokens = static_cast<int>(p["greedy"].size());
    struct Greedy final : llama2::RequestEvents {
      std::vector<int> got;
      void on_finished(const llama2::Finished& r, const llama2::Timings&) override {
        got = r.tokens;
      }
    };
    // Twice: computing the whole prompt, then with prefix caching, where run_prefix_hit's blocks
    // hold the prompt's full blocks before its last token (a hit).
    const std::vector<int> want = p["greedy"].get<std::vector<int>>();
    std::string verdicts;
    for (const bool prefix_caching : {false, true}) {
      Greedy greedy;
      llama2::SchedulerOptions sopt{1, 512};
      sopt.prefix_caching = prefix_caching;
      llama2::Admission admission(llama2::AdmissionOptions{});
      llama2::BatchScheduler scheduler(tok, config, blocks, sopt);
      llama2::StepRunner runner(scheduler, engine);
      llama2::RequestOwner owner(admission, runner, greedy);
      const int64_t hits_before = blocks.counters().hit_tokens;
      LLAMA2_CHECK(!owner.submit({0, ids, params, 0}, admission.reserve(0)));
      while (!owner.idle()) owner.step();
      const GreedyVerdict g = judge_greedy(want, greedy.got, p, opt.near_tie);
      ++greedy_total;
      greedy_identical += g.kind == GreedyKind::kIdentical;
      near_ties += g.kind == GreedyKind::kNearTie;
      greedy_mismatches += g.kind == GreedyKind::kMismatch;
      verdicts += (verdicts.empty() ? "" : "; ") + describe(g, want.size(), opt.near_tie);
      if (prefix_caching) {
        verdicts += " with " + std::to_string(blocks.counters().hit_tokens - hits_before) +
                    " prompt tokens from the prefix cache";
      }
    }
    std::printf("%s/%s (np=%d): %zu prompt ids, max |logit diff| %.3g over %ld values, %s\n",
                model.c_str(), name.c_str(), size, ids.size(), one.max_diff, one.compared,
                verdicts.c_str());
    stats.max_diff = std::max(stats.max_diff, one.max_diff);
    stats.compared += one.compared;

    reference::LogprobStats lp;
    reference::check_logprobs(engine, tok, config, blocks, ids, *expected.rows, expected.row_of,
                              opt.tolerance, &lp);
    std::printf("%s/%s (np=%d): logprobs max |diff| %.3g over %ld values, %d failures\n",
                model.c_str(), name.c_str(), size, lp.max_diff, lp.compared, lp.failures);
    logprobs.max_diff = std::max(logprobs.max_diff, lp.max_diff);
    logprobs.compared += lp.compared;
    logprobs.failures += lp.failures;
  }
  const bool ok = stats.max_diff <= opt.tolerance && greedy_mismatches == 0 &&
                  tokenizer_mismatches == 0 && logprobs.failures == 0 && logprobs.compared > 0;
  std::printf(
      "%s: max |logit diff| %.3g (tolerance %.1g) over %ld values; greedy %d/%d identical, "
      "%d near-tie, %d mismatched; tokenizer mismatches %d; logprobs max |diff| %.3g "
      "(tolerance %.1g) over %ld values, %d failures: %s\n",
      model.c_str(), stats.max_diff, opt.tolerance, stats.compared, greedy_identical, greedy_total,
      near_ties, greedy_mismatches, tokenizer_mismatches, logprobs.max_diff, 2 * opt.tolerance,
      logprobs.compared, logprobs.failures, ok ? "PASS" : "FAIL");
  const std::string dtype_label =
      std::string(engine.dtype_name()) +
      (engine.settings().kv_cache_dtype == llama2::KvCacheDType::kAuto
           ? ""
           : std::string("+kv-") + engine.kv_dtype_name()) +
      (engine.settings().weight_dtype == llama2::WeightDType::kAuto
           ? ""
           : std::string("+w-") + llama2::weight_dtype_name(engine.settings().weight_dtype,
                                                            engine.settings().dtype));
  std::printf(
      "RESULT model=%s backend=%s dtype=%s np=%d max_abs_diff=%.3g tolerance=%g "
      "compared=%ld greedy_identical=%d/%d near_tie=%d mismatches=%d prefix_hit_max_abs_diff=%.3g "
      "prefix_hit_compared=%ld logprob_max_diff=%.3g logprobs_compared=%ld logprob_failures=%d "
      "status=%s\n",
      model.c_str(), engine.backend_name(), dtype_label.c_str(), size, stats.max_diff,
      opt.tolerance, stats.compared, greedy_identical, greedy_total, near_ties, greedy_mismatches,
      hit_stats.max_diff, hit_stats.compared, logprobs.max_diff, logprobs.compared,
      logprobs.failures, ok ? "PASS" : "FAIL");
  std::fflush(stdout);
  engine.shutdown(ok ? 0 : 1);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_reference_test", argc, argv, run);
}
