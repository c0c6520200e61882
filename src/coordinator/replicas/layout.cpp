#include "coordinator/replicas/layout.h"

#include <unistd.h>

#include <climits>
#include <set>

#include "common/check.h"

namespace llama2 {
namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// The first group of `tp` consecutive ranks from `first` on that lies on more than one node: its
// replica index and node names; -1 when none does.
int spanning_group(const std::vector<std::string>& nodes, int first, int tp,
                   std::set<std::string>* names) {
  const int world = static_cast<int>(nodes.size());
  for (int start = first; start < world; start += tp) {
    std::set<std::string> seen(nodes.begin() + start, nodes.begin() + start + tp);
    if (seen.size() > 1) {
      if (names != nullptr) *names = seen;
      return (start - first) / tp;
    }
  }
  return -1;
}

}  // namespace

std::vector<int> valid_tp_values(const std::vector<std::string>& node_of_rank,
                                 bool dedicated_front) {
  const int first = dedicated_front ? 1 : 0;
  const int engines = static_cast<int>(node_of_rank.size()) - first;
  std::vector<int> out;
  for (int tp = 1; tp <= engines; ++tp) {
    if (engines % tp == 0 && spanning_group(node_of_rank, first, tp, nullptr) < 0)
      out.push_back(tp);
  }
  return out;
}

ReplicaLayout make_replica_layout(int tp, int rank, const std::vector<std::string>& node_of_rank,
                                  bool dedicated_front) {
  const int world = static_cast<int>(node_of_rank.size());
  LLAMA2_CHECK(world >= 1 && rank >= 0 && rank < world);
  const int first = dedicated_front ? 1 : 0;
  const int engines = world - first;
  if (engines < 1) {
    throw Error(
        "--dedicated-front needs at least 2 ranks: rank 0 for the front, the others for "
        "the replicas (got 1)");
  }
  if (tp == 0) tp = engines;
  const std::string valid = join(valid_tp_values(node_of_rank, dedicated_front));
  const std::string ranks =
      dedicated_front
          ? std::to_string(engines) + " engine ranks of this job (rank 0 is the dedicated front)"
          : std::to_string(world) + " ranks of this job";
  if (tp < 0 || tp > engines || engines % tp != 0) {
    throw Error("--tp " + std::to_string(tp) + " does not divide the " + ranks +
                "; valid --tp values: " + valid);
  }
  std::set<std::string> names;
  const int bad = spanning_group(node_of_rank, first, tp, &names);
  if (bad >= 0) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    const int lo = first + bad * tp;
    throw Error("--tp " + std::to_string(tp) + " puts replica " + std::to_string(bad) + " (ranks " +
                std::to_string(lo) + "-" + std::to_string(lo + tp - 1) + ") on " +
                std::to_string(names.size()) + " nodes (" + list +
                "); a tensor-parallel group must stay on one node: valid --tp values: " + valid);
  }
  ReplicaLayout l;
  l.world = world;
  l.tp = tp;
  l.replicas = engines / tp;
  l.first = first;
  l.replica = rank < first ? -1 : (rank - first) / tp;
  l.replica_rank = rank < first ? 0 : (rank - first) % tp;
  return l;
}

std::string node_name(int rank, int test_ranks_per_node) {
  if (test_ranks_per_node > 0) return "fake-node-" + std::to_string(rank / test_ranks_per_node);
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

}  // namespace llama2
