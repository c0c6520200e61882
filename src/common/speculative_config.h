// Speculative decoding's configuration (docs/speculative.md): which proposer offers tokens for the
// target to verify, how many per step, and above which batch no step speculates. Parsed once from
// --speculative and --speculative-max-batch; the engine sizes its logit rows and step tokens from
// it (EngineConfig), the batch scheduler proposes and verifies with it.
#pragma once

#include <cstdint>
#include <string>

namespace llama2 {

enum class SpecMethod {
  kNone,   // no speculation
  kNgram,  // prompt lookup: the tokens that followed the latest earlier match of the last n tokens
  kDraft,  // a smaller Llama with the same tokenizer (draft_dir)
};

// The most tokens one step may propose for one sequence.
constexpr int kMaxSpecTokens = 16;

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNone;
  int k = 0;              // proposed tokens per sequence and step, 1..kMaxSpecTokens (0: none)
  int min_match = 2;      // n-gram: the shortest suffix that may match
  int max_match = 4;      // n-gram: the longest suffix tried first (>= min_match)
  std::string draft_dir;  // draft: the draft model's directory
  // Above this many running sequences a step speculates for nobody (verification then costs more
  // than it saves). A placeholder until measured on the H200 (benchmarks/RESULTS.md).
  int max_batch = 8;

  bool enabled() const { return method != SpecMethod::kNone; }
  // Extra tokens (and logit rows) a step may carry beyond one per running sequence when at most
  // `max_batch_size` sequences run: K for each sequence that may speculate.
  int extra_rows(int max_batch_size) const;
  // "ngram:4:2:4", "draft:DIR:4" or "off", for start-up notes.
  std::string describe() const;
};

// Speculative decoding's counters since start (BatchScheduler::spec_counters, summed over the
// replicas for health, stats and /metrics): acceptance rate = accepted / proposed, tokens per
// verify step = emitted / verify_steps.
struct SpecCounters {
  SpecCounters& operator+=(const SpecCounters& o) {
    verify_steps += o.verify_steps;
    proposed += o.proposed;
    accepted += o.accepted;
    emitted += o.emitted;
    return *this;
  }
  int64_t verify_steps = 0;  // sequence-steps that verified at least one proposed token
  int64_t proposed = 0;      // tokens proposed in them
  int64_t accepted = 0;      // of those, tokens accepted
  int64_t emitted = 0;       // tokens those steps emitted (accepted + one drawn, unless a stop)
};

// --speculative's value: "ngram:K[:MIN_MATCH[:MAX_MATCH]]" or "draft:DIR:K" (K in 1..16,
// 1 <= MIN_MATCH <= MAX_MATCH <= 64; MAX_MATCH defaults to max(4, MIN_MATCH)). Error naming the
// allowed forms otherwise.
SpeculativeConfig parse_speculative(const std::string& spec);

}  // namespace llama2
