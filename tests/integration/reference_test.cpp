// Checks the engine against fixtures computed by Hugging Face transformers
// (tests/reference/make_fixtures.py), under any rank count:
//
//   mpirun -np 2 llama2_reference_test --model tests/models/tiny-gqa
//       --fixture tests/reference/fixtures/tiny-gqa.json [--tolerance 1e-4]
//
// Per prompt it runs three KV-cache paths and compares their logits with the fixture:
//   token-by-token decode (logits at every position), one full prefill (last position) and a
//   chunked prefill (chunks of 5, logits at each chunk end); then a 32-step greedy continuation
//   through the Generator, which must equal HF's greedy ids.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/block_allocator.h"
#include "coordinator/generator.h"
#include "coordinator/tokenizer.h"
#include "rank/engine.h"

namespace {

using llama2::StepPlan;
using nlohmann::json;

struct Stats {
  double max_diff = 0.0;
  long compared = 0;
};

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
    llama2::SeqStep s;
    s.pos_begin = pos;
    s.n_tokens = n;
    s.want_logits = 1;
    s.table_len = llama2::BlockAllocator::blocks_for(pos + n, blocks.block_size());
    plan.seqs.push_back(s);
    plan.tokens.assign(ids.begin() + pos, ids.begin() + pos + n);
    plan.block_ids.assign(table.begin(), table.begin() + s.table_len);
    std::vector<float> logits;
    engine.execute(plan, &logits);
    out.emplace_back(pos + n - 1, std::move(logits));
  }
  blocks.release(&table);
  return out;
}

void compare(const json& expected_rows, const std::vector<std::pair<int, std::vector<float>>>& got,
             Stats* stats) {
  for (const auto& [pos, logits] : got) {
    const json& row = expected_rows.at(pos);
    LLAMA2_CHECK(row.size() == logits.size());
    for (size_t v = 0; v < logits.size(); ++v) {
      const double d = std::fabs(row[v].get<double>() - logits[v]);
      stats->max_diff = std::max(stats->max_diff, std::isnan(d) ? INFINITY : d);
      ++stats->compared;
    }
  }
}

int run(int argc, char** argv, int rank, int size) {
  std::string model_dir, fixture_path, backend = "cpu", dtype = "auto";
  double tolerance = 1e-4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model_dir = argv[i + 1];
    else if (a == "--fixture") fixture_path = argv[i + 1];
    else if (a == "--tolerance") tolerance = std::stod(argv[i + 1]);
    else if (a == "--backend") backend = argv[i + 1];
    else if (a == "--dtype") dtype = argv[i + 1];
  }
  if (model_dir.empty() || fixture_path.empty()) {
    throw llama2::Error("usage: llama2_reference_test --model DIR --fixture FILE [--tolerance T]");
  }
  std::ifstream in(fixture_path);
  if (!in) throw llama2::Error("cannot open fixture " + fixture_path);
  const json fixture = json::parse(in);
  const llama2::ModelConfig config = llama2::load_model_config(model_dir);

  int max_len = 0;
  for (const auto& p : fixture["prompts"]) {
    max_len = std::max<int>(max_len, static_cast<int>(p["prompt_ids"].size() + p["greedy"].size()));
  }
  llama2::EngineSpec spec;
  spec.model_dir = model_dir;
  spec.backend = backend;
  spec.dtype = dtype;
  spec.max_batch = 4;
  spec.kv = {16, 4 * llama2::BlockAllocator::blocks_for(max_len, 16)};
  llama2::RankEngine engine(spec, config, MPI_COMM_WORLD);
  if (rank != 0) return engine.worker_loop();

  llama2::Tokenizer tok(model_dir + "/tokenizer.model");
  llama2::BlockAllocator blocks(spec.kv.num_blocks, spec.kv.block_size);
  Stats stats;
  int greedy_mismatches = 0, greedy_total = 0, tokenizer_mismatches = 0;
  for (const auto& p : fixture["prompts"]) {
    const std::vector<int> ids = p["prompt_ids"].get<std::vector<int>>();
    // The fixture's ids came from the official SentencePiece (Python, possibly another version):
    // our tokenizer must produce the same ids for the same text.
    if (p.contains("text") && p["text"].is_string()) {
      const bool same = tok.encode(p["text"].get<std::string>(), true) == ids;
      if (!same) ++tokenizer_mismatches;
      std::printf("%s/%s: tokenizer ids %s the reference\n", fixture["model"].get<std::string>().c_str(),
                  p["name"].get<std::string>().c_str(), same ? "match" : "DIFFER from");
    }
    Stats one;
    compare(p["logits"], run_chunks(engine, blocks, ids, 1), &one);
    compare(p["logits"], run_chunks(engine, blocks, ids, static_cast<int>(ids.size())), &one);
    compare(p["logits"], run_chunks(engine, blocks, ids, 5), &one);

    llama2::SamplingParams params;
    params.temperature = 0.0f;
    params.ignore_eos = true;
    params.max_new_tokens = static_cast<int>(p["greedy"].size());
    std::vector<int> got;
    llama2::GeneratorCallbacks cb;
    cb.on_done = [&](const llama2::GenResult& r) { got = r.tokens; };
    llama2::Generator gen(engine, tok, config, blocks, {1, 512}, cb);
    gen.add({0, ids, params, 0});
    while (!gen.idle()) gen.step();
    const std::vector<int> want = p["greedy"].get<std::vector<int>>();
    int first_diff = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      if (i >= got.size() || got[i] != want[i]) {
        first_diff = static_cast<int>(i);
        break;
      }
    }
    ++greedy_total;
    if (first_diff >= 0) ++greedy_mismatches;
    std::printf("%s/%s (np=%d): %zu prompt ids, max |logit diff| %.3g over %ld values, greedy %s\n",
                fixture["model"].get<std::string>().c_str(), p["name"].get<std::string>().c_str(),
                size, ids.size(), one.max_diff, one.compared,
                first_diff < 0 ? "identical (32 tokens)"
                               : ("differs at step " + std::to_string(first_diff)).c_str());
    stats.max_diff = std::max(stats.max_diff, one.max_diff);
    stats.compared += one.compared;
  }
  const bool ok = stats.max_diff <= tolerance && greedy_mismatches == 0 && tokenizer_mismatches == 0;
  std::printf("%s: max |logit diff| %.3g (tolerance %.1g) over %ld values; greedy %d/%d identical: %s\n",
              fixture["model"].get<std::string>().c_str(), stats.max_diff, tolerance,
              stats.compared, greedy_total - greedy_mismatches, greedy_total, ok ? "PASS" : "FAIL");
  engine.shutdown(ok ? 0 : 1);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  llama2::set_error_rank(rank);
  int code = 1;
  try {
    code = run(argc, argv, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama2_reference_test: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
