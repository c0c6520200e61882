// The data-parallel roles of an engine command's ranks once the engine is open (session.h,
// coordinator/replicas/): world rank 0 is the front and leads replica 0 in process (unless it is a
// dedicated front, serve --dedicated-front, with no engine); every other replica's first rank is a
// leader serving the front over MPI; the rest run the worker loop.
#pragma once

#include <memory>
#include <vector>

#include "coordinator/cli/session.h"
#include "coordinator/replicas/replica_link.h"
#include "coordinator/replicas/replica_set.h"

namespace llama2 {

// Rank 0: the link to the other replicas' leaders (collective with them), or null when there are
// none.
std::unique_ptr<ReplicaLink> open_front_link(const Session& session);
// Rank 0: the replicas it reaches over the link (1.., or all of them on a dedicated front).
std::vector<RemoteReplica> remote_replicas(const Session& session);
// A leader of a replica other than 0: opens its end of the link, serves the front until it
// says shut down (run_replica_leader), shuts its engine's workers down; returns the exit code.
int run_as_replica_leader(Session& session);

}  // namespace llama2
