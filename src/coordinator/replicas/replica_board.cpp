#include "coordinator/replicas/replica_board.h"

namespace llama2 {

nlohmann::json replicas_json(const std::vector<ReplicaStat>& stats) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < stats.size(); ++i) {
    const ReplicaStat& s = stats[i];
    out.push_back({{"replica", i},
                   {"running", s.gauges.running},
                   {"pending", s.gauges.pending},
                   {"kv_blocks_used", s.gauges.kv_used},
                   {"kv_blocks_total", s.gauges.kv_total},
                   {"admitted", s.admitted}});
  }
  return out;
}

std::string replicas_prometheus(const std::vector<ReplicaStat>& stats) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (size_t i = 0; i < stats.size(); ++i) {
      out += std::string(name) + "{replica=\"" + std::to_string(i) + "\"} " +
             std::to_string(value(stats[i])) + "\n";
    }
  };
  family("llama2_replica_running", "gauge", "Sequences running on the replica.",
         [](const ReplicaStat& s) { return s.gauges.running; });
  family("llama2_replica_kv_blocks_used", "gauge", "KV cache blocks in use on the replica.",
         [](const ReplicaStat& s) { return s.gauges.kv_used; });
  family("llama2_replica_kv_blocks_total", "gauge", "KV cache blocks of the replica.",
         [](const ReplicaStat& s) { return s.gauges.kv_total; });
  family("llama2_replica_requests_admitted_total", "counter",
         "Requests the front dispatched to the replica.",
         [](const ReplicaStat& s) { return s.admitted; });
  return out;
}

}  // namespace llama2
