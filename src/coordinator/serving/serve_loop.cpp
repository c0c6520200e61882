#include "coordinator/serving/serve_loop.h"

#include <iostream>
#include <optional>

#include "common/check.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

void EngineDispatch::handle(EngineCommand& cmd, RequestOwner& owner) {
  switch (cmd.kind) {
    case EngineCommand::Kind::kGenerate:
      return submit(cmd, owner);
    case EngineCommand::Kind::kDisconnect:
      owner.disconnect(cmd.client);
      return;
    case EngineCommand::Kind::kCancel:
    case EngineCommand::Kind::kExpired: {
      // A generation the endpoint already answered at its deadline ends as a timeout; an unknown
      // ticket has finished meanwhile.
      const auto it = tickets_.find(cmd.ticket);
      if (it == tickets_.end()) return;
      owner.cancel(it->second, cmd.kind == EngineCommand::Kind::kExpired
                                   ? FinishReason::kTimeout
                                   : FinishReason::kCancelled);
      return;
    }
  }
}

void EngineDispatch::submit(EngineCommand& cmd, RequestOwner& owner) {
  LLAMA2_CHECK(cmd.sink != nullptr);
  const int64_t id = next_id_++;
  const uint64_t seed = cmd.request.params.seed.value_or(seeder_());
  routes_[id] = Route{cmd.ticket, cmd.sink};
  tickets_[cmd.ticket] = id;
  std::optional<Refusal> refusal =
      owner.submit(SubmitRequest{id, std::move(cmd.request.prompt), cmd.request.params, seed,
                                 std::move(cmd.request.constraint)},
                   std::move(cmd.place), cmd.deadline, cmd.client);
  if (!refusal) return;
  // The endpoint checked the same limits: only a limit changed since gets here.
  cmd.sink->on_error(refusal->code, refusal->message);
  tickets_.erase(cmd.ticket);
  routes_.erase(id);
}

void EngineDispatch::on_token(const TokenEvent& ev) {
  const Route& r = routes_.at(ev.id);
  r.sink->on_token(ev);
  touched_.push_back(r.sink);  // a sink twice is woken twice: cheaper than looking it up
}

void EngineDispatch::on_finished(const Finished& done, const Timings& t) {
  const auto it = routes_.find(done.id);
  LLAMA2_CHECK(it != routes_.end());
  const Route r = it->second;
  routes_.erase(it);
  tickets_.erase(r.ticket);
  if (done.finish_reason == FinishReason::kShuttingDown) {
    r.sink->on_shut_down(done, t);
  } else {
    r.sink->on_finished(done, t);
  }
}

void EngineDispatch::flush() {
  if (touched_.empty()) return;
  // One flush per flusher (endpoint), with all of its sinks. (No std::stable_partition: libstdc++
  // 12's uses the deprecated get_temporary_buffer, which clang reports.)
  std::vector<std::shared_ptr<EventSink>> group, others;
  while (!touched_.empty()) {
    SinkFlusher& f = touched_.front()->flusher();
    group.clear();
    others.clear();
    for (std::shared_ptr<EventSink>& s : touched_) {
      (&s->flusher() == &f ? group : others).push_back(std::move(s));
    }
    touched_.swap(others);
    f.flush(group);
  }
}

json health_event(const EngineInbox& inbox, const Admission& admission, const HealthInfo& info) {
  const Gauges g = admission.gauges();
  return json{{"event", "health"},
              {"status", inbox.stalled()    ? "stalled"
                         : inbox.draining() ? "draining"
                                            : "ready"},
              {"ranks", info.ranks},
              {"backend", to_string(info.backend)},
              {"dtype", to_string(info.dtype)},
              {"kv_cache_dtype", kv_dtype_name(info.kv_cache_dtype, info.dtype)},
              {"model", info.model},
              {"kv_blocks_total", g.kv_blocks_total},
              {"kv_blocks_used", g.kv_blocks_used},
              {"kv_blocks_cached", g.kv_blocks_cached},
              {"prefix_cache",
               {{"queried_tokens", g.prefix_queried_tokens},
                {"hit_tokens", g.prefix_hit_tokens},
                {"hit_rate", g.prefix_hit_rate()},
                {"evicted_blocks", g.prefix_evicted_blocks}}},
              {"speculative",
               {{"verify_steps", g.spec.verify_steps},
                {"proposed_tokens", g.spec.proposed},
                {"accepted_tokens", g.spec.accepted},
                {"emitted_tokens", g.spec.emitted},
                {"acceptance_rate", g.spec_acceptance_rate()},
                {"tokens_per_verify_step", g.spec_tokens_per_verify_step()}}},
              {"running", g.running},
              {"queued", g.waiting},
              {"max_batch_size", info.max_batch_size},
              {"max_queue", info.max_queue},
              {"max_seq_len", info.max_seq_len}};
}

void serve_loop(EngineInbox& inbox, EngineDispatch& dispatch, RequestOwner& owner,
                const std::atomic<bool>& stop_requested,
                std::chrono::milliseconds shutdown_timeout) {
  Clock::time_point drain_deadline = Clock::time_point::max();
  for (;;) {
    for (EngineCommand& cmd : inbox.take(std::chrono::milliseconds(owner.idle() ? 50 : 0))) {
      dispatch.handle(cmd, owner);
    }
    if (stop_requested && drain_deadline == Clock::time_point::max()) {
      inbox.set_draining();
      drain_deadline = Clock::now() + shutdown_timeout;
      std::cerr << "llama2 serve: draining (" << dispatch.in_flight() << " in flight, up to "
                << shutdown_timeout.count() << " ms)" << std::endl;
    }
    if (inbox.draining() && Clock::now() >= drain_deadline) {
      owner.cancel_all(FinishReason::kShuttingDown);
    }
    // Idle with remote replicas, the step still reads their heartbeats (data parallelism).
    owner.step();
    dispatch.flush();  // the step's token events went out quietly
    if (inbox.draining() && owner.idle()) break;
  }
}

}  // namespace llama2
