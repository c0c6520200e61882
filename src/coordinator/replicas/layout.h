// Data parallelism's rank layout (`--tp T` inside `mpirun -np N`): N/T replicas, each a
// tensor-parallel group of T consecutive world ranks, whose first rank (the replica's leader) runs
// its batch scheduler and KV bookkeeping. World rank 0 is also the front (the endpoint and the one
// request owner, docs/ARCHITECTURE.md "Data parallelism") and leads replica 0.
//
// A group never spans nodes: its all-reduces would go over the network at every layer. The node
// of each rank is its host name (or, for tests, LLAMA2_TEST_RANKS_PER_NODE, TuningKnobs); a
// layout that would put one group on two nodes is refused, naming the --tp values that fit.
// Pure functions: the MPI parts (gathering node names, splitting communicators) are in the caller.
#pragma once

#include <string>
#include <vector>

namespace llama2 {

struct ReplicaLayout {
  int world = 1;         // ranks in the job
  int tp = 1;            // ranks per replica
  int replicas = 1;      // engine ranks / tp
  int first = 0;         // world rank of replica 0's leader: 1 with a dedicated front, else 0
  int replica = 0;       // this rank's replica; -1 on a dedicated front (no engine)
  int replica_rank = 0;  // this rank's index inside its replica (0: the leader)

  bool front_only() const { return replica < 0; }
  bool leader() const { return replica >= 0 && replica_rank == 0; }
  int leader_of(int r) const { return first + r * tp; }  // world rank of replica r's leader
};

// The --tp values that divide the number of engine ranks (`node_of_rank` of every world rank,
// rank 0 left out when it is a dedicated front) and keep every group of consecutive engine ranks
// on one node (names: equal for ranks on the same node), ascending.
std::vector<int> valid_tp_values(const std::vector<std::string>& node_of_rank,
                                 bool dedicated_front = false);

// The layout of world rank `rank` for `tp` (0: every engine rank in one replica, the behaviour
// before data parallelism). With `dedicated_front`, world rank 0 runs no engine (the front only)
// and the replicas are made of ranks 1..N-1. Error when `tp` does not divide the engine ranks or
// a group would span nodes, naming the problem and the valid --tp values, e.g.
//   --tp 3 does not divide the 4 ranks of this job; valid --tp values: 1, 2, 4
//   --tp 4 puts replica 0 (ranks 0-3) on 2 nodes (a, b); a tensor-parallel group must stay on one
//   node: valid --tp values: 1, 2
ReplicaLayout make_replica_layout(int tp, int rank, const std::vector<std::string>& node_of_rank,
                                  bool dedicated_front = false);

// This rank's node for the layout check: "fake-node-<rank / ranks_per_node>" when the test hook
// gives ranks_per_node > 0, else the host name.
std::string node_name(int rank, int test_ranks_per_node);

}  // namespace llama2
