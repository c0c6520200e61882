// The HTTP front's operations parts, apart from the HTTP library (unit tests run this code): the
// request id of each request, the API keys and their SIGUSR2 reload, CORS, the access log and the
// responses counted by status (docs/serving.md, "Operations"). http_front.cpp calls them from
// cpp-httplib's pre-routing, post-routing and logger hooks.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/http/access_log.h"
#include "coordinator/http/api_keys.h"
#include "coordinator/http/openai_api.h"

namespace llama2 {

// --allowed-origins: "*" (any origin) or a comma list of origins ("https://app.example.com").
struct CorsPolicy {
  bool any = false;
  std::vector<std::string> origins;
  bool enabled() const { return any || !origins.empty(); }
};
// Error naming --allowed-origins and the expected shape for an entry that is not "*" or
// SCHEME://HOST[:PORT] (no path, no blank).
CorsPolicy parse_allowed_origins(const std::string& value);
// The Access-Control-Allow-Origin value for a request from `origin`, nullopt when not allowed
// (or CORS is off): "*" under "*", else the origin itself.
std::optional<std::string> cors_allow_origin(const CorsPolicy& policy, const std::string& origin);

// What the front does with a request's X-Request-Id header (`header`: nullptr when absent).
struct RequestIdChoice {
  std::string id;                 // the id the response and every log line carry
  std::string replaced_because;   // "" when the client's id is used or none was given
  std::optional<ApiError> error;  // a header past kMaxRequestIdHeaderBytes: 400
};
RequestIdChoice choose_request_id(const std::string* header);

struct HttpOpsOptions {
  std::string api_key;       // --api-key / $LLAMA2_API_KEY ("" none)
  std::string api_key_file;  // --api-key-file / $LLAMA2_API_KEY_FILE ("" none)
  AccessLogFormat access_log = AccessLogFormat::kOff;
  CorsPolicy cors;
  int log_fd = 2;  // where access lines and notes go
};

class HttpOps {
 public:
  // Error when the key file cannot be read or holds no key.
  explicit HttpOps(HttpOpsOptions opts);
  ~HttpOps();
  // The write end of the SIGUSR2 self-pipe (serve's handler writes one byte there).
  int reload_fd() const { return reloader_->write_fd(); }
  // nullopt when `authorization` ("Bearer KEY") is let in; the 401 otherwise.
  std::optional<ApiError> check_key(const std::string& authorization) const;
  bool keys_required() const { return keys_.required(); }
  const CorsPolicy& cors() const { return opts_.cors; }
  // A request ended (its response written): counted by status, and its access line.
  void finished(AccessRecord&& r);
  void note(const std::string& request_id, const std::string& text) { log_.note(request_id, text); }
  std::string status_metrics() const { return statuses_.render(); }

 private:
  HttpOpsOptions opts_;
  ApiKeys keys_;
  AccessLog log_;
  StatusCounts statuses_;
  std::unique_ptr<KeyReloader> reloader_;  // last: its thread uses keys_ and log_
};

}  // namespace llama2
