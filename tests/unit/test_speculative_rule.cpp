// Speculative sampling keeps the target's distribution (issue 39, docs/speculative.md): the
// rank-0 acceptance code (Sampler::verify, Sampler::sample for the bonus token) fed exact
// distributions of a small-vocabulary "model", against the target's exact per-position
// probabilities computed without speculation from the same prefixes.
//
// The model: V = 4 tokens, p(. | prefix) a fixed function of the prefix (every probability >=
// 0.04, so each expected count is >= 1,200 at 30,000 draws). Each draw generates the first K + 2
// tokens after a fixed prompt with speculation: the proposer offers up to K tokens, the target
// verifies them row by row (accept with min(1, p/q), else draw from the residual; a bonus token
// after K accepted), and verify steps repeat until K + 2 tokens exist. Three proposers: a draft
// equal to the target (every proposal accepted), an unrelated draft (the residual path), and
// n-gram-like point masses (a deterministic guess from the context). Per position, the counts of
// the 4 tokens are compared with the exact marginal (enumerated over all 4^(K+2) sequences) by a
// chi-square test, df = 3, alpha = 0.001 Bonferroni-corrected over the positions and cases. The
// same harness run with a deliberately wrong rule (after a rejection, draw from the target instead
// of the residual) must be rejected. Fixed seeds; ~0.5 s.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/sampling_params.h"
#include "coordinator/scheduler/sampler.h"
#include "coordinator/scheduler/speculative_rule.h"

namespace {

constexpr int kV = 4;
constexpr int kK = 3;
constexpr int kLen = kK + 2;  // positions compared
constexpr int kDraws = 30000;
using Dist = std::array<double, kV>;

// The target: a fixed, peaky-enough distribution per prefix (a hash of the context).
Dist target(const std::vector<int>& ctx) {
  uint64_t h = 1469598103934665603ull;
  for (int t : ctx) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  Dist p{};
  double sum = 0;
  for (int i = 0; i < kV; ++i) {
    p[i] = 1.0 + static_cast<double>((h >> (8 * i)) % 23);  // 1..23: p >= 1/(1 + 3 * 23) > 0.014
    sum += p[i];
  }
  for (double& x : p) x /= sum;
  return p;
}

// An unrelated draft: another hash, flatter.
Dist unrelated(const std::vector<int>& ctx) {
  Dist q{};
  const int last = ctx.empty() ? 0 : ctx.back();
  for (int i = 0; i < kV; ++i) q[i] = (i == (last + 1) % kV) ? 0.55 : 0.15;
  return q;
}

// P(position j = token t) under the target, by enumerating every sequence of kLen tokens.
std::array<Dist, kLen> exact_marginals(const std::vector<int>& prompt) {
  std::array<Dist, kLen> m{};
  std::function<void(std::vector<int>&, double)> walk = [&](std::vector<int>& ctx, double prob) {
    const int j = static_cast<int>(ctx.size() - prompt.size());
    if (j == kLen) return;
    const Dist p = target(ctx);
    for (int t = 0; t < kV; ++t) {
      m[static_cast<size_t>(j)][static_cast<size_t>(t)] += prob * p[static_cast<size_t>(t)];
      ctx.push_back(t);
      walk(ctx, prob * p[static_cast<size_t>(t)]);
      ctx.pop_back();
    }
  };
  std::vector<int> ctx = prompt;
  walk(ctx, 1.0);
  return m;
}

// Survival function of the chi-square distribution with 3 degrees of freedom.
double chi2_sf_df3(double x) {
  return std::erfc(std::sqrt(x / 2)) + std::sqrt(2 * x / M_PI) * std::exp(-x / 2);
}

enum class Proposer { kDraftIsTarget, kUnrelatedDraft, kNgram };
const char* name(Proposer p) {
  switch (p) {
    case Proposer::kDraftIsTarget:
      return "draft = target";
    case Proposer::kUnrelatedDraft:
      return "unrelated draft";
    case Proposer::kNgram:
      return "n-gram";
  }
  return "?";
}

// One verify row: the token the row gives for `proposal` drawn from q (null: a point mass) and
// whether it was accepted. The engine's rule (Sampler::verify) or a wrong one.
using Verifier = std::function<int(llama2::Sampler&, std::mt19937_64&, const Dist& p, int proposal,
                                   const float* q, bool* accepted)>;

std::vector<float> logits_of(const Dist& p) {
  std::vector<float> l(kV);
  for (int i = 0; i < kV; ++i)
    l[static_cast<size_t>(i)] = static_cast<float>(std::log(p[static_cast<size_t>(i)]));
  return l;
}

int engine_verify(llama2::Sampler& s, std::mt19937_64&, const Dist& p, int proposal, const float* q,
                  bool* accepted) {
  std::vector<float> l = logits_of(p);
  return s.verify(l, {}, proposal, q, accepted);
}

// The deliberately wrong variant: the acceptance test right, but a rejection draws from the
// target itself instead of the residual.
int wrong_verify(llama2::Sampler&, std::mt19937_64& rng, const Dist& p, int proposal,
                 const float* q, bool* accepted) {
  std::uniform_real_distribution<double> u(0, 1);
  Dist qd{};
  for (int i = 0; i < kV; ++i) qd[static_cast<size_t>(i)] = q != nullptr ? q[i] : (i == proposal);
  *accepted = llama2::speculative_accepts(p.data(), qd.data(), kV, proposal, u(rng));
  return *accepted ? proposal : static_cast<int>(llama2::inverse_cdf_pick(p.data(), kV, u(rng)));
}

// Counts [kLen][kV] of the first kLen tokens after `prompt`, generated with speculation.
std::array<std::array<int, kV>, kLen> run(Proposer how, const Verifier& verify, uint64_t seed,
                                          const std::vector<int>& prompt) {
  llama2::SamplingParams params;  // temperature 1, no cuts: the distribution is p itself
  llama2::Sampler sampler(params, seed);
  std::mt19937_64 draft_rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> u(0, 1);
  std::array<std::array<int, kV>, kLen> counts{};
  for (int d = 0; d < kDraws; ++d) {
    std::vector<int> ctx = prompt;
    while (static_cast<int>(ctx.size() - prompt.size()) < kLen) {
      // Propose K tokens (each drawn from the draft given the proposals before it), verify them.
      std::vector<int> proposal;
      std::vector<std::vector<float>> qs;
      std::vector<int> ext = ctx;
      for (int i = 0; i < kK; ++i) {
        if (how == Proposer::kNgram) {
          // A point mass: the token two back, as prompt lookup repeats what came before.
          proposal.push_back(ext[ext.size() - 2]);
        } else {
          const Dist q = how == Proposer::kDraftIsTarget ? target(ext) : unrelated(ext);
          std::vector<float> qf(q.begin(), q.end());
          proposal.push_back(
              static_cast<int>(llama2::inverse_cdf_pick(q.data(), kV, u(draft_rng))));
          qs.push_back(std::move(qf));
        }
        ext.push_back(proposal.back());
      }
      bool all = true;
      for (int i = 0; i < kK && all; ++i) {
        bool accepted = false;
        const float* q = qs.empty() ? nullptr : qs[static_cast<size_t>(i)].data();
        ctx.push_back(verify(sampler, draft_rng, target(ctx), proposal[static_cast<size_t>(i)], q,
                             &accepted));
        all = accepted;
      }
      if (all) {  // the bonus token
        std::vector<float> l = logits_of(target(ctx));
        ctx.push_back(sampler.sample(l, {}));
      }
    }
    for (int j = 0; j < kLen; ++j)
      ++counts[static_cast<size_t>(j)]
              [static_cast<size_t>(ctx[prompt.size() + static_cast<size_t>(j)])];
  }
  return counts;
}

constexpr Proposer kCases[] = {Proposer::kDraftIsTarget, Proposer::kUnrelatedDraft,
                               Proposer::kNgram};
// alpha = 0.001 over kLen positions x 3 cases.
constexpr double kAlpha = 0.001 / (kLen * 3);

// The smallest p-value over the positions of one case.
double min_p_value(Proposer how, const Verifier& verify, uint64_t seed, std::string* report) {
  const std::vector<int> prompt = {1, 2};
  const auto exact = exact_marginals(prompt);
  const auto counts = run(how, verify, seed, prompt);
  double worst = 1;
  for (int j = 0; j < kLen; ++j) {
    double chi2 = 0;
    for (int t = 0; t < kV; ++t) {
      const double e = kDraws * exact[static_cast<size_t>(j)][static_cast<size_t>(t)];
      const double o = counts[static_cast<size_t>(j)][static_cast<size_t>(t)];
      chi2 += (o - e) * (o - e) / e;
    }
    worst = std::min(worst, chi2_sf_df3(chi2));
  }
  *report += std::string(name(how)) + ": min p " + std::to_string(worst) + "; ";
  return worst;
}

}  // namespace

TEST_SUITE("speculative_rule") {
  TEST_CASE("chi-square with 3 degrees of freedom: known quantiles") {
    CHECK(chi2_sf_df3(7.814728) == doctest::Approx(0.05).epsilon(1e-4));
    CHECK(chi2_sf_df3(16.266236) == doctest::Approx(0.001).epsilon(1e-3));
  }

  TEST_CASE("the exact marginals are distributions") {
    for (const Dist& m : exact_marginals({1, 2})) {
      double s = 0;
      for (double x : m) s += x;
      CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
    }
  }

  TEST_CASE("speculative sampling follows the target: draft = target, unrelated draft, n-gram") {
    std::string report;
    uint64_t seed = 39;
    for (Proposer how : kCases) {
      CAPTURE(name(how));
      CHECK(min_p_value(how, engine_verify, seed++, &report) > kAlpha);
    }
    MESSAGE(report);
  }

  TEST_CASE("the same test rejects resampling from the target instead of the residual") {
    std::string report;
    double worst = 1;
    uint64_t seed = 39;
    for (Proposer how : kCases)
      worst = std::min(worst, min_p_value(how, wrong_verify, seed++, &report));
    MESSAGE(report);
    CHECK(worst < kAlpha);
  }
}
