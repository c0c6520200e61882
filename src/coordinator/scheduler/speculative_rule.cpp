#include "coordinator/scheduler/speculative_rule.h"

#include <algorithm>
#include <vector>

#include "common/check.h"

namespace llama2 {

size_t inverse_cdf_pick(const double* w, size_t n, double u) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += w[i];
  LLAMA2_CHECK(n > 0 && total > 0);
  const double target = u * total;
  double cumulative = 0;
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += w[i];
    if (target < cumulative) return i;
    if (w[i] > 0) last = i;
  }
  return last;
}

namespace {
double total_of(const double* p, size_t n) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += p[i];
  LLAMA2_CHECK(n > 0 && total > 0);
  return total;
}
}  // namespace

bool speculative_accepts(const double* p, const double* q, size_t n, long x, double u) {
  LLAMA2_CHECK(x < static_cast<long>(n));
  if (x < 0) return false;
  const double px = p[x] / total_of(p, n), qx = q != nullptr ? q[x] : 1.0;
  // u * q < p accepts with probability min(1, p/q); q(x) == 0 (a proposal its own proposer could
  // not have drawn) accepts whenever p(x) > 0, the rule's limit.
  return px > 0 && (qx <= 0 || u * qx < px);
}

size_t speculative_resample(const double* p, const double* q, size_t n, long x, double u) {
  const double total = total_of(p, n);
  // The residual max(0, p - q), both normalized; q outside the target's entries does not matter
  // (p is 0 there).
  std::vector<double> residual(n);
  double mass = 0;
  for (size_t i = 0; i < n; ++i) {
    const double qi = q != nullptr ? q[i] : (static_cast<long>(i) == x ? 1.0 : 0.0);
    residual[i] = std::max(0.0, p[i] / total - qi);
    mass += residual[i];
  }
  // A rejection leaves mass > 0 in exact arithmetic (p(x) < q(x) means p > q elsewhere); rounding
  // can leave none only where p and q agree to the last bits: then p itself is the answer.
  if (!(mass > 0)) return inverse_cdf_pick(p, n, u);
  return inverse_cdf_pick(residual.data(), n, u);
}

}  // namespace llama2
