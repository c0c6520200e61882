#include "coordinator/serving/serve_loop.h"

#include <iostream>
#include <optional>
#include <vector>

#include "common/check.h"
#include "coordinator/http/http_exchange.h"

namespace llama2 {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

SocketBridge::SocketBridge(SocketServer& server, uint64_t seed) : server_(server), seeder_(seed) {}

void SocketBridge::handle(ServeCommand& cmd, RequestOwner& owner) {
  switch (cmd.kind) {
    case ServeCommand::Kind::kGenerate:
      return submit(cmd, owner);
    case ServeCommand::Kind::kDisconnect:
      owner.disconnect(cmd.conn);
      return;
    case ServeCommand::Kind::kCancel:
    case ServeCommand::Kind::kExpired: {
      // Cancel one id of a connection, or free a generation the socket thread already ended at
      // its deadline (found by serial: the client may have reused the id).
      const bool expired = cmd.kind == ServeCommand::Kind::kExpired;
      std::vector<int64_t> hit;
      for (const auto& [id, r] : routes_) {
        if (expired ? r.serial == cmd.serial : r.conn == cmd.conn && r.id == cmd.id)
          hit.push_back(id);
      }
      for (int64_t id : hit)
        owner.cancel(id, expired ? FinishReason::kTimeout : FinishReason::kCancelled);
      return;
    }
  }
}

void SocketBridge::submit(ServeCommand& cmd, RequestOwner& owner) {
  const int64_t id = next_id_++;
  const uint64_t seed = cmd.request.params.seed.value_or(seeder_());
  Route& r = routes_[id];
  r.conn = cmd.conn;
  r.serial = cmd.serial;
  r.id = cmd.id;
  r.id_json = json(cmd.id).dump(-1, ' ', false, json::error_handler_t::replace);
  r.stream = cmd.stream;
  r.logprobs = cmd.request.params.logprobs;
  r.seed = seed;
  r.http = std::move(cmd.http);
  std::optional<Refusal> refusal =
      owner.submit(SubmitRequest{id, std::move(cmd.request.prompt), cmd.request.params, seed},
                   std::move(cmd.place), cmd.deadline, cmd.conn);
  if (refusal && r.http) {  // the HTTP thread checked the same limits
    r.http->fail(refusal->code, refusal->message);
    routes_.erase(id);
  } else if (refusal) {  // the socket thread checked the same limits: only a changed limit gets
                         // here
    server_.send(r.conn, error_event(r.id, refusal->code, refusal->message), r.id, r.serial, true);
    routes_.erase(id);
  }
}

void SocketBridge::on_token(const TokenEvent& ev) {
  const Route& r = routes_.at(ev.id);
  if (r.http) {
    if (r.stream) {
      r.http->push_token(ev);
      touched_.push_back(r.http);
    }
  } else if (r.stream) {
    server_.send_quiet(r.conn,
                       SocketServer::token_event(r.id_json, ev.index, ev.token, ev.text,
                                                 r.logprobs ? &ev : nullptr),
                       r.id, r.serial, false);
  }
}

void SocketBridge::on_finished(const Finished& res, const Timings& t) {
  const auto it = routes_.find(res.id);
  LLAMA2_CHECK(it != routes_.end());
  const Route& r = it->second;
  if (r.http) {
    if (res.finish_reason == FinishReason::kShuttingDown) {
      r.http->fail(ErrorCode::kShuttingDown,
                   "the server shut down before this generation finished");
    } else {
      r.http->finish(res, t);
      r.http->notify();
    }
    routes_.erase(it);
    return;
  }
  json ev;
  if (res.finish_reason == FinishReason::kShuttingDown) {
    ev = error_event(r.id, ErrorCode::kShuttingDown,
                     "the server shut down before this generation finished");
  } else {
    ev = json{
        {"event", "done"},
        {"id", r.id},
        {"finish_reason", to_string(res.finish_reason)},
        {"seed", r.seed},
        {"usage", {{"prompt_tokens", res.prompt_tokens}, {"completion_tokens", res.tokens.size()}}},
        {"timings",
         {{"queue_s", t.queue_s}, {"time_to_first_token_s", t.ttft_s}, {"total_s", t.total_s}}}};
    if (!r.stream) {
      ev["text"] = res.text;
      ev["token_ids"] = res.tokens;
      if (r.logprobs) add_logprobs_json(res, &ev);
    }
  }
  server_.send(r.conn, ev, r.id, r.serial, true);
  routes_.erase(it);
}

void SocketBridge::flush() {
  if (touched_.empty()) return;
  if (!notifier_) notifier_ = std::make_unique<ExchangeNotifier>();
  notifier_->post(touched_);
}

json health_event(const SocketServer* server, const Admission& admission, const HealthInfo& info) {
  const Gauges g = admission.gauges();
  return json{{"event", "health"},
              {"status", !server              ? "ready"
                         : server->stalled()  ? "stalled"
                         : server->draining() ? "draining"
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
              {"running", g.running},
              {"queued", g.waiting},
              {"max_batch_size", info.max_batch_size},
              {"max_queue", info.max_queue},
              {"max_seq_len", info.max_seq_len}};
}

void serve_loop(SocketServer& server, SocketBridge& bridge, RequestOwner& owner,
                const std::atomic<bool>& stop_requested,
                std::chrono::milliseconds shutdown_timeout) {
  Clock::time_point drain_deadline = Clock::time_point::max();
  for (;;) {
    for (ServeCommand& cmd :
         server.take_commands(std::chrono::milliseconds(owner.idle() ? 50 : 0))) {
      bridge.handle(cmd, owner);
    }
    if (stop_requested && !server.draining()) {
      server.set_draining();
      drain_deadline = Clock::now() + shutdown_timeout;
      std::cerr << "llama2 serve: draining (" << bridge.in_flight() << " in flight, up to "
                << shutdown_timeout.count() << " ms)" << std::endl;
    }
    if (server.draining() && Clock::now() >= drain_deadline)
      owner.cancel_all(FinishReason::kShuttingDown);
    if (!owner.idle()) {
      owner.step();
      server.wake();  // the step's token events went out quietly
      bridge.flush();
    } else {
      owner.step();  // idle: only reads the other replicas' heartbeats (data parallelism)
    }
    if (server.draining() && owner.idle()) break;
  }
}

}  // namespace llama2
