// --deterministic (issue 41) through the engine under any rank count: a request's tokens and
// logits do not depend on its batch mates, on how its prompt is chunked or on prefix-cache hits.
//
//   mpirun -np N llama2_deterministic_test --model DIR [--prompts 16] [--new-tokens 8]
//       [--perturb] [--backend cpu|cuda] [--dtype auto|fp16|bf16|fp32] [--synthetic 7b]
//
// --backend cuda (one GPU per rank; exits 77, a skip, when fewer are visible) runs the same four
// ways through the CUDA engine's batch-invariant kernels; --synthetic 7b|13b|70b uses that
// official shape with random weights made on each GPU instead of --model's checkpoint (no
// --model needed; keep --prompts and --new-tokens small there: every logit row of every run is
// kept, 128 KB each at a 32000-token vocabulary).
//
// Rank 0 drives RankEngine with its own StepPlans (as logits_diff.cpp does) and samples with the
// Sampler the batch scheduler uses (one per request, seeded). 16 prompts (random ids, 17-56
// tokens), each decoded greedily and by seeded top-p sampling, run four ways:
//   (a) alone, the prompt prefilled in one step;
//   (b) alone, the prompt prefilled in chunks of 7 tokens;
//   (c) inside a batch of 64 sequences: all 16 requests enter two steps apart among random mates
//       (random prompts, lengths, prompt chunks and token counts, replaced as they end), so that
//       every step mixes prefill chunks and decodes;
//   (d) after a prefix-cache hit: a donor sequence (the prompt's full blocks, then other tokens,
//       prefilled in chunks of 5 among mates) registers its blocks with BlockAllocator's prefix
//       cache; the request then gets them through allocate() as the scheduler does and
//       prefills only its suffix.
// Every logit row (the full vocabulary) and every token of (b), (c) and (d) must equal (a)'s bit
// for bit (memcmp). --perturb adds one ulp to one logit of a (c) run before the comparison and
// passes only when the comparison reports exactly that value: the check can fail.
// Rank 0 prints a last line:
//   RESULT deterministic np=N prompts=P rows=R values=V failures=F status=PASS|FAIL
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/capacity.h"
#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/mpi_program.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/sampler.h"
#include "rank/engine.h"
#include "rank/local_rank.h"

namespace {

using llama2::BlockAllocator;
using llama2::SamplingParams;

constexpr int kBatch = 64;      // sequences per step in (c)
constexpr int kBlockSize = 16;  // KV block size: the prefix cache shares whole blocks
constexpr int kChunk = 7;       // (b)'s prompt chunk
constexpr int kDonorChunk = 5;  // (d)'s donor prompt chunk
constexpr int kMaxPrompt = 56;  // the requests' prompts: 17..kMaxPrompt tokens
constexpr int kMaxMatePrompt = 40;
constexpr int kMaxMateTokens = 12;

struct Options {
  std::string model, synthetic;
  llama2::Backend backend = llama2::Backend::kCpu;
  llama2::ComputeDType dtype = llama2::ComputeDType::kAuto;
  int prompts = 16, new_tokens = 8;
  bool perturb = false;
  bool deterministic = true;  // --no-deterministic: the engine's default, to see what the flag does
};

// What one run of one request gives: its tokens and the logit row each was sampled from.
struct Record {
  std::vector<int> tokens;
  std::vector<float> logits;  // [tokens, vocab]
};

// One sequence of a run: a request (sampled with its own Sampler, recorded) or a random mate.
struct Seq {
  int id = 0;
  std::vector<int> known;  // prompt, then the tokens generated so far
  int prompt_len = 0;
  int chunk = 0;              // prompt tokens per step; 0: the whole prompt in one step
  int new_tokens = 0;         // tokens to generate
  int in_cache = 0;           // positions whose K/V are computed
  bool prefix_cache = false;  // reserve through the prefix cache, register its full blocks
  std::vector<int> table;
  llama2::PrefixChain chain;
  std::optional<llama2::Sampler> sampler;  // requests; mates take random tokens
  Record* record = nullptr;                // requests
  bool done() const { return static_cast<int>(known.size()) - prompt_len >= new_tokens; }
};

// Runs steps over a set of sequences on rank 0: every unfinished sequence takes part in every step
// with its next prompt chunk or its last token.
class Driver {
 public:
  Driver(llama2::RankEngine& engine, BlockAllocator& blocks, uint64_t seed)
      : engine_(engine), blocks_(blocks), rng_(seed) {}

  // Reserves the sequence's blocks (through the prefix cache when it asks: the tokens it finds
  // cached are not computed again) and adds it to the next step. Returns those tokens' count.
  int admit(std::unique_ptr<Seq> s) {
    if (s->prefix_cache) {
      const std::optional<int> hit =
          blocks_.allocate(s->known, static_cast<int>(s->known.size()), true, &s->table, &s->chain);
      LLAMA2_CHECK(hit.has_value());
      s->in_cache = *hit;
    } else {
      LLAMA2_CHECK(blocks_.ensure(&s->table, static_cast<int>(s->known.size())));
    }
    const int hit = s->in_cache;
    running_.push_back(std::move(s));
    return hit;
  }
  int running() const { return static_cast<int>(running_.size()); }

  // One step of every running sequence; finished ones leave (blocks released unless `keep`).
  void step(bool keep = false) {
    llama2::StepPlan plan;
    std::vector<int> fed;
    for (auto& s : running_) {
      const int pending = static_cast<int>(s->known.size()) - s->in_cache;
      const int n = s->chunk > 0 ? std::min(pending, s->chunk) : pending;
      LLAMA2_CHECK(blocks_.ensure(&s->table, s->in_cache + n));
      llama2::append_seq(&plan, s->id, s->in_cache, s->known.data() + s->in_cache, n,
                         s->in_cache + n == static_cast<int>(s->known.size()) ? 1 : 0,
                         s->table.data(), static_cast<int>(s->table.size()));
      fed.push_back(n);
    }
    std::vector<float> logits;
    engine_.execute(plan, &logits);
    const int vocab = engine_.vocab_size();
    int row = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      Seq& s = *running_[i];
      s.in_cache += fed[i];
      if (s.prefix_cache) blocks_.cache_full_blocks(s.known, s.in_cache, s.table, &s.chain);
      if (plan.seqs[i].n_logits == 0) continue;
      const float* r = logits.data() + static_cast<size_t>(row++) * vocab;
      s.known.push_back(next_token(s, r, vocab));
    }
    finish(keep);
  }
  void run_to_end() {
    while (!running_.empty()) step();
  }
  // Ends every running sequence (their blocks released).
  void release_all() {
    for (auto& s : running_) blocks_.release(&s->table);
    running_.clear();
  }
  // The finished sequences kept by step(keep = true), blocks still held.
  std::vector<std::unique_ptr<Seq>>& kept() { return kept_; }
  std::mt19937_64& rng() { return rng_; }

 private:
  int next_token(Seq& s, const float* row, int vocab) {
    if (!s.sampler) return 3 + static_cast<int>(rng_() % static_cast<uint64_t>(vocab - 3));
    s.record->logits.insert(s.record->logits.end(), row, row + vocab);
    std::vector<float> copy(row, row + vocab);  // the sampler writes its penalties into it
    const int token = s.sampler->sample(copy, s.known);
    s.record->tokens.push_back(token);
    return token;
  }
  void finish(bool keep) {
    for (auto it = running_.begin(); it != running_.end();) {
      if (!(*it)->done()) {
        ++it;
        continue;
      }
      if (keep) {
        kept_.push_back(std::move(*it));
      } else {
        blocks_.release(&(*it)->table);
      }
      it = running_.erase(it);
    }
  }

  llama2::RankEngine& engine_;
  BlockAllocator& blocks_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<Seq>> running_, kept_;
};

// A request: its prompt and how it samples (greedy, or top-p with a seed).
struct Request {
  std::vector<int> prompt;
  SamplingParams params;
  uint64_t seed = 0;
};

std::unique_ptr<Seq> request_seq(const Request& q, Record* record, int id, int chunk,
                                 int new_tokens) {
  auto s = std::make_unique<Seq>();
  s->id = id;
  s->known = q.prompt;
  s->prompt_len = static_cast<int>(q.prompt.size());
  s->chunk = chunk;
  s->new_tokens = new_tokens;
  s->sampler.emplace(q.params, q.seed);
  s->record = record;
  return s;
}

// A mate: random prompt of 1..kMaxMatePrompt ids, prefilled whole or in chunks of 3, 8 or 16,
// then 1..kMaxMateTokens random tokens.
std::unique_ptr<Seq> mate_seq(std::mt19937_64& rng, int vocab, int id) {
  auto s = std::make_unique<Seq>();
  s->id = id;
  s->prompt_len = 1 + static_cast<int>(rng() % kMaxMatePrompt);
  for (int i = 0; i < s->prompt_len; ++i)
    s->known.push_back(3 + static_cast<int>(rng() % static_cast<uint64_t>(vocab - 3)));
  const int chunks[] = {0, 3, 8, 16};
  s->chunk = chunks[rng() % 4];
  s->new_tokens = 1 + static_cast<int>(rng() % kMaxMateTokens);
  return s;
}

// (a) and (b): the request alone, its prompt whole (chunk 0) or in chunks.
Record run_alone(llama2::RankEngine& engine, BlockAllocator& blocks, const Request& q, int chunk,
                 int new_tokens) {
  Record r;
  Driver d(engine, blocks, 1);
  d.admit(request_seq(q, &r, 0, chunk, new_tokens));
  d.run_to_end();
  return r;
}

// (c): every request of `reqs`, entering two steps apart (or as soon as a slot frees) into a batch
// kept at kBatch sequences by random mates, prompts whole.
std::vector<Record> run_batch(llama2::RankEngine& engine, BlockAllocator& blocks,
                              const std::vector<Request>& reqs, int new_tokens, uint64_t seed) {
  std::vector<Record> records(reqs.size());
  Driver d(engine, blocks, seed);
  const int vocab = engine.vocab_size();
  size_t admitted = 0;
  int mates = 0;
  auto all_done = [&] {
    for (const Record& r : records)
      if (static_cast<int>(r.tokens.size()) < new_tokens) return false;
    return true;
  };
  for (int step = 0; admitted < reqs.size() || !all_done(); ++step) {
    auto due = [&] { return admitted < reqs.size() && step >= 2 * static_cast<int>(admitted); };
    if (due() && d.running() < kBatch) {
      d.admit(request_seq(reqs[admitted], &records[admitted], static_cast<int>(admitted), 0,
                          new_tokens));
      ++admitted;
    }
    // Mates take the free slots, except one a due request waits for.
    while (d.running() < kBatch - (due() ? 1 : 0)) {
      d.admit(mate_seq(d.rng(), vocab, 1000 + mates++));
    }
    d.step();
  }
  d.release_all();
  return records;
}

// The tokens of `prompt` the prefix cache can serve: its full blocks, less the one holding its
// last token (BlockAllocator::allocate never reuses that one).
int cacheable(const std::vector<int>& prompt) {
  return (static_cast<int>(prompt.size()) - 1) / kBlockSize * kBlockSize;
}

// (d)'s donor: the prompt's cacheable blocks followed by 5 other tokens, prefilled in chunks of
// kDonorChunk beside 3 mates, its full blocks registered in the prefix cache (and left there,
// evictable, when it ends).
void run_donor(llama2::RankEngine& engine, BlockAllocator& blocks, const std::vector<int>& prompt,
               uint64_t seed) {
  Driver d(engine, blocks, seed);
  auto donor = std::make_unique<Seq>();
  donor->known.assign(prompt.begin(), prompt.begin() + cacheable(prompt));
  for (int i = 0; i < 5; ++i)
    donor->known.push_back(3 + static_cast<int>(d.rng()() % (engine.vocab_size() - 3)));
  donor->prompt_len = static_cast<int>(donor->known.size());
  donor->chunk = kDonorChunk;
  donor->new_tokens = 1;
  donor->prefix_cache = true;
  d.admit(std::move(donor));
  for (int m = 0; m < 3; ++m) d.admit(mate_seq(d.rng(), engine.vocab_size(), 1 + m));
  d.run_to_end();
}

// (d): the request after run_donor, its first blocks from the prefix cache; *hit gets the tokens
// found there.
Record run_prefix_hit(llama2::RankEngine& engine, BlockAllocator& blocks, const Request& q,
                      int new_tokens, int* hit) {
  Record r;
  Driver d(engine, blocks, 1);
  auto s = request_seq(q, &r, 0, 0, new_tokens);
  s->prefix_cache = true;
  *hit = d.admit(std::move(s));
  d.run_to_end();
  return r;
}

// "" when `got` equals `want` bit for bit; else where they first differ. *values: how many logit
// values differ (bit patterns) over the rows both have.
std::string compare(const Record& want, const Record& got, int vocab, int64_t* values) {
  *values = 0;
  const size_t rows = std::min(want.tokens.size(), got.tokens.size());
  std::string first;
  for (size_t i = 0; i < rows * static_cast<size_t>(vocab); ++i) {
    if (std::memcmp(&want.logits[i], &got.logits[i], sizeof(float)) == 0) continue;
    if ((*values)++ > 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "logit row %zu token %zu: %.9g vs %.9g", i / vocab, i % vocab,
                  static_cast<double>(want.logits[i]), static_cast<double>(got.logits[i]));
    first = buf;
  }
  if (!first.empty()) return first + " (" + std::to_string(*values) + " values differ)";
  if (want.tokens != got.tokens) {
    for (size_t i = 0; i < rows; ++i) {
      if (want.tokens[i] != got.tokens[i]) {
        return "token " + std::to_string(i) + ": " + std::to_string(want.tokens[i]) + " vs " +
               std::to_string(got.tokens[i]);
      }
    }
    return std::to_string(want.tokens.size()) + " tokens vs " + std::to_string(got.tokens.size());
  }
  return "";
}

Options parse_options(int argc, char** argv) {
  const char* usage =
      "usage: llama2_deterministic_test --model DIR | --synthetic 7b|13b|70b [--prompts N] "
      "[--new-tokens N] [--perturb] [--backend cpu|cuda] [--dtype auto|fp16|bf16|fp32]";
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--perturb" || a == "--no-deterministic") {
      (a == "--perturb" ? o.perturb : o.deterministic) = a == "--perturb";
      continue;
    }
    if (i + 1 >= argc) throw llama2::Error(a + " needs a value\n" + usage);
    const std::string v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--prompts") {
      o.prompts = std::stoi(v);
    } else if (a == "--new-tokens") {
      o.new_tokens = std::stoi(v);
    } else if (a == "--synthetic") {
      o.synthetic = v;
    } else if (a == "--dtype") {
      o.dtype = llama2::parse_compute_dtype(v);
    } else if (a == "--backend") {
      if (v != "cpu" && v != "cuda") {
        throw llama2::Error("--backend must be cpu or cuda (got \"" + v + "\")\n" + usage);
      }
      o.backend = v == "cuda" ? llama2::Backend::kCuda : llama2::Backend::kCpu;
    } else {
      throw llama2::Error("unknown option " + a + "\n" + usage);
    }
  }
  if (o.model.empty() == o.synthetic.empty() || o.prompts < 2 || o.new_tokens < 1) {
    throw llama2::Error(usage);
  }
  if (!o.synthetic.empty() && o.backend != llama2::Backend::kCuda) {
    throw llama2::Error("--synthetic needs --backend cuda (the weights are made on the GPU)");
  }
  return o;
}

// The requests of one sampling mode: prompts of 17..kMaxPrompt random ids after BOS, greedy or
// top-p 0.9 at temperature 0.8 with a seed of their own.
std::vector<Request> make_requests(const Options& opt, const llama2::ModelConfig& c, bool top_p) {
  std::mt19937_64 rng(41);
  std::vector<Request> reqs(static_cast<size_t>(opt.prompts));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request& q = reqs[i];
    const int len = 17 + static_cast<int>(rng() % (kMaxPrompt - 16));
    q.prompt.push_back(c.bos_token_id);
    while (static_cast<int>(q.prompt.size()) < len)
      q.prompt.push_back(3 + static_cast<int>(rng() % static_cast<uint64_t>(c.vocab_size - 3)));
    q.params.temperature = top_p ? 0.8f : 0.0f;
    q.params.top_p = top_p ? 0.9f : 1.0f;
    q.seed = 1000 + i;
  }
  return reqs;
}

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Every request of every mode run the four ways: runs[mode][request][way], way 0..3 = (a)..(d).
using Runs = std::vector<std::vector<std::vector<Record>>>;

Runs run_all(llama2::RankEngine& engine, const Options& opt,
             const std::vector<std::vector<Request>>& modes, int* failures) {
  const auto t0 = std::chrono::steady_clock::now();
  BlockAllocator blocks(engine.kv().num_blocks, kBlockSize, /*salt=*/1);
  Runs runs(modes.size(), std::vector<std::vector<Record>>(static_cast<size_t>(opt.prompts),
                                                           std::vector<Record>(4)));
  for (int i = 0; i < opt.prompts; ++i) {
    run_donor(engine, blocks, modes[0][i].prompt, 500 + i);
    for (size_t m = 0; m < modes.size(); ++m) {
      const Request& q = modes[m][i];
      runs[m][i][0] = run_alone(engine, blocks, q, 0, opt.new_tokens);
      runs[m][i][1] = run_alone(engine, blocks, q, kChunk, opt.new_tokens);
      int hit = 0;
      runs[m][i][3] = run_prefix_hit(engine, blocks, q, opt.new_tokens, &hit);
      if (hit != cacheable(q.prompt)) {
        std::printf("FAIL: prompt %d: %d tokens from the prefix cache, expected %d\n", i, hit,
                    cacheable(q.prompt));
        ++*failures;
      }
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  for (size_t m = 0; m < modes.size(); ++m) {
    std::vector<Record> batch = run_batch(engine, blocks, modes[m], opt.new_tokens, 77 + m);
    for (int i = 0; i < opt.prompts; ++i) runs[m][i][2] = std::move(batch[i]);
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("runs (a), (b), (d): %.1f s; (c): %.1f s\n", seconds(t0, t1), seconds(t1, t2));
  return runs;
}

const char* const kModeNames[] = {"greedy", "top-p"};
const char* const kWayNames[] = {"(a) alone", "(b) chunks of 7", "(c) batch of 64",
                                 "(d) prefix-cache hit"};

// Compares (b), (c) and (d) of every request with its (a); prints each difference. Returns the
// number of runs that differ; *perturbed_seen: whether the one --perturb changed was reported as
// one differing value.
int compare_runs(const Runs& runs, int vocab, const Options& opt, int64_t* rows,
                 bool* perturbed_seen) {
  int differ = 0;
  for (size_t m = 0; m < runs.size(); ++m) {
    for (size_t i = 0; i < runs[m].size(); ++i) {
      const Record& a = runs[m][i][0];
      if (static_cast<int>(a.tokens.size()) != opt.new_tokens) ++differ;
      for (int w = 1; w < 4; ++w) {
        int64_t values = 0;
        const std::string diff = compare(a, runs[m][i][w], vocab, &values);
        *rows += static_cast<int64_t>(runs[m][i][w].tokens.size());
        if (diff.empty()) continue;
        ++differ;
        std::printf("DIFF: prompt %zu %s %s vs (a): %s\n", i, kModeNames[m], kWayNames[w],
                    diff.c_str());
        if (opt.perturb && m == 0 && i == 1 && w == 2 && values == 1) *perturbed_seen = true;
      }
    }
  }
  return differ;
}

// Whether top-p sampling really sampled: some request's tokens differ from its greedy ones.
bool sampling_differs(const Runs& runs) {
  for (size_t i = 0; i < runs[0].size(); ++i) {
    if (runs[0][i][0].tokens != runs[1][i][0].tokens) return true;
  }
  return false;
}

int run(int argc, char** argv, int rank, int size) {
  const Options opt = parse_options(argc, argv);
  if (opt.backend == llama2::Backend::kCuda && llama2::visible_cuda_devices() < size) {
    // One GPU per rank (all ranks on this node, as ctest starts them).
    if (rank == 0) std::printf("%d rank(s) need as many visible GPUs: skipped\n", size);
    return 77;
  }
  const llama2::ModelConfig config = opt.synthetic.empty() ? llama2::load_model_config(opt.model)
                                                           : llama2::preset_config(opt.synthetic);
  llama2::EngineConfig cfg;
  cfg.model_dir = opt.model;
  cfg.synthetic = opt.synthetic;
  cfg.backend = opt.backend;
  cfg.dtype = opt.dtype;
  cfg.deterministic = opt.deterministic;
  cfg.max_batch = kBatch;
  cfg.prefill_chunk = kBatch * kMaxPrompt;
  cfg.block_size = kBlockSize;
  cfg.kv_cache_blocks = 8 * kBatch;
  cfg.knobs = llama2::tuning_knobs_from_env();
  llama2::RankEngine engine(cfg, config, MPI_COMM_WORLD);
  if (rank != 0) return engine.worker_loop();

  std::printf("%s", engine.startup_report().c_str());
  const std::vector<std::vector<Request>> modes = {make_requests(opt, config, false),
                                                   make_requests(opt, config, true)};
  int failures = 0;
  Runs runs = run_all(engine, opt, modes, &failures);
  if (opt.perturb) {  // one ulp up on one logit of request 1's greedy (c) run
    float& v = runs[0][1][2].logits[static_cast<size_t>(config.vocab_size) + 7];
    v = std::nextafter(v, INFINITY);
  }
  int64_t rows = 0;
  bool perturbed_seen = false;
  const int differ = compare_runs(runs, config.vocab_size, opt, &rows, &perturbed_seen);
  if (!sampling_differs(runs)) {
    std::printf("FAIL: top-p sampling gave the greedy tokens for every prompt\n");
    ++failures;
  }
  if (opt.perturb) {
    // The one changed value must be the only difference, and be reported.
    const bool caught = perturbed_seen && differ == 1;
    std::printf("perturbation %s\n", caught ? "reported as the only difference" : "NOT caught");
    failures += caught ? 0 : 1;
  } else {
    failures += differ;
  }
  std::printf("RESULT deterministic np=%d prompts=%d rows=%lld values=%lld failures=%d status=%s\n",
              size, opt.prompts, static_cast<long long>(rows),
              static_cast<long long>(rows) * config.vocab_size, failures,
              failures == 0 ? "PASS" : "FAIL");
  std::fflush(stdout);
  engine.shutdown(failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return llama2::run_mpi_program("llama2_deterministic_test", argc, argv, run);
}
