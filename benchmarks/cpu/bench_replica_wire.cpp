// The front's cost per token event under data parallelism (docs/ARCHITECTURE.md, "Data
// parallelism"): a leader packs one step's TokenEvents into a message (WireWriter), the front
// decodes it (read_wire) and builds each event's protocol line (SocketServer::token_event, what
// the socket bridge queues per streamed token). Measures the encode side and the front's side
// separately, per event, for steps of 1, 64 and 512 events with 4-byte and 32-byte text pieces.
// The MPI transfer itself is not included (one message per step, whatever its size).
//
//   build/llama2_bench_replica_wire        (no MPI; best of 5 runs of >= 200k events per cell)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "coordinator/replicas/replica_wire.h"
#include "coordinator/serving/socket_server.h"

namespace {

struct Front final : llama2::WireVisitor {
  void on_gauges(const llama2::ReplicaGauges& g) override { steps += g.steps; }
  void on_token(const llama2::TokenEvent& ev) override {
    bytes += llama2::SocketServer::token_event("\"req-1234\"", ev.index, ev.token, ev.text).size();
  }
  size_t bytes = 0;
  int64_t steps = 0;
};

}  // namespace

int main() {
  using Clock = std::chrono::steady_clock;
  std::printf(
      "| events per step | text bytes | leader encode ns/event | front decode + format "
      "ns/event |\n|---|---|---|---|\n");
  for (int per_step : {1, 64, 512}) {
    for (int text : {4, 32}) {
      std::vector<llama2::TokenEvent> evs;
      for (int i = 0; i < per_step; ++i)
        evs.push_back({1000 + i, 17 + i, 300 + i, std::string(static_cast<size_t>(text), 'a')});
      const int steps = std::max(1, 200000 / per_step);
      double best_enc = 1e30, best_dec = 1e30;
      for (int run = 0; run < 5; ++run) {
        std::vector<std::string> msgs(static_cast<size_t>(steps));
        const auto t0 = Clock::now();
        for (int s = 0; s < steps; ++s) {
          llama2::WireWriter w;
          w.gauges({per_step, 0, 100, 1000, s});
          for (const llama2::TokenEvent& ev : evs) w.token(ev);
          msgs[static_cast<size_t>(s)] = w.take();
        }
        const auto t1 = Clock::now();
        Front front;
        for (const std::string& m : msgs) llama2::read_wire(m.data(), m.size(), front);
        const auto t2 = Clock::now();
        const double n = double(steps) * per_step;
        best_enc =
            std::min(best_enc, std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
        best_dec =
            std::min(best_dec, std::chrono::duration<double, std::nano>(t2 - t1).count() / n);
        if (front.bytes == 0) return 1;  // keep the work observable
      }
      std::printf("| %d | %d | %.0f | %.0f |\n", per_step, text, best_enc, best_dec);
    }
  }
  return 0;
}
