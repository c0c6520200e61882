#include "coordinator/serving/socket_generation.h"

#include <nlohmann/json.hpp>

#include "coordinator/requests/request.h"
#include "coordinator/requests/request_tools.h"
#include "coordinator/serving/protocol.h"
#include "coordinator/serving/socket_server.h"

namespace llama2 {

using nlohmann::json;

SocketGeneration::SocketGeneration(SocketServer& server, uint64_t conn, uint64_t ticket,
                                   std::string id, bool stream, bool logprobs, bool tools,
                                   bool prompt_logprobs)
    : server_(server),
      conn_(conn),
      ticket_(ticket),
      id_(std::move(id)),
      id_json_(json(id_).dump(-1, ' ', false, json::error_handler_t::replace)),
      stream_(stream),
      logprobs_(logprobs),
      tools_(tools),
      prompt_logprobs_(prompt_logprobs) {}

void SocketGeneration::on_token(const TokenEvent& ev) {
  if (!stream_) return;
  server_.send_quiet(
      conn_,
      SocketServer::token_event(id_json_, ev.index, ev.token, ev.text, logprobs_ ? &ev : nullptr),
      id_, ticket_, false);
}

void SocketGeneration::on_finished(const Finished& res, const Timings& t) {
  json ev{
      {"event", "done"},
      {"id", id_},
      {"finish_reason", to_string(res.finish_reason)},
      {"seed", res.seed},
      {"usage", {{"prompt_tokens", res.prompt_tokens}, {"completion_tokens", res.tokens.size()}}},
      {"timings",
       {{"queue_s", t.queue_s}, {"time_to_first_token_s", t.ttft_s}, {"total_s", t.total_s}}}};
  if (!stream_) {
    ev["text"] = res.text;
    ev["token_ids"] = res.tokens;
    if (logprobs_) add_logprobs_json(res, &ev);
  }
  if (tools_) add_tool_calls_json(res.text, &ev);
  if (prompt_logprobs_) ev["prompt_logprobs"] = prompt_logprobs_json(res);
  if (json spec = speculative_json(res); !spec.is_null()) ev["speculative"] = std::move(spec);
  server_.send(conn_, ev, id_, ticket_, true);
}

void SocketGeneration::on_error(ErrorCode code, const std::string& message) {
  server_.send(conn_, error_event(id_, code, message), id_, ticket_, true);
}

SinkFlusher& SocketGeneration::flusher() {
  return server_;
}

}  // namespace llama2
