// The HTTP front's operations hooks on cpp-httplib (http_ops.h holds what they decide): each
// request's record and id from the first hook that sees it, CORS preflights, the key check and
// the other refusals before routing, the headers every response gets, the access line.
#include <cstdlib>
#include <string>

#include "coordinator/http/http_front_impl.h"

namespace llama2 {

using nlohmann::json;

int HttpFront::reload_fd() const {
  return impl_->ops ? impl_->ops->reload_fd() : -1;
}

CurrentRequest& HttpFront::Impl::begin(const httplib::Request& req) {
  CurrentRequest& c = t_current;
  if (c.req == &req) return c;
  c.req = &req;
  c.start = Clock::now();
  c.rec = AccessRecord{};
  c.rec.time = std::chrono::system_clock::now();
  c.rec.method = req.method;
  c.rec.route = req.path;
  // Unknown for a request the library could not read.
  c.rec.client =
      req.remote_addr.empty() ? "-" : req.remote_addr + ":" + std::to_string(req.remote_port);
  const auto it = req.headers.find("X-Request-Id");
  RequestIdChoice id = choose_request_id(it == req.headers.end() ? nullptr : &it->second);
  c.rec.request_id = std::move(id.id);
  c.id_error = std::move(id.error);
  c.refusal.reset();
  if (!id.replaced_because.empty()) {
    ops->note(c.rec.request_id, id.replaced_because + ": replaced by a generated id");
  }
  return c;
}

bool HttpFront::Impl::preflight(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "OPTIONS" || !opts.cors.enabled()) return false;
  const std::string origin = req.get_header_value("Origin");
  if (!cors_allow_origin(opts.cors, origin)) {
    send_error(res,
               api_error(ErrorCode::kInvalidRequest,
                         "CORS: the origin " + quote(origin) + " is not one of --allowed-origins",
                         "Origin"));
    return true;
  }
  res.status = 204;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? "Authorization, Content-Type, X-Request-Id" : asked);
  res.set_header("Access-Control-Max-Age", "600");
  return true;  // Allow-Origin and Vary: after_routing, as on every response
}

void HttpFront::Impl::after_routing(const httplib::Request& req, httplib::Response& res) {
  const CurrentRequest& c = begin(req);  // a request refused before routing (413) starts here
  res.set_header("X-Request-Id", c.rec.request_id);
  if (!opts.cors.enabled()) return;
  res.set_header("Vary", "Origin");
  if (const auto allow = cors_allow_origin(opts.cors, req.get_header_value("Origin"))) {
    res.set_header("Access-Control-Allow-Origin", *allow);
    res.set_header("Access-Control-Expose-Headers", "X-Request-Id");
  }
}

void HttpFront::Impl::log_response(const httplib::Request& req, const httplib::Response& res) {
  CurrentRequest& c = begin(req);
  c.rec.status = res.status;
  c.rec.total_s = std::chrono::duration<double>(Clock::now() - c.start).count();
  ops->finished(std::move(c.rec));
  c.req = nullptr;  // the next request on this thread may reuse the address
}

httplib::Server::HandlerResponse HttpFront::Impl::refuse_early(const httplib::Request& req,
                                                               httplib::Response& res,
                                                               const ApiError& e) {
  const bool body =
      std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > 0 ||
      req.has_header("Transfer-Encoding");
  if (req.method == "POST" && body) {
    t_current.refusal = e;
    return httplib::Server::HandlerResponse::Unhandled;
  }
  send_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpFront::Impl::post(const char* pattern,
                           std::function<void(const httplib::Request&, httplib::Response&)> f) {
  svr.Post(pattern, [f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
    if (t_current.refusal) return send_error(res, *t_current.refusal);
    f(req, res);
  });
}

httplib::Server::HandlerResponse HttpFront::Impl::before_routing(const httplib::Request& req,
                                                                 httplib::Response& res) {
  if (const CurrentRequest& c = begin(req); c.id_error) return refuse_early(req, res, *c.id_error);
  if (ConnectionPool::refusing()) {  // no thread free and the waiting list full
    res.set_header("Connection", "close");
    send_error(res, api_error(ErrorCode::kServerBusy,
                              "every connection thread is busy (--http-threads " +
                                  std::to_string(opts.threads) + "); retry later"));
    return httplib::Server::HandlerResponse::Handled;
  }
  // A browser's preflight carries no key and may come while the model loads.
  if (preflight(req, res)) return httplib::Server::HandlerResponse::Handled;
  if (!ready.load(std::memory_order_acquire)) {  // the model is still loading
    if (req.path == "/health" || req.path == "/ready") {
      res.status =
          probe_status(req.path == "/health" ? Probe::kLiveness : Probe::kReadiness, "starting");
      res.set_content(dump(json{{"status", "starting"}}), "application/json");
    } else if (req.path == "/version") {
      return httplib::Server::HandlerResponse::Unhandled;  // needs nothing of the engine
    } else {
      return refuse_early(req, res,
                          api_error(ErrorCode::kStarting,
                                    "the server is starting (the model is loading); retry when "
                                    "GET /ready answers 200"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }
  // /health, /ready, /version and /metrics stay open (load balancers and Prometheus carry no
  // key), as vLLM does; /tokenize and /detokenize read client text, so they need the key.
  const bool keyed =
      req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
  if (keyed) {
    if (auto refused = ops->check_key(req.get_header_value("Authorization")))
      return refuse_early(req, res, *refused);
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

}  // namespace llama2
