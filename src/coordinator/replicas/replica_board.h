// What `health` and `stats` say about each replica: written by the front's engine thread
// (ReplicaSet), read by the socket thread, under one lock.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "coordinator/replicas/replica_wire.h"

namespace llama2 {

struct ReplicaStat {
  ReplicaGauges gauges;   // the leader's latest report (the in-process replica: exact)
  uint64_t admitted = 0;  // requests the front has dispatched to it
};

class ReplicaBoard {
 public:
  explicit ReplicaBoard(int replicas) : stats_(static_cast<size_t>(replicas)) {}
  void set(int replica, const ReplicaStat& s) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.at(static_cast<size_t>(replica)) = s;
  }
  std::vector<ReplicaStat> snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<ReplicaStat> stats_;
};

// health's "replicas": [{"replica": i, "running", "pending", "kv_blocks_used", "kv_blocks_total",
// "admitted"}, ...].
nlohmann::json replicas_json(const std::vector<ReplicaStat>& stats);
// Prometheus lines with a replica="i" label: llama2_replica_running,
// llama2_replica_kv_blocks_used, llama2_replica_kv_blocks_total,
// llama2_replica_requests_admitted_total. The job's totals are the unlabelled metrics.
std::string replicas_prometheus(const std::vector<ReplicaStat>& stats);

}  // namespace llama2
