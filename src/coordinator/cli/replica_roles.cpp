#include "coordinator/cli/replica_roles.h"

#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/replicas/replica_leader.h"

namespace llama2 {

std::unique_ptr<ReplicaLink> open_front_link(const Session& session) {
  if (session.layout.replicas <= 1 && !session.layout.front_only()) return nullptr;
  return std::make_unique<ReplicaLink>(session.front_comm);
}

std::vector<RemoteReplica> remote_replicas(const Session& session) {
  std::vector<RemoteReplica> out;
  // The link's ranks are world rank 0 and then the leaders in world order.
  const ReplicaLayout& l = session.layout;
  for (int r = l.front_only() ? 0 : 1; r < l.replicas; ++r) {
    out.push_back(
        RemoteReplica{r + l.first, l.leader_of(r), session.replica_blocks[static_cast<size_t>(r)]});
  }
  return out;
}

int run_as_replica_leader(Session& session) {
  LLAMA2_CHECK(session.layout.leader() && session.layout.leader_of(session.layout.replica) != 0);
  ReplicaLink link(session.front_comm);
  BlockAllocator blocks(session.num_blocks, session.block_size);
  const int code = run_replica_leader(*session.engine, *session.tokenizer, session.config, blocks,
                                      scheduler_options(session.settings), link);
  session.engine->shutdown(code);
  return code;
}

}  // namespace llama2
